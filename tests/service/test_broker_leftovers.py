"""A worker killed while holding a ``run_job`` message leaves it in Redis's unacknowledged set
until the visibility timeout (hours), after which Redis hands it out again. An idle worker removes
the messages of jobs that have ended; those of live jobs stay. The killed worker is a real kombu
consumer that takes real ``run_job`` messages (sent by the worker's own Celery app) and never
acknowledges them."""

from __future__ import annotations

import socket
from pathlib import Path

from kombu import Connection

from checks.capabilities import Capabilities
from persistence.contracts import RUN_JOB_TASK
from persistence.db import Database
from persistence.enums import JobStatus
from persistence.repositories import JobRepository
from tests.service.conftest import client_for
from tests.service.helpers import chain_model, submit
from worker.broker import BrokerMessages
from worker.celery_app import create_celery_app
from worker.context import context_from_settings
from worker.node import presence_timings
from worker.presence import Activity, WorkerIdentity, WorkerPresence
from worker.settings import WorkerSettings

QUEUE = "leftover-test"


def _held_by_a_killed_worker(redis_url: str, settings: WorkerSettings, job_ids: list[str]) -> None:
    """One ``run_job`` message per job, delivered to a consumer that dies without acknowledging."""
    app = create_celery_app(settings)
    for job_id in job_ids:
        app.send_task(RUN_JOB_TASK, args=[job_id], queue=QUEUE)
    with Connection(redis_url, transport_options={"visibility_timeout": 3600}) as conn:
        channel = conn.default_channel
        for _ in job_ids:
            assert channel.basic_get(QUEUE, no_ack=False) is not None
        channel.qos.restore_at_shutdown = False  # it dies: nothing is given back
    app.close()


def test_an_idle_worker_removes_the_left_messages_of_ended_jobs_only(
    command_api_url: str, tokens: dict[str, str], db_url: str, data_dir: Path, redis_url: str
) -> None:
    with client_for(command_api_url, tokens["team-a"]) as client:
        ended, live = (submit(client, chain_model(4, 2).SerializeToString()).json()["id"] for _ in range(2))
    database = Database(db_url)
    with database.session() as session:
        job = JobRepository(session).get(ended)
        assert job is not None
        JobRepository(session).finish(job, JobStatus.SUCCEEDED)
    database.dispose()
    settings = WorkerSettings(database_url=db_url, data_dir=data_dir, redis_url=redis_url)
    _held_by_a_killed_worker(redis_url, settings, [ended, live])
    broker = BrokerMessages(redis_url)
    assert sorted(broker.unacked_jobs()) == sorted([ended, live])

    ctx = context_from_settings(settings)
    identity = WorkerIdentity("idle", socket.gethostname(), (QUEUE,), Capabilities())
    presence = WorkerPresence(
        ctx, identity, Activity(), presence_timings(settings), forget_ended=broker.forget_unacked_of_ended
    )
    presence._forget_ended_messages()
    assert broker.unacked_jobs() == [live]  # the live job's message may still be needed
    ctx.db.dispose()
    broker.close()
