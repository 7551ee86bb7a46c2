"""The job page says "finishing" the moment a job's end is planned (its ``job.finishing`` event),
not "running" until the end event, in English and Chinese: headless Chromium against the embedded
service (SQLite, no runner: the test plays the worker's part in the database)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.support.ui import Select

from persistence.db import Database
from persistence.enums import EventKind, JobStatus
from persistence.events import FinishingPayload, record_event
from persistence.repositories import JobRepository
from tests.service.conftest import client_for
from tests.service.helpers import chain_model, submit
from tests.service.web_harness import Browser, Service, catalogue, embedded_service

EN = catalogue("en")
ZH = catalogue("zh-CN")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The embedded service without a runner: a job stays queued until the test moves it on."""
    with embedded_service(tmp_path_factory.mktemp("finishing"), run_jobs=False) as service:
        yield service


def _database(service: Service) -> Database:
    return Database(f"sqlite:///{Path(service.data_dir).parent / 'onnx-reducer.db'}")


def _status(browser: Browser) -> str:
    return str(browser.find("job-status").get_attribute("data-status"))


def _read_again_after_its_events(service: Service, job_id: str) -> bool:
    """The page follows the job's events and has read the job again since (the refresh its
    ``job.queued`` event asks for): from now on only an event tells it the status changed."""
    seen = list(service.seen)
    followed = [s.at for s in seen if s.path == f"/v1/jobs/{job_id}/events"]
    return bool(followed) and any(s.path == f"/v1/jobs/{job_id}" and s.at > followed[0] for s in seen)


def test_the_page_shows_finishing_when_the_end_is_planned(service: Service, browser: Browser) -> None:
    with client_for(service.url, service.token) as client:
        answer = submit(client, chain_model(6, 3).SerializeToString(), filename="m.onnx")
        answer.raise_for_status()
        job_id = answer.json()["id"]
    browser.open(f"{service.url}/#/jobs/{job_id}")
    browser.sign_in(service.token)
    browser.wait(lambda d: _status(browser) == "queued", "the queued job")
    browser.wait(lambda d: _read_again_after_its_events(service, job_id), "the page reading the job after its events")
    database = _database(service)
    try:
        with database.session() as session:  # what plan_end writes, as a worker would
            job = JobRepository(session).get(job_id)
            assert job is not None
            job.status = JobStatus.FINISHING
            said: FinishingPayload = {"status": JobStatus.FINISHING, "best_size": 1, "checks_run": 4}
            record_event(session, job, EventKind.FINISHING, said)
            session.commit()
    finally:
        database.dispose()
    browser.wait(lambda d: _status(browser) == "finishing", "the finishing badge")
    assert browser.text("job-status") == EN["status.finishing"]
    Select(browser.find("lang")).select_by_value("zh-CN")
    try:
        browser.wait(lambda d: browser.text("job-status") == ZH["status.finishing"], "the badge in Chinese")
    finally:
        Select(browser.find("lang")).select_by_value("en")
