"""The job page's delete button, in a real headless Chromium: it asks first ("keep the job" keeps
it), then deletes the job and returns to the list; in Chinese too."""

from __future__ import annotations

import pytest

from tests.service.conftest import client_for, finished_job
from tests.service.web_harness import Browser, Service, catalogue, plain


@pytest.mark.parametrize("lang", ["en", "zh-CN"])
def test_delete_asks_first_then_deletes_and_returns_to_the_list(service: Service, browser: Browser, lang: str) -> None:
    words = catalogue(lang)
    job_id = finished_job(service)
    browser.set_language({"en": "en-US,en", "zh-CN": "zh-CN,zh"}[lang])
    browser.open(f"{service.url}/#/jobs/{job_id}")
    browser.js("localStorage.removeItem('onnx-reducer.lang')")  # follow the browser's language
    browser.reload()  # a new document reads the new navigator.languages
    assert browser.js("return document.documentElement.lang") == lang
    browser.sign_in(service.token)
    browser.wait(lambda d: browser.find("job-status").get_attribute("data-status") == "succeeded", "the job")
    assert browser.text("delete-job") == plain(words["job.delete"])

    browser.find("delete-job").click()
    assert browser.find("delete-dialog").get_property("open")
    assert browser.text("delete-title") == plain(words["delete.title"])
    browser.find("delete-keep").click()
    assert not browser.find("delete-dialog").get_property("open")
    with client_for(service.url, service.token) as client:
        assert client.get(f"/v1/jobs/{job_id}").status_code == 200

    browser.find("delete-job").click()
    browser.find("delete-confirm").click()
    browser.wait(lambda d: d.current_url.endswith("#/jobs"), "back to the job list")
    with client_for(service.url, service.token) as client:
        assert client.get(f"/v1/jobs/{job_id}").status_code == 404
    assert not browser.find("error").is_displayed()
