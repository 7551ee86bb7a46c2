"""No secret of the service reaches a check: the Celery worker is configured through odd-cased
variable names (pydantic-settings reads them case-insensitively) and carries other credentials; a
command check (enabled by the operator here) prints its whole environment, and none of them is in
it."""

from __future__ import annotations

import pytest

from examples.build_example_model import build_example_model
from tests.service.commands import api_command
from tests.service.conftest import Processes, client_for
from tests.service.helpers import free_port, submit, wait_http, wait_job

pytestmark = pytest.mark.slow

SECRET = "s3cr3t-value-do-not-leak"
PRINT_ENV = "kind: command\ncommand: [sh, -c, 'env; exit 1']\n"


def test_a_command_check_sees_no_secret_of_the_worker(
    processes: Processes, tokens: dict[str, str], db_url: str, redis_url: str
) -> None:
    env = processes.env
    for name in ("DATABASE_URL", "REDIS_URL"):
        del env[name]
    user_db = db_url.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@")
    env.update(
        {
            "database_url": user_db,  # configures the worker (and the api) despite the case
            "Redis_Url": redis_url,
            "CELERY_BROKER_URL": redis_url,  # Celery itself reads it (the same broker here)
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "aws_session_token": SECRET,
            "SENTRY_DSN": f"https://{SECRET}@sentry.example/1",
            "Pgpassword": SECRET,
            "ALLOW_COMMAND_CHECKS": "true",
        }
    )
    port = free_port()
    processes.start(api_command(port), "api")
    api = f"http://127.0.0.1:{port}"
    wait_http(api + "/healthz")
    processes.worker()
    with client_for(api, tokens["team-a"]) as client:
        response = submit(client, build_example_model().SerializeToString(), PRINT_ENV)
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        job = wait_job(client, job_id)
        iterations = client.get(f"/v1/jobs/{job_id}/iterations").json()["items"]
    assert job["status"] == "succeeded", job
    outputs = [it["output_tail"] for it in iterations]
    assert all("PATH=" in out for out in outputs)  # the check ran and printed its environment
    for out in outputs:
        assert SECRET not in out
        names = {line.split("=", 1)[0].upper() for line in out.splitlines() if "=" in line}
        assert not names & {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "AWS_SESSION_TOKEN", "SENTRY_DSN"}
