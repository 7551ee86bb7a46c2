"""The farm verdict cache (issue 10): the same accuracy job submitted twice to ``onnx-reducer serve``
(embedded: SQLite, the in-process runner, one team). The planted fp16 overflows of
``localize_bench.py`` are reduced with their golden values (localised: original, layerwise run,
the node alone, min-good) and without (the layerwise run finds no single culprit on some models,
then the strategy reduces). The second job of each pair should run no check: every verdict, and the
layerwise run, comes from the first job's.

    python bench/farm_cache_bench.py [--models chain multi_io ...] [--code DIR] [--label NAME]

Results go to ``bench/out/farm_cache-<label>.json`` and ``.md``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from service_localize_bench import (  # noqa: E402
    Service,
    planted_folder,
    service_bench_args,
    submit_planted,
    wait_for_end,
    write_results,
)


def submit_and_wait(client: httpx.Client, folder: Path, golden: bool, timeout: float) -> dict[str, Any]:
    ended = wait_for_end(client, submit_planted(client, folder, golden), timeout, poll_s=0.2)
    if ended is None:
        return {"status": "timeout"}
    job, wall = ended
    progress = job["progress"]
    return {
        "status": job["status"],
        "checks": progress["checks_run"],
        "cache_hits": progress.get("cache_hits"),
        "farm_cache_hits": progress.get("farm_cache_hits"),
        "nodes_after": job["nodes_after"],
        "wall_s": round(wall, 2),
    }


def markdown(rows: list[dict[str, Any]], label: str) -> str:
    header = f"| model ({label}) | golden | 1st job: checks / wall s | 2nd job: checks / farm hits / wall s "
    lines = [header + "| same result |", "|---|:---:|---:|---:|:---:|", *(_table_row(row) for row in rows)]
    return "\n".join(lines) + "\n"


def _table_row(row: dict[str, Any]) -> str:
    first, second = row["first"], row["second"]
    return (
        f"| {row['model']} | {'yes' if row['golden'] else 'no'} | {first.get('checks')} / {first.get('wall_s')} "
        f"| {second.get('checks')} / {second.get('farm_cache_hits')} / {second.get('wall_s')} "
        f"| {'yes' if first.get('nodes_after') == second.get('nodes_after') else 'NO'} |"
    )


def main(argv: list[str] | None = None) -> int:
    args, env = service_bench_args(__doc__, ["chain", "multi_io"], argv)
    rows = []
    with Service(env) as client:
        for name in args.models:
            folder = planted_folder(name, args.timeout)
            for golden in (True, False):
                first = submit_and_wait(client, folder, golden, args.timeout)
                second = submit_and_wait(client, folder, golden, args.timeout)
                row = {"model": name, "golden": golden, "first": first, "second": second}
                print(json.dumps(row), flush=True)
                rows.append(row)
    write_results("farm_cache", args.label, rows, markdown(rows, args.label))
    return 0


if __name__ == "__main__":
    sys.exit(main())
