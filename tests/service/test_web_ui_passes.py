"""The page of a ``task: bisect-passes`` job: the "Task" select sends it, and the job page names
the optimizers to disable and the level at which the failure first appears, in English and in
Chinese, with nothing to download (headless Chromium, the embedded service)."""

from __future__ import annotations

import pytest
from selenium.webdriver.support.ui import Select

from tests.pass_models import FUSED_MATMUL_FUSION, fusion_model, optimized_op_spec
from tests.service.conftest import client_for
from tests.service.web_harness import Browser, Service, catalogue, plain

pytest.importorskip("onnxruntime")


def _answer(lang: str, checks: int, candidates: int) -> str:
    words = catalogue(lang)
    found = plain(words["job.passes.found"], names=FUSED_MATMUL_FUSION, level="extended")
    return f"{found} {plain(words['job.passes.checks'], n=checks, candidates=candidates)}"


def test_a_bisect_passes_job_from_the_form_names_the_optimizer(service: Service, browser: Browser) -> None:
    browser.open(service.url + "/#/new")
    browser.sign_in(service.token)
    browser.drop_file("drop-zone", "fusions.onnx", fusion_model().SerializeToString())
    Select(browser.find("task")).select_by_value("bisect-passes")
    browser.find("spec-source-yaml").click()
    field = browser.find("check-spec")
    field.clear()
    field.send_keys(optimized_op_spec("FusedMatMul").strip())
    browser.find("submit-job").click()
    browser.wait(lambda d: "#/jobs/" in d.current_url, "the job page")
    job_id = str(browser.driver.current_url.rsplit("/", 1)[1])
    browser.wait(lambda d: browser.find("job-status").get_attribute("data-status") == "succeeded", "succeeded")
    with client_for(service.url, service.token) as client:
        job = client.get(f"/v1/jobs/{job_id}").json()
    passes = job["passes"]
    assert job["task"] == "bisect-passes" and passes["optimizers"] == [FUSED_MATMUL_FUSION]
    expected = _answer("en", passes["checks"], len(passes["candidates"]))
    browser.wait(lambda d: browser.text("job-passes") == expected, "the optimizers named")
    assert browser.find("job-passes-label").is_displayed()
    assert not browser.find("download-min-bad").is_displayed() and not browser.find("download-bundle").is_displayed()
    browser.set_language("zh-CN,zh")
    try:
        browser.js("localStorage.removeItem('onnx-reducer.lang')")
        browser.reload()
        chinese = _answer("zh-CN", passes["checks"], len(passes["candidates"]))
        browser.wait(lambda d: browser.text("job-passes") == chinese, "the optimizers named in Chinese")
        assert browser.text("job-passes-label") == catalogue("zh-CN")["job.passes"]
    finally:
        browser.set_language("en-US,en")
        browser.js("localStorage.removeItem('onnx-reducer.lang')")
