"""A check script that fails only some of the time, for tests of flaky checks (CLI and service).

    python tests/flaky_check.py MODEL NAME P SEED LOG

Fails (prints FLAKY-FAIL, exits 1) on a model whose bytes hold NAME with probability P, drawn
afresh on every run: the draw is seeded by SEED, the model's bytes and how many times those bytes
were checked before (counted in the file LOG), so a repeat of the same candidate gets a new draw
while a whole test run stays reproducible. The first run (the original model) always fails.
Standard library only: it runs in the check's own interpreter."""

from __future__ import annotations

import hashlib
import random
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve()


def command(model: str, name: str, p: float, seed: int, log: Path) -> list[str]:
    """The argv that runs this script as a check."""
    return [sys.executable, str(SCRIPT), model, name, str(p), str(seed), str(log.resolve())]


def main(argv: list[str]) -> int:
    model, name, p, seed, log = argv[0], argv[1], float(argv[2]), argv[3], Path(argv[4])
    data = Path(model).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    seen = log.read_text().split() if log.exists() else []
    with log.open("a") as f:
        f.write(digest + "\n")
    draw = random.Random(f"{seed}:{digest}:{seen.count(digest)}").random()
    fails = name.encode() in data and (not seen or draw < p)
    print("FLAKY-FAIL" if fails else "ok")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
