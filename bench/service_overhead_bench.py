"""Service overhead per verdict (issue 18): how long the farm spends around each check, and whether it
grows with the job. One Celery worker (so checks run one after another), PostgreSQL, Redis and the
api; a chain model with one culprit and a trivial check (a ``grep`` in ``sh``, a few ms). For each
checked iteration, overhead = (its ``finished_at`` - the previous iteration's) - its check time:
writing the candidate, storing it, recording the verdict, advancing the session, queueing and
taking the next check. Reported as the median over a window of checks around check 100 and around
check 2,000 (``--late``), and their ratio (flat: about 1).

    python bench/service_overhead_bench.py [--jobs linear auto] [--linear-nodes 1200]
        [--auto-nodes 10000] [--max-checks 2100] [--label before]

A ``linear`` job tries every cut: a 1,200-node chain runs 2,000+ checks (the job is cancelled once
``--max-checks`` verdicts are in). The ``auto`` job reduces a 10k-node chain (a few hundred checks).
Needs PostgreSQL (``BENCH_POSTGRES_URL``; a throwaway database is created and dropped) and Redis
(``BENCH_REDIS_URL``, default db 3). Results go to ``bench/out/service_overhead-<label>.json``/``.md``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from service_parallel_bench import OUT, Farm, chain_model  # noqa: E402

from persistence.db import normalize_url  # noqa: E402

WINDOW = 50  # checks each side of the check a median is taken around


def fast_check(culprit: int) -> str:
    """Fails (exit 1) while the culprit is in the model; no sleep."""
    return f"kind: command\ncommand: [sh, -c, '! grep -q n{culprit}_Mul \"$1\"', check, '{{model}}']\ntimeout: 600\n"


def run_job(farm: Farm, model: bytes, spec: str, mode: str, max_checks: int, timeout_s: float) -> dict[str, Any]:
    """Submit, wait (cancel once ``max_checks`` verdicts are in), and read the iteration rows."""
    with farm.client() as client:
        response = client.post(
            "/v1/jobs", files={"model": ("model.onnx", model)}, data={"check_spec": spec, "mode": mode}
        )
        response.raise_for_status()
        job_id = response.json()["id"]
        started = time.monotonic()
        while True:
            job = client.get(f"/v1/jobs/{job_id}").json()
            if job["status"] in ("succeeded", "failed", "cancelled"):
                break
            if job["progress"]["checks_run"] >= max_checks or time.monotonic() - started > timeout_s:
                client.post(f"/v1/jobs/{job_id}/cancel")
            time.sleep(1.0)
    engine = create_engine(normalize_url(farm.url))
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT number, finished_at, duration_s, cached FROM iterations "
                "WHERE job_id = :job AND NOT pending ORDER BY number"
            ),
            {"job": job_id},
        ).all()
    engine.dispose()
    return {"status": job["status"], "wall_s": round(time.monotonic() - started, 1), "rows": rows}


def overheads(rows: list[Any]) -> list[float]:
    """Per checked iteration after the first: the time since the previous verdict minus its check."""
    result: list[float] = []
    for before, row in itertools.pairwise(rows):
        if row.cached or before.finished_at is None or row.finished_at is None:
            continue
        result.append((row.finished_at - before.finished_at).total_seconds() - (row.duration_s or 0.0))
    return result


def median_around(values: list[float], at: int) -> float | None:
    """The median (ms) of the overheads of checks ``at - WINDOW`` .. ``at + WINDOW`` (1-based)."""
    window = values[max(at - 1 - WINDOW, 0) : at + WINDOW]
    return round(statistics.median(window) * 1000, 1) if window else None


def measure(farm: Farm, mode: str, nodes: int, args: argparse.Namespace) -> dict[str, Any]:
    culprit = nodes * 2 // 3
    job = run_job(farm, chain_model(nodes, culprit), fast_check(culprit), mode, args.max_checks, args.timeout)
    values = overheads(job["rows"])
    return {
        "job": f"{mode} {nodes} nodes",
        "status": job["status"],
        **overhead_summary(values, args.late, job["wall_s"]),
    }


def overhead_summary(values: list[float], late_at_most: int, wall_s: float) -> dict[str, Any]:
    """The checks, the wall time, and the median overhead (ms) overall, around check 100 and around
    a late check (``late_at_most``, or the last whose window fits)."""
    late = min(late_at_most, len(values) - WINDOW) if len(values) > 2 * WINDOW + 100 else len(values)
    early, at_late = median_around(values, 100), median_around(values, late)
    return {
        "checks": len(values) + 1,
        "wall_s": wall_s,
        "median_ms": round(statistics.median(values) * 1000, 1) if values else None,
        "at_100_ms": early,
        "late_at": late,
        "at_late_ms": at_late,
        "late_vs_100": round(at_late / early, 2) if early and at_late else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", nargs="+", default=["linear", "auto"], choices=["linear", "auto"])
    parser.add_argument("--linear-nodes", type=int, default=1200)
    parser.add_argument("--auto-nodes", type=int, default=10000)
    parser.add_argument("--max-checks", type=int, default=2100)
    parser.add_argument("--late", type=int, default=2000, help="the check the late median is taken around")
    parser.add_argument("--timeout", type=float, default=3600.0, help="cancel the job after this many seconds")
    parser.add_argument("--label", default="run")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="orx-overhead-bench-") as tmp:
        farm = Farm(1, Path(tmp))
        try:
            for mode in args.jobs:
                rows.append(measure(farm, mode, args.linear_nodes if mode == "linear" else args.auto_nodes, args))
                print(rows[-1], flush=True)
        finally:
            farm.close()
    OUT.mkdir(exist_ok=True)
    (OUT / f"service_overhead-{args.label}.json").write_text(json.dumps({"label": args.label, "rows": rows}, indent=2))
    keys = ("job", "status", "checks", "wall_s", "median_ms", "at_100_ms", "late_at", "at_late_ms", "late_vs_100")
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows]
    (OUT / f"service_overhead-{args.label}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
