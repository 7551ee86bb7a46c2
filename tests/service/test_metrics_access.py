"""/metrics: team names and per-team counters only for a scrape with METRICS_TOKEN; anyone else
sees the team-neutral view (farm totals) or, with a wrong token, 401."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from api.app import create_app
from api.settings import ApiSettings
from examples.build_example_model import build_example_model
from tests.service.conftest import client_for
from tests.service.helpers import OP_PRESENT_MUL, submit

SCRAPE_TOKEN = "scrape-token-for-this-test"


def _api(db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str], token: str | None) -> str:
    settings = ApiSettings(database_url=db_url, data_dir=data_dir, metrics_token=token)
    return serve_app(create_app(settings, enqueue=lambda job_id, queue: None))


def test_team_labels_need_the_metrics_token(
    db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str], tokens: dict[str, str]
) -> None:
    api = _api(db_url, data_dir, serve_app, SCRAPE_TOKEN)
    model = build_example_model().SerializeToString()
    with client_for(api, tokens["team-a"]) as a, client_for(api, tokens["team-b"]) as b:
        for client, count in ((a, 2), (b, 1)):
            for _ in range(count):
                assert submit(client, model, OP_PRESENT_MUL).status_code == 202

    full = httpx.get(api + "/metrics", headers={"Authorization": f"Bearer {SCRAPE_TOKEN}"})
    assert full.status_code == 200
    assert 'onnx_reducer_queue_depth{queue="cpu",team="team-a"} 2.0' in full.text
    assert 'onnx_reducer_queue_depth{queue="cpu",team="team-b"} 1.0' in full.text

    anonymous = httpx.get(api + "/metrics")
    assert anonymous.status_code == 200
    assert "team" not in anonymous.text.replace("per team", "")  # help texts may say "per team"
    assert 'onnx_reducer_queue_depth{queue="cpu"} 3.0' in anonymous.text  # the farm total stays visible
    assert 'onnx_reducer_jobs{status="queued"} 3.0' in anonymous.text
    assert "onnx_reducer_http_requests_total" in anonymous.text

    for header in (f"Bearer {SCRAPE_TOKEN}x", f"Bearer {tokens['team-a']}", f"Basic {SCRAPE_TOKEN}"):
        refused = httpx.get(api + "/metrics", headers={"Authorization": header})
        assert refused.status_code == 401, header
        assert refused.headers["content-type"] == "application/problem+json"
        assert "METRICS_TOKEN" in refused.json()["detail"] and "team" not in refused.text.replace("team-neutral", "")


@pytest.mark.parametrize("header", [None, "Bearer anything"])
def test_without_a_metrics_token_setting_no_scrape_sees_teams(
    db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str], tokens: dict[str, str], header: str | None
) -> None:
    api = _api(db_url, data_dir, serve_app, None)
    with client_for(api, tokens["team-a"]) as a:
        assert submit(a, build_example_model().SerializeToString(), OP_PRESENT_MUL).status_code == 202
    response = httpx.get(api + "/metrics", headers={"Authorization": header} if header else {})
    if header is None:
        assert response.status_code == 200 and 'onnx_reducer_queue_depth{queue="cpu"} 1.0' in response.text
        assert "team-a" not in response.text
    else:
        assert response.status_code == 401
