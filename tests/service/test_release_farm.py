"""A ``task: bisect-releases`` job on a farm of two real Celery workers that advertise different
onnxruntime releases (RUNTIME_ENVS: one venv per release, tests/ort_envs.py): each release's check
runs on the worker that offers it, in that release's python, and the job names the first failing
and the last passing release in at most ceil(log2 R) + 1 release checks."""

from __future__ import annotations

import pytest

from examples.build_example_model import build_example_model
from tests.ort_envs import RELEASES, env_pythons_or_skip
from tests.service.conftest import Processes, client_for
from tests.service.helpers import submit, wait_job

pytestmark = pytest.mark.slow

OLD, MIDDLE, NEW = RELEASES  # both workers run NEW (the project's own venv), A also OLD, B also MIDDLE
_SECOND = tuple(int(p) for p in MIDDLE.split(".")[:2])
PROGRAM = (
    "import sys, onnxruntime as o; print('onnxruntime', o.__version__); "
    f"sys.exit(1 if tuple(int(p) for p in o.__version__.split('.')[:2]) >= {_SECOND} else 0)"
)
SPEC = f'{{"kind": "command", "command": ["python", "-c", "{PROGRAM}"]}}'


def test_bisect_releases_job_on_two_workers_with_different_releases(
    processes: Processes, command_api_url: str, tokens: dict[str, str]
) -> None:
    pythons = env_pythons_or_skip()
    import onnxruntime

    assert onnxruntime.__version__ == NEW  # the workers' own release
    processes.worker(RUNTIME_ENVS=f"{OLD}={pythons[OLD]}")
    processes.worker(RUNTIME_ENVS=f"{MIDDLE}={pythons[MIDDLE]}")
    with client_for(command_api_url, tokens["team-a"]) as client:
        workers = client.get("/v1/workers").json()
        offered = sorted(tuple(w["runtimes"]["runtime_envs"]) for w in workers["items"])
        assert offered == [(OLD,), (MIDDLE,)], workers
        releases = f"{NEW},{OLD},{MIDDLE}"
        response = submit(
            client, build_example_model().SerializeToString(), SPEC, task="bisect-releases", releases=releases
        )
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        job = wait_job(client, job_id, timeout=300)
        iterations = client.get(f"/v1/jobs/{job_id}/iterations").json()["items"]
    assert job["status"] == "succeeded", job
    assert job["options"]["releases"] == [OLD, MIDDLE, NEW]  # the form's, in version order
    answer = job["releases"]
    assert answer["first_failing"] == MIDDLE and answer["last_passing"] == OLD, answer
    assert answer["checks"] <= answer["max_checks"] == 3
    assert [item["state"] for item in answer["strip"]] == ["pass", "fail", "fail"]
    for key in ("first_failing_verdict", "last_passing_verdict"):
        number = answer[key]["iteration"]
        assert answer[key]["link"].endswith(f"after={number - 1}&limit=1")
        assert iterations[number - 1]["phase"] == f"release {answer[key]['release']}"
    # each release's check ran in that release's python (only one worker holds OLD, only one MIDDLE)
    for it in iterations:
        release = it["phase"].removeprefix("release ")
        assert f"onnxruntime {release}" in it["output_tail"], it
    assert job["progress"]["checks_run"] == len(iterations) == 3
    assert job["check_spec"] == SPEC  # the user's spec again once the job ended
