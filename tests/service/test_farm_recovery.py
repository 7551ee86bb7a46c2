"""Faults must not strand work (issues 8 and 18), against real PostgreSQL, Redis and Celery
workers: a job whose message a worker consumed while the database was down runs once it is back; a
worker started during an outage starts its heartbeat when the database returns; a job whose only
worker was killed is taken again by an idle worker that got no message for it, and no message
stays in Redis; a worker cut off from Redis still does the work (no message reaches it); a check
dies with its worker; a cancelled check's blob is swept; the worker logs when a job starts and ends."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import redis
from sqlalchemy import create_engine, select

from persistence.db import Database, normalize_url
from persistence.enums import ArtifactKind, JobStatus
from persistence.models import Artifact
from persistence.repositories import ArtifactRepository, TeamRepository
from persistence.store import ArtifactStore
from tests.service.conftest import Processes, client_for
from tests.service.helpers import OP_PRESENT_MUL, Proc, chain_model, eventually, stored_job, submit, wait_job
from tests.service.tcp_proxy import TcpProxy
from worker.maintenance import sweep_unreferenced_blobs

SMALL_MODEL = chain_model(4, 2).SerializeToString()


def via_proxy(url: str, proxy: TcpProxy) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{proxy.port}"
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))


def database_proxy(db_url: str) -> TcpProxy:
    parts = urlsplit(db_url)
    return TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)


def log_messages(proc: Proc) -> list[str]:
    messages = []
    for line in proc.output().splitlines():
        try:
            messages.append(str(json.loads(line)["message"]))
        except (ValueError, KeyError, TypeError):
            continue
    return messages


def sleeping_command(marker: str, seconds: int = 300) -> str:
    """A command check that runs for ``seconds``; ``marker`` names its processes."""
    return json.dumps(
        {"kind": "command", "command": [sys.executable, "-c", f"import time; time.sleep({seconds})", marker]}
    )


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                args = entry.joinpath("cmdline").read_bytes().split(b"\0")
                state = entry.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker.encode() in args and state != "Z":
                found.append(int(entry.name))
    return found


def test_a_job_consumed_during_a_database_outage_runs_when_the_database_is_back(
    api_url: str, processes: Processes, tokens: dict[str, str], db_url: str
) -> None:
    proxy = database_proxy(db_url).start()
    worker = processes.worker(DATABASE_URL=via_proxy(db_url, proxy))
    try:
        with client_for(api_url, tokens["team-a"]) as client:
            proxy.stop()  # the outage: the api still reaches the database, the worker does not
            job_id = submit(client, chain_model(6, 3).SerializeToString()).json()["id"]
            worker.wait_for("the database is unreachable", timeout=60)  # it took the message and could not claim
            time.sleep(1)
            assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "queued"
            proxy.start()
            job = wait_job(client, job_id, timeout=90)
        assert job["status"] == "succeeded", job
        started = [m for m in log_messages(worker) if m.startswith(f"job {job_id} started: ")]
        assert len(started) == 1, started  # found by polling once the database was back: no message came again
    finally:
        proxy.stop()


def test_a_worker_started_during_an_outage_starts_its_heartbeat_when_the_database_returns(
    api_url: str, processes: Processes, tokens: dict[str, str], db_url: str
) -> None:
    proxy = database_proxy(db_url)  # not listening: the database is unreachable from the start
    worker = processes.worker(DATABASE_URL=via_proxy(db_url, proxy))
    try:
        with client_for(api_url, tokens["team-a"]) as client:
            job_id = submit(client, chain_model(6, 3).SerializeToString()).json()["id"]
            worker.wait_for("the database is unreachable", timeout=60)
            assert client.get("/v1/workers").json()["items"] == []
            proxy.start()
            eventually(lambda: len(client.get("/v1/workers").json()["items"]) == 1, 60, "the worker reports itself")
            job = wait_job(client, job_id, timeout=90)
        assert job["status"] == "succeeded", job
        assert any("worker heartbeat failed" in m for m in log_messages(worker))
    finally:
        proxy.stop()


def test_a_killed_workers_job_is_taken_again_without_its_message(
    command_api_url: str, processes: Processes, tokens: dict[str, str], redis_url: str
) -> None:
    """The only worker is SIGKILLed mid-check. Its message stays in Redis's unacknowledged set
    (the solo pool acknowledges a message when its task returns), and nothing waits for Redis to
    hand it out again: the next worker, which got no message, finds the job in the database once
    its lease ran out and takes it again."""
    client_redis = redis.Redis.from_url(redis_url)
    first = processes.worker()
    marker = f"job-x-{uuid.uuid4().hex}"
    with client_for(command_api_url, tokens["team-a"]) as client:
        x = submit(client, SMALL_MODEL, sleeping_command(marker)).json()["id"]
        eventually(lambda: bool(processes_with(marker)), 60, "job X's check runs")
        first.kill()
        eventually(lambda: not processes_with(marker), 30, "the check died with its worker")
        dead_message = client_redis.hkeys("unacked")
        assert len(dead_message) == 1  # the dead worker's message: Redis hands it out again only in an hour
        queued = client_redis.llen("cpu")
        second = processes.worker()
        eventually(lambda: client.get(f"/v1/jobs/{x}").json()["attempts"] == 2, 120, "X is taken again")
        eventually(lambda: bool(processes_with(marker)), 120, "X's check runs again")
        assert queued == 0 and client_redis.hexists("unacked", dead_message[0])  # no message brought X back
        client.post(f"/v1/jobs/{x}/cancel")
        assert wait_job(client, x)["status"] == "cancelled"
    second.wait_for(f"job {x}: its workers are gone; this worker takes it again", timeout=10)
    client_redis.close()


def test_a_worker_cut_off_from_redis_still_does_the_work(
    api_url: str, processes: Processes, tokens: dict[str, str], redis_url: str
) -> None:
    """The database is the queue: with Redis out of the worker's reach, the api's message waits in
    Redis undelivered, and the worker finds the job (and its checks) by polling the database."""
    proxy = TcpProxy(*_host_port(redis_url, 6379)).start()
    worker = processes.worker(REDIS_URL=via_proxy(redis_url, proxy))
    client_redis = redis.Redis.from_url(redis_url)
    try:
        proxy.stop()  # a Redis outage for the worker only
        with client_for(api_url, tokens["team-a"]) as client:
            job_id = submit(client, chain_model(6, 3).SerializeToString(), OP_PRESENT_MUL).json()["id"]
            job = wait_job(client, job_id, timeout=120)
        assert job["status"] == "succeeded", job
        assert job["progress"]["checks_run"] > 1
        assert client_redis.llen("cpu") >= 1  # the api's wake-up never reached the worker
        assert f"job {job_id} started" in worker.output()
    finally:
        proxy.stop()
        client_redis.close()


def _host_port(url: str, default_port: int) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or default_port


def test_a_check_dies_with_its_worker_and_what_it_left_dies_before_the_rerun(
    command_api_url: str, processes: Processes, tokens: dict[str, str]
) -> None:
    """SIGKILL the worker mid-check: the check process dies within seconds; a process the check
    started in a session of its own is killed by the next worker before it runs anything.

    Every worker on this machine kills such leftovers at its heartbeat, also the workers of tests
    running beside this one, so whether the leftover still runs between the kill and the next
    worker's start is not asserted: that it is gone once the next worker has started is."""
    worker = processes.worker()
    marker = f"check-{uuid.uuid4().hex}"
    script = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', sys.argv[1] + '-left'],"
        " start_new_session=True)\n"
        "time.sleep(300)\n"
    )
    spec = json.dumps({"kind": "command", "command": [sys.executable, "-c", script, marker]})
    with client_for(command_api_url, tokens["team-a"]) as client:
        response = submit(client, SMALL_MODEL, spec)
        job_id = response.json()["id"]
        eventually(lambda: bool(processes_with(marker) and processes_with(marker + "-left")), 60, "the check runs")
        worker.kill()
        eventually(lambda: not processes_with(marker), 5, "the check process is gone")
        processes.worker()
        assert not processes_with(marker + "-left")
        eventually(lambda: bool(processes_with(marker)), 60, "the job's check runs again on the new worker")
        client.post(f"/v1/jobs/{job_id}/cancel")
        assert wait_job(client, job_id)["status"] == "cancelled"
    eventually(lambda: not processes_with(marker) and not processes_with(marker + "-left"), 10, "all gone")


def test_a_cancelled_checks_model_is_swept_from_the_store(
    command_api_url: str, processes: Processes, tokens: dict[str, str], data_dir: Path, db_url: str
) -> None:
    worker = processes.worker()
    marker = f"sweep-{uuid.uuid4().hex}"
    with client_for(command_api_url, tokens["team-a"]) as client:
        response = submit(client, SMALL_MODEL, sleeping_command(marker))
        job_id = response.json()["id"]
        eventually(lambda: bool(processes_with(marker)), 60, "the check runs")
        client.post(f"/v1/jobs/{job_id}/cancel")
        assert wait_job(client, job_id)["status"] == "cancelled"
    worker.stop()

    def blobs() -> tuple[set[str], set[str]]:
        """(unreferenced, referenced) storage keys."""
        engine = create_engine(normalize_url(db_url))
        with engine.connect() as conn:
            referenced = set(conn.scalars(select(Artifact.storage_key)).all())
        engine.dispose()
        stored = {str(p.relative_to(data_dir / "artifacts")) for p in (data_dir / "artifacts" / "sha256").glob("*/*")}
        return stored - referenced, stored & referenced

    unreferenced, referenced = blobs()
    assert unreferenced, "the cancelled check's iteration model is stored and nothing refers to it"
    processes.worker(BLOB_SWEEP_AGE_S="0")
    eventually(lambda: not blobs()[0], 30, "the unreferenced blob is swept")
    assert blobs()[1] == referenced  # everything an artifact refers to is kept


def test_the_worker_logs_when_a_job_starts_and_ends(api_url: str, processes: Processes, tokens: dict[str, str]) -> None:
    worker = processes.worker()
    with client_for(api_url, tokens["team-a"]) as client:
        job_id = submit(client, chain_model(6, 3).SerializeToString(), OP_PRESENT_MUL).json()["id"]
        job = wait_job(client, job_id)
    assert job["status"] == "succeeded"
    worker.wait_for(f"job {job_id} ended", timeout=60)  # written just after the job's last commit
    messages = [m for m in log_messages(worker) if m.startswith(f"job {job_id} ")]
    started = [m for m in messages if m.startswith(f"job {job_id} started: team team-a, queue cpu, attempt 1")]
    ended = [m for m in messages if m.startswith(f"job {job_id} ended: succeeded, team team-a, ")]
    assert len(started) == 1 and len(ended) == 1, messages
    assert f", {job['progress']['checks_run']} checks, " in ended[0]
    assert httpx.get(api_url + "/healthz").status_code == 200


def test_the_sweep_keeps_referenced_and_freshly_stored_blobs(db_url: str, tmp_path: Path) -> None:
    """Only blobs that nothing refers to and nobody stored for ``min_age`` go; storing content that
    is already there makes its blob young again (a resumed check re-storing its model)."""
    store = ArtifactStore(tmp_path / "artifacts")
    database = Database(db_url)
    kept, swept, restored = (store.put_stream([f"blob {i}".encode()]) for i in range(3))
    long_ago = time.time() - 7200
    for blob in (kept, swept, restored):
        os.utime(store.path(blob.key), (long_ago, long_ago))
    with database.session() as session:
        team = TeamRepository(session).get_or_create("team-a")
        job = stored_job(session, team.id, JobStatus.SUCCEEDED, kept.sha256, kept.size)
        ArtifactRepository(session).put(job.id, ArtifactKind.ORIGINAL, "original", kept)
    assert store.put_stream([b"blob 2"]) == restored  # stored again: young
    assert sweep_unreferenced_blobs(database, store, min_age_s=3600) == 1
    assert store.exists(kept.key) and store.exists(restored.key) and not store.exists(swept.key)
    database.dispose()
