"""Job labels (issue 29): ``onnx-reducer submit`` run inside a simulated GitHub Actions job stores
the run's context (repository, commit, branch, run URL, TRACEPARENT) and ``--label`` pairs with
the job; ``GET /v1/jobs/{id}`` and the list return them; ``GET /v1/jobs?label=`` and
``onnx-reducer jobs --label`` filter on them; a label that breaks a rule is a 422 naming it. The
api over HTTP with PostgreSQL and Redis (no worker: the jobs stay queued)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from api.labels import MAX_VALUE_BYTES
from examples.build_example_model import build_example_model
from reducer_client.ci_context import PROVIDER_VARIABLES
from tests.service.conftest import client_for
from tests.service.helpers import OP_PRESENT_MUL

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def github_env(repo: str, sha: str, branch: str, run_id: str) -> dict[str, str]:
    return {
        "GITHUB_ACTIONS": "true",
        "GITHUB_REPOSITORY": repo,
        "GITHUB_SHA": sha,
        "GITHUB_REF_NAME": branch,
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_RUN_ID": run_id,
        "TRACEPARENT": TRACEPARENT,
    }


def run_cli(
    folder: Path, server: str, token: str, extra_env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in PROVIDER_VARIABLES}  # the test may itself run in CI
    env |= {"ONNX_REDUCER_SERVER": server, "ONNX_REDUCER_TOKEN": token, **extra_env}
    return subprocess.run(
        ["onnx-reducer", *args], cwd=folder, env=env, capture_output=True, text=True, timeout=240, check=False
    )


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "model.onnx").write_bytes(build_example_model().SerializeToString())
    (tmp_path / "spec.yaml").write_text(OP_PRESENT_MUL)
    return tmp_path


def submit(folder: Path, api_url: str, token: str, env: dict[str, str], *labels: str) -> str:
    args = ["submit", "model.onnx", "--check-spec", "spec.yaml", "--json", *labels]
    done = run_cli(folder, api_url, token, env, *args)
    assert done.returncode == 0, done.stderr
    job_id: str = json.loads(done.stdout)["job_id"]
    return job_id


def test_submit_in_github_actions_stores_the_run_and_jobs_label_filters(
    folder: Path, api_url: str, tokens: dict[str, str]
) -> None:
    token = tokens["team-a"]
    app = submit(folder, api_url, token, github_env("org/app", "a" * 40, "main", "1234"), "--label", "team=vision")
    other = submit(folder, api_url, token, github_env("org/other", "b" * 40, "dev", "99"))
    plain = submit(folder, api_url, token, {})

    with client_for(api_url, token) as client:
        stored = client.get(f"/v1/jobs/{app}").json()["labels"]
        assert stored == {
            "ci": "github-actions",
            "repo": "org/app",
            "commit": "a" * 40,
            "branch": "main",
            "run_url": "https://github.com/org/app/actions/runs/1234",
            "traceparent": TRACEPARENT,
            "team": "vision",
        }
        assert client.get(f"/v1/jobs/{plain}").json()["labels"] == {}
        listed = {item["id"]: item["labels"] for item in client.get("/v1/jobs").json()["items"]}
        assert listed[app] == stored and listed[other]["repo"] == "org/other" and listed[plain] == {}
        only_app = client.get("/v1/jobs", params={"label": "repo=org/app"}).json()["items"]
        assert [item["id"] for item in only_app] == [app]
        both = client.get("/v1/jobs", params=[("label", "repo=org/other"), ("label", "branch=dev")]).json()
        assert [item["id"] for item in both["items"]] == [other]
        none = client.get("/v1/jobs", params=[("label", "repo=org/other"), ("label", "branch=main")]).json()
        assert none["items"] == []

    listed_cli = run_cli(folder, api_url, token, {}, "jobs", "--label", "repo=org/app", "--json")
    assert listed_cli.returncode == 0, listed_cli.stderr
    assert [job["id"] for job in json.loads(listed_cli.stdout)["jobs"]] == [app]
    by_ci = run_cli(folder, api_url, token, {}, "jobs", "--label", "ci=github-actions", "--json")
    assert sorted(job["id"] for job in json.loads(by_ci.stdout)["jobs"]) == sorted([app, other])

    other_team = run_cli(folder, api_url, tokens["team-b"], {}, "jobs", "--label", "repo=org/app", "--json")
    assert json.loads(other_team.stdout)["jobs"] == []


def test_a_label_must_be_key_value_and_the_server_names_a_bad_one(
    folder: Path, api_url: str, tokens: dict[str, str]
) -> None:
    token = tokens["team-a"]
    no_equals = run_cli(folder, api_url, token, {}, "submit", "model.onnx", "--check-spec", "spec.yaml", "--label", "x")
    assert no_equals.returncode == 2 and "key=value" in no_equals.stderr
    bad_key = run_cli(
        folder, api_url, token, {}, "submit", "model.onnx", "--check-spec", "spec.yaml", "--label", "a b=1"
    )
    assert bad_key.returncode == 2 and "Label key 'a b' is not allowed" in bad_key.stderr

    with client_for(api_url, token) as client:
        files = {"model": ("m.onnx", build_example_model().SerializeToString())}
        many = {f"k{i}": "v" for i in range(33)}
        for labels, said in [
            ("[1]", "must be a JSON object"),
            (json.dumps(many), "at most 32"),
            (json.dumps({"k": "x" * 1025}), "the most is 1024"),
            (json.dumps({"k": "a\nb"}), "control character"),
            (json.dumps({"k": 1}), "string value"),
        ]:
            answer: Any = client.post("/v1/jobs", files=files, data={"check_spec": OP_PRESENT_MUL, "labels": labels})
            assert answer.status_code == 422, answer.text
            assert said in answer.json()["detail"] and answer.json()["errors"][0]["field"] == "labels"
        assert client.get("/v1/jobs").json()["items"] == []
        bad_filter = client.get("/v1/jobs", params={"label": "repo"})
        assert bad_filter.status_code == 422 and "label=key=value" in bad_filter.json()["detail"]
        two_values = client.get("/v1/jobs", params=[("label", "repo=a"), ("label", "repo=b")])
        assert two_values.status_code == 422 and "two values" in two_values.json()["detail"]  # was: repo=b alone
        too_many = client.get("/v1/jobs", params=[("label", f"k{i}=v") for i in range(33)])
        assert too_many.status_code == 422 and "at most 32" in too_many.json()["detail"]


def test_a_long_label_of_wide_characters_is_stored_and_filtered(api_url: str, tokens: dict[str, str]) -> None:
    """A value of four-byte characters at the byte limit (2,048 bytes of UTF-8; 1,024 of them were
    4 KiB, more than a PostgreSQL b-tree entry holds: a 503) is stored and found by the jobs
    list's filter; one character more is a 422 that says the limit."""
    wide = "".join(chr(0x1F300 + (i * 7919) % 760) for i in range(MAX_VALUE_BYTES // 4))  # emoji, nothing to compress
    with client_for(api_url, tokens["team-a"]) as client:
        files = {"model": ("m.onnx", build_example_model().SerializeToString())}
        data = {"check_spec": OP_PRESENT_MUL, "labels": json.dumps({"note": wide})}
        answer = client.post("/v1/jobs", files=files, data=data)
        assert answer.status_code == 202, answer.text
        job_id = answer.json()["id"]
        assert client.get(f"/v1/jobs/{job_id}").json()["labels"] == {"note": wide}
        found = client.get("/v1/jobs", params={"label": f"note={wide}"}).json()["items"]
        assert [item["id"] for item in found] == [job_id]
        longer = {"check_spec": OP_PRESENT_MUL, "labels": json.dumps({"note": wide + "\U0001f300"})}
        refused = client.post("/v1/jobs", files=files, data=longer)
        assert refused.status_code == 422, refused.text
        assert f"the most is {MAX_VALUE_BYTES}" in refused.json()["detail"]
