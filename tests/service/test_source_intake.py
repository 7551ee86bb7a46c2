"""The upload's ``source_job_id`` and ``on`` (issue 28, ``api.source_jobs``) at the api alone:
the source must be a succeeded reduce job of the uploading team with a min-bad (another team's
is not found, 404; a queued one is refused, 422), and an ``Idempotency-Key`` reused with another
source is another request (422), the same source the same job."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from api.app import create_app
from api.settings import ApiSettings
from persistence.db import Database
from persistence.enums import ArtifactKind, JobStatus
from persistence.models import Team
from persistence.repositories import ArtifactRepository
from persistence.store import StoredBlob
from tests.pass_models import fusion_model, optimized_op_spec
from tests.service.conftest import client_for
from tests.service.helpers import stored_job

MODEL = fusion_model().SerializeToString()
SPEC = optimized_op_spec("Gelu")


@pytest.fixture
def api(db_url: str, data_dir: Path, serve_app: Callable[[FastAPI], str]) -> Iterator[str]:
    settings = ApiSettings(database_url=db_url, data_dir=data_dir)
    yield serve_app(create_app(settings, enqueue=lambda job_id, queue: None))


def _reduce_jobs(db_url: str) -> tuple[str, str]:
    """team-a's succeeded reduce job with a min-bad row, and its queued one."""
    database = Database(db_url)
    try:
        with database.session() as session:
            team = session.scalars(select(Team).where(Team.name == "team-a")).one()
            done = stored_job(session, team.id, JobStatus.SUCCEEDED)
            blob = StoredBlob("aa/" + "a" * 64, "a" * 64, 1)  # the row only: the api reads no bytes of it
            ArtifactRepository(session).put(done.id, ArtifactKind.MIN_BAD, "min-bad", blob)
            queued = stored_job(session, team.id, JobStatus.QUEUED)
            session.commit()
            return done.id, queued.id
    finally:
        database.dispose()


def _keyed(client: httpx.Client, key: str, **fields: str) -> httpx.Response:
    data = {"check_spec": SPEC, "task": "bisect-passes", **fields}
    return client.post("/v1/jobs", files={"model": ("f.onnx", MODEL)}, data=data, headers={"Idempotency-Key": key})


def test_the_source_is_the_teams_succeeded_reduce_job_and_part_of_the_request(
    api: str, tokens: dict[str, str], db_url: str
) -> None:
    done, queued = _reduce_jobs(db_url)
    with client_for(api, tokens["team-a"]) as client:
        first = _keyed(client, "k1", source_job_id=done)
        again = _keyed(client, "k1", source_job_id=done)
        original = _keyed(client, "k1", source_job_id=done, on="original")
        plain = _keyed(client, "k1")
        not_yet = _keyed(client, "k2", source_job_id=queued)
        job = client.get(f"/v1/jobs/{first.json()['id']}").json()
    with client_for(api, tokens["team-b"]) as stranger:
        foreign = _keyed(stranger, "k3", source_job_id=done)

    assert first.status_code == again.status_code == 202, first.text
    assert again.json()["id"] == first.json()["id"]
    assert job["options"]["source_job_id"] == done and job["options"]["on"] == "min-bad"
    assert original.status_code == plain.status_code == 422, (original.text, plain.text)
    assert not_yet.status_code == 422 and "start from a reduce job that succeeded" in not_yet.text
    assert foreign.status_code == 404, foreign.text
