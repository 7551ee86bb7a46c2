"""One job's checks spread over every idle worker of its queue, and fair share between teams, with
real PostgreSQL, Redis and Celery worker processes: the same answer on 1 and 3 workers as on the
command line, a worker SIGKILLed mid-check loses and duplicates nothing, cancel stops every
running check, MAX_WORKERS_PER_JOB caps a job's workers, another team's job starts before the
rest of a busy team's queue."""

from __future__ import annotations

import io
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import onnx
import pytest
from sqlalchemy import create_engine, text

from persistence.db import normalize_url
from tests.service.conftest import Processes, client_for
from tests.service.embedded import embedded_server
from tests.service.helpers import chain_model, eventually, read_sse, submit, wait_job

pytestmark = pytest.mark.slow
CLI = [sys.executable, "-m", "reducer_cli.main"]
MODEL = chain_model(12, 7).SerializeToString()
# deterministic, and slow enough to watch: fails (exit 1) while the Mul node is in the model
SLEEPY_MUL = (
    "kind: command\ncommand: [sh, -c, 'sleep {s}; ! grep -q n7_Mul \"$1\"', check, '{{model}}']\ntimeout: 120\n"
)
CHECK = SLEEPY_MUL.format(s="0.6")
LONG_SLEEP = "31.4159"  # a check that runs until cancelled, found by its command line
LONG_CHECK = f"kind: command\ncommand: [sleep, '{LONG_SLEEP}']\ntimeout: 120\n"


def _watch(client: httpx.Client, job_id: str) -> tuple[dict[str, Any], int, set[str]]:
    """Poll the job to its end: the final job, the most checks seen in flight at once, their workers."""
    most, workers = 0, set()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        flight = job["checks_in_flight"]
        most = max(most, len(flight))
        workers |= {c["worker"] for c in flight}
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job, most, workers
        time.sleep(0.15)
    raise AssertionError(f"job {job_id} did not finish")


def _min_bad_ops(client: httpx.Client, job_id: str) -> tuple[bytes, list[str]]:
    content = client.get(f"/v1/jobs/{job_id}/artifacts/min-bad").content
    return content, [n.op_type for n in onnx.load_model(io.BytesIO(content)).graph.node]


def _iterations(client: httpx.Client, job_id: str) -> list[dict[str, Any]]:
    return client.get(f"/v1/jobs/{job_id}/iterations", params={"limit": 1000}).json()["items"]


def _cli_min_bad(folder: Path) -> bytes:
    folder.mkdir()
    (folder / "model.onnx").write_bytes(MODEL)
    (folder / "spec.yaml").write_text(CHECK)
    command = [*CLI, "reduce", "model.onnx", "-o", "min_bad.onnx", "--check-spec", "spec.yaml", "-q"]
    subprocess.run(command, cwd=folder, check=True, capture_output=True, timeout=600)
    return (folder / "min_bad.onnx").read_bytes()


def _units(db_url: str, job_id: str) -> list[tuple[str, str, int]]:
    """The job's check units (its finish unit, the job's end, is no check)."""
    engine = create_engine(normalize_url(db_url))
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT status, worker, number FROM check_units WHERE job_id = :id AND kind != 'finish'"),
            {"id": job_id},
        ).all()
    engine.dispose()
    return [(str(s), str(w), int(n)) for s, w, n in rows]


def test_one_job_over_three_workers_gives_the_answer_of_one_worker_and_of_the_command_line(
    command_api_url: str, processes: Processes, tokens: dict[str, str], tmp_path: Path, db_url: str
) -> None:
    processes.worker()
    with client_for(command_api_url, tokens["team-a"]) as client:
        alone = submit(client, MODEL, CHECK).json()["id"]
        job, most_alone, _ = _watch(client, alone)
        assert job["status"] == "succeeded", job
        assert most_alone == 1  # one worker: one check at a time
        bytes_alone, ops = _min_bad_ops(client, alone)
        processes.worker()
        processes.worker()
    with client_for(command_api_url, tokens["team-b"]) as client:  # another team: no farm-cached verdicts
        spread = submit(client, MODEL, CHECK).json()["id"]
        job, most, workers = _watch(client, spread)
        assert job["status"] == "succeeded", job
        bytes_spread, _ = _min_bad_ops(client, spread)
        events = list(read_sse(client, f"/v1/jobs/{spread}/events"))
        iterations = _iterations(client, spread)
    assert ops == ["Mul"]
    assert bytes_spread == bytes_alone == _cli_min_bad(tmp_path / "cli")
    assert most >= 2, "checks of the job ran at the same time"
    ran_on = {e.data["worker"] for e in events if e.kind == "iteration"}
    assert len(ran_on) >= 2 and len(workers) >= 2, (ran_on, workers)
    assert any(e.kind == "check_started" for e in events)
    numbers = [it["number"] for it in iterations]
    assert len(numbers) == len(set(numbers))
    done = [u for u in _units(db_url, spread) if u[0] == "done"]
    assert sorted(u[2] for u in done) == _ran_as(events, len(iterations))  # each finished check recorded once


def test_a_worker_killed_mid_check_loses_and_duplicates_nothing(
    command_api_url: str, processes: Processes, tokens: dict[str, str], db_url: str
) -> None:
    procs = [processes.worker(), processes.worker(), processes.worker()]
    by_name = {f"{socket.gethostname()}:{p.popen.pid}": p for p in procs}
    with client_for(command_api_url, tokens["team-a"]) as client:
        job_id = submit(client, MODEL, SLEEPY_MUL.format(s="1.5")).json()["id"]

        def running_on_a_worker() -> str | None:
            flight = client.get(f"/v1/jobs/{job_id}").json()["checks_in_flight"]
            named = [c["worker"] for c in flight if c["worker"] in by_name and c["iteration"] > 1]
            return named[0] if named else None

        victim = eventually(running_on_a_worker, 120, "a check in flight past the original")
        by_name[victim].kill()
        job = wait_job(client, job_id, timeout=300)
        assert job["status"] == "succeeded", job
        _, ops = _min_bad_ops(client, job_id)
        iterations = _iterations(client, job_id)
        events = list(read_sse(client, f"/v1/jobs/{job_id}/events"))
    assert ops == ["Mul"]
    fingerprints = [it["fingerprint"] for it in iterations]
    assert len(fingerprints) == len(set(fingerprints)), "a candidate's verdict was recorded twice"
    done = sorted(n for s, _, n in _units(db_url, job_id) if s == "done")
    assert done == _ran_as(events, len(iterations))


def _ran_as(events: list[Any], recorded: int) -> list[int]:
    """The numbers the recorded checks ran under (a unit keeps its number; the iteration's event
    says it as ``started_as``), sorted; one per recorded iteration, none of them cached."""
    ran_as = [e.data.get("started_as") for e in events if e.kind == "iteration"]
    assert None not in ran_as and len(ran_as) == recorded, ran_as  # (a cached one has no check)
    return sorted(n for n in ran_as if n is not None)


def test_cancel_stops_every_running_check_of_the_job_within_seconds(
    command_api_url: str, processes: Processes, tokens: dict[str, str]
) -> None:
    for _ in range(3):
        processes.worker()
    with client_for(command_api_url, tokens["team-a"]) as client:
        job_id = submit(client, MODEL, LONG_CHECK).json()["id"]
        eventually(lambda: len(client.get(f"/v1/jobs/{job_id}").json()["checks_in_flight"]) >= 2, 120, "2 checks")
        eventually(lambda: _sleeping_checks() >= 2, 30, "2 check processes")
        client.post(f"/v1/jobs/{job_id}/cancel")
        started = time.monotonic()
        job = wait_job(client, job_id, timeout=30)
        assert job["status"] == "cancelled"
        eventually(lambda: _sleeping_checks() == 0, 15, "the checks to die")
        assert time.monotonic() - started < 20
        assert client.get(f"/v1/jobs/{job_id}").json()["checks_in_flight"] == []


def _sleeping_checks() -> int:
    found = subprocess.run(["pgrep", "-f", f"sleep {LONG_SLEEP}"], check=False, capture_output=True, text=True)
    return len(found.stdout.split())


def test_max_workers_per_job_caps_the_checks_one_job_runs_at_once(
    command_api_url: str, processes: Processes, tokens: dict[str, str]
) -> None:
    for _ in range(3):
        processes.worker(MAX_WORKERS_PER_JOB="2")
    with client_for(command_api_url, tokens["team-a"]) as client:
        job_id = submit(client, MODEL, CHECK).json()["id"]
        job, most, _ = _watch(client, job_id)
    assert job["status"] == "succeeded", job
    assert most == 2


def test_another_teams_job_starts_before_the_rest_of_a_busy_teams_queue(
    command_api_url: str, processes: Processes, tokens: dict[str, str]
) -> None:
    """Two teams, one worker: team A queues three jobs, then team B one; B's starts second."""
    small = chain_model(6, 3).SerializeToString()
    spec = SLEEPY_MUL.format(s="0.2").replace("n7_Mul", "n3_Mul")
    with (
        client_for(command_api_url, tokens["team-a"]) as a,
        client_for(command_api_url, tokens["team-b"]) as b,
    ):
        a_jobs = []
        for _ in range(3):
            a_jobs.append(submit(a, small, spec).json()["id"])
            time.sleep(0.05)
        b_job = submit(b, small, spec).json()["id"]
        queued = b.get(f"/v1/jobs/{b_job}").json()
        assert queued["status"] == "queued"
        assert queued["queue_position"] == 2  # after A's oldest, before A's other two
        assert a.get(f"/v1/jobs/{a_jobs[2]}").json()["queue_position"] == 4
        processes.worker()
        ended = [wait_job(a, j, timeout=300) for j in a_jobs] + [wait_job(b, b_job, timeout=300)]
    assert all(j["status"] == "succeeded" for j in ended), ended
    a1, a2, a3, b1 = (j["started_at"] for j in ended)
    assert a1 < b1 < a2 < a3
    assert ended[3]["finished_at"] < ended[1]["finished_at"]


def test_the_embedded_server_runs_a_job_on_its_local_worker_slots(tmp_path: Path) -> None:
    """``onnx-reducer serve`` (SQLite, no broker) with LOCAL_WORKERS=2: two checks of one job at once."""
    settings = {"LOCAL_WORKERS": "2", "ALLOW_COMMAND_CHECKS": "true"}
    with embedded_server(tmp_path, settings) as server, client_for(server.url, server.token) as client:
        assert client.get("/v1/workers").json()["online"] == 2
        job_id = submit(client, MODEL, CHECK).json()["id"]
        job, most, workers = _watch(client, job_id)
        _, ops = _min_bad_ops(client, job_id)
    assert job["status"] == "succeeded", job
    assert ops == ["Mul"]
    assert most == 2 and len(workers) == 2, (most, workers)


def test_a_teams_running_checks_are_capped_and_the_other_team_uses_the_free_workers(
    command_api_url: str, processes: Processes, tokens: dict[str, str]
) -> None:
    for _ in range(3):
        processes.worker(TEAM_MAX_RUNNING_CHECKS="1")
    with (
        client_for(command_api_url, tokens["team-a"]) as a,
        client_for(command_api_url, tokens["team-b"]) as b,
    ):
        jobs = [(a, submit(a, MODEL, CHECK).json()["id"]), (b, submit(b, MODEL, CHECK).json()["id"])]
        most_per_job, most_together = [0, 0], 0
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            seen = [client.get(f"/v1/jobs/{job_id}").json() for client, job_id in jobs]
            flying = [len(job["checks_in_flight"]) for job in seen]
            most_per_job = [max(m, f) for m, f in zip(most_per_job, flying, strict=True)]
            most_together = max(most_together, sum(flying))
            if all(job["status"] in ("succeeded", "failed", "cancelled") for job in seen):
                break
            time.sleep(0.15)
    assert [job["status"] for job in seen] == ["succeeded", "succeeded"], seen
    assert most_per_job == [1, 1]  # three workers, but one check per team at a time
    assert most_together == 2
