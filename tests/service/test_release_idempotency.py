"""An ``Idempotency-Key`` reused for a ``task: bisect-releases`` upload with other ``releases`` or
another ``flaky`` is another request (422), not the first job given back; the same fields (the
releases in any order) are the same job. At the api alone (nothing is enqueued)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from api.app import create_app
from api.settings import ApiSettings
from examples.build_example_model import build_example_model
from tests.service.conftest import client_for
from tests.service.helpers import OP_PRESENT_MUL

MODEL = build_example_model().SerializeToString()


@pytest.fixture
def api(db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str]) -> Iterator[str]:
    settings = ApiSettings(database_url=db_url, data_dir=data_dir)
    yield serve_app(create_app(settings, enqueue=lambda job_id, queue: None))


def _keyed(client: httpx.Client, key: str, **fields: str) -> httpx.Response:
    data = {"check_spec": OP_PRESENT_MUL, "task": "bisect-releases", **fields}
    return client.post("/v1/jobs", files={"model": ("m.onnx", MODEL)}, data=data, headers={"Idempotency-Key": key})


def test_a_reused_key_with_other_releases_or_flaky_is_another_request(api: str, tokens: dict[str, str]) -> None:
    with client_for(api, tokens["team-a"]) as client:
        first = _keyed(client, "r1", releases="1.19.0,1.20.0", flaky="false")
        again = _keyed(client, "r1", releases="1.20.0,1.19.0")
        other_releases = _keyed(client, "r1", releases="1.18.0,1.20.0", flaky="false")
        every_release = _keyed(client, "r1", flaky="false")
        flaky = _keyed(client, "r1", releases="1.19.0,1.20.0", flaky="true")

    assert first.status_code == again.status_code == 202, (first.text, again.text)
    assert again.json()["id"] == first.json()["id"]
    for response in (other_releases, every_release, flaky):
        assert response.status_code == 422, response.text
        assert "Idempotency-Key reused" in response.text
