"""Flaky failure: when the culprit node is present, fails with probability ``--p`` only.

The coin of a node set's first check is seeded by the candidate itself (sha256 of ``--salt`` and
the sorted node names), so the same node set gets the same first answer from both reducers and on
a re-run, while different node sets containing the culprit disagree now and then, as a flaky
TensorRT build would. A *repeat* of a node set in the same run (the k-th check of it, counted in
``$BENCH_CHECK_LOG.runs``) gets a fresh coin seeded by the salt, the names and k, as a real flaky
check would give: Polygraphy never checks a node set twice in a run, so its verdicts are exactly
those of the per-node-set coin."""

import argparse
import hashlib
import os
import random

from _common import finish, graph_nodes


def coin(salt: str, names: list[str], repeat: int = 0) -> float:
    parts = [salt, *sorted(names)] + ([f"repeat={repeat}"] if repeat else [])
    digest = hashlib.sha256("\n".join(parts).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big")).random()


def previous_checks(names: list[str]) -> int:
    """How many times this node set was checked before in this run (0 without a check log)."""
    log = os.environ.get("BENCH_CHECK_LOG")
    if not log:
        return 0
    key = hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest()
    path = f"{log}.runs"
    seen: list[str] = []
    if os.path.exists(path):
        with open(path) as f:
            seen = f.read().split()
    with open(path, "a") as f:
        f.write(key + "\n")
    return seen.count(key)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--node", required=True)
    parser.add_argument("--p", type=float, default=0.7)
    parser.add_argument("--salt", default="0")
    args = parser.parse_args()
    nodes = graph_nodes(args.model)
    names = [name for name, _ in nodes]
    failed = args.node in names and coin(args.salt, names, previous_checks(names)) < args.p
    finish("flaky", failed, len(nodes), f"{args.node} present and the coin said fail")
