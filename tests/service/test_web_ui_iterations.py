""" "Checks run" and "iterations" explained where they differ (issue 29): the same model and spec
submitted twice, the second job's verdicts come from the farm cache (iterations that ran no check).
Its page shows an "Iterations" fact saying why the counts differ, in English and Chinese; a job
whose counts agree shows none; `onnx-reducer status` says the same. In a real headless Chromium
and the console script, against the embedded service."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest
from selenium.webdriver.support.ui import Select

from tests.service.conftest import BIN, client_for
from tests.service.helpers import OP_PRESENT_MUL, chain_model, wait_job
from tests.service.web_harness import Browser, Service, catalogue, plain

EN = catalogue("en")
ZH = catalogue("zh-CN")


@pytest.fixture(scope="module")
def two_jobs(service: Service) -> dict[str, dict[str, Any]]:
    """The first job on a model (its checks ran) and the same job again (answered from the farm cache)."""
    model = chain_model(10, mul_at=6).SerializeToString()
    jobs = {}
    with client_for(service.url, service.token) as client:
        for name in ("first", "again"):
            answer = client.post("/v1/jobs", files={"model": ("m.onnx", model)}, data={"check_spec": OP_PRESENT_MUL})
            answer.raise_for_status()
            jobs[name] = wait_job(client, answer.json()["id"], timeout=300)
            assert jobs[name]["status"] == "succeeded", jobs[name]
    return jobs


def _differ_text(lang: dict[str, str], progress: dict[str, Any]) -> str:
    return plain(
        lang["job.iterations.differ"],
        n=progress["iteration"],
        checks=progress["checks_run"],
        cached=progress["cache_hits"],
    )


def test_the_page_explains_iterations_where_they_differ_from_checks_run(
    service: Service, browser: Browser, two_jobs: dict[str, dict[str, Any]]
) -> None:
    again = two_jobs["again"]["progress"]
    assert again["cache_hits"] > 0 and again["iteration"] != again["checks_run"], again
    browser.open(f"{service.url}/#/jobs/{two_jobs['again']['id']}")
    browser.sign_in(service.token)
    browser.wait(lambda d: browser.find("job-iterations").is_displayed(), "the iterations fact")
    assert browser.find("job-iterations-label").is_displayed()
    assert browser.text("job-iterations-label") == EN["job.iterations"]
    assert browser.text("job-iterations") == _differ_text(EN, again)

    Select(browser.find("lang")).select_by_value("zh-CN")
    try:
        browser.wait(lambda d: browser.text("job-iterations") == _differ_text(ZH, again), "the Chinese explanation")
        assert browser.text("job-iterations-label") == ZH["job.iterations"]
    finally:
        Select(browser.find("lang")).select_by_value("en")

    first = two_jobs["first"]["progress"]
    if first["iteration"] == first["checks_run"]:  # every verdict its own check: nothing to explain
        browser.open(f"{service.url}/#/jobs/{two_jobs['first']['id']}")
        browser.wait(lambda d: browser.text("job-checks") == str(first["checks_run"]), "the first job's facts")
        assert not browser.find("job-iterations").is_displayed()
        assert not browser.find("job-iterations-label").is_displayed()


def test_status_explains_iterations_where_they_differ(service: Service, two_jobs: dict[str, dict[str, Any]]) -> None:
    env = {**os.environ, "ONNX_REDUCER_SERVER": service.url, "ONNX_REDUCER_TOKEN": service.token}
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    again = two_jobs["again"]["progress"]
    done = subprocess.run(
        ["onnx-reducer", "status", two_jobs["again"]["id"]],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    output = done.stdout + done.stderr
    assert f"iterations {again['iteration']}, checks run {again['checks_run']}: an iteration is one candidate" in output
    assert f"{again['cache_hits']} were answered from a cache without running a check" in output
