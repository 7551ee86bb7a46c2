"""The precision form's "Allow inf in fp16 tensors" box (headless Chromium, the embedded service):
unticked by default, its help in English and Chinese; ticked with task precision it sends
``allow_nonfinite=true`` and the job keeps the search's answer (issue 26)."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from tests.precision_models import COMPARE_GELU, GELU_KEEP, gelu_overflow
from tests.service.conftest import client_for
from tests.service.web_harness import Browser, Service, catalogue, plain, severe

pytest.importorskip("onnxruntime")
PRECISION_JOB_S = 600.0  # a search and its verified answer on a loaded machine (the page's other waits: 45 s)


def test_the_allow_nonfinite_box_sends_the_option_with_task_precision(service: Service, browser: Browser) -> None:
    browser.open(service.url + "/#/new")
    browser.sign_in(service.token)
    box = browser.find("allow_nonfinite")
    help_en = plain(catalogue("en")["new.allow_nonfinite.help"])
    assert not box.get_property("checked") and browser.text("allow_nonfinite-help") == help_en
    browser.drop_file("drop-zone", "gelu.onnx", gelu_overflow().SerializeToString())
    Select(browser.find("task")).select_by_value("precision")
    browser.driver.find_element(By.CSS_SELECTOR, 'label[for="allow_nonfinite"]').click()
    assert box.get_property("checked")
    browser.find("spec-source-yaml").click()
    field = browser.find("check-spec")
    field.clear()
    field.send_keys(COMPARE_GELU.strip())
    browser.find("submit-job").click()
    browser.wait(lambda d: "#/jobs/" in d.current_url, "the job page")
    job_id = str(browser.driver.current_url.rsplit("/", 1)[1])
    browser.wait(
        lambda d: browser.find("job-status").get_attribute("data-status") == "succeeded",
        "succeeded",
        timeout=PRECISION_JOB_S,
    )
    with client_for(service.url, service.token) as client:
        job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["task"] == "precision" and job["options"]["allow_nonfinite"] is True
    assert sorted(job["keep_fp32"]) == sorted(GELU_KEEP) and job["nodes_after"] == 4
    assert severe(browser) == []
    browser.open(service.url + "/#/new")
    browser.set_language("zh-CN,zh")
    try:
        browser.js("localStorage.removeItem('onnx-reducer.lang')")
        browser.reload()
        help_zh = plain(catalogue("zh-CN")["new.allow_nonfinite.help"])
        browser.wait(lambda d: browser.text("allow_nonfinite-help") == help_zh, "the box's help in Chinese")
    finally:
        browser.set_language("en-US,en")
        browser.js("localStorage.removeItem('onnx-reducer.lang')")
