"""The job page shows a job's labels (the CI run it came from) with a link to the run, in a real
headless Chromium, in English and Chinese; a job without labels shows no labels row; a run URL
that is not http(s) is shown as no link."""

from __future__ import annotations

import json

import pytest
from selenium.webdriver.common.keys import Keys

from examples.build_example_model import build_example_model
from tests.service.conftest import client_for
from tests.service.web_harness import Browser, Service, catalogue, plain

RUN = "https://github.com/org/app/actions/runs/1234"


def submit(service: Service, labels: dict[str, str]) -> str:
    with client_for(service.url, service.token) as client:
        answer = client.post(
            "/v1/jobs",
            files={"model": ("model.onnx", build_example_model().SerializeToString())},
            data={"check_spec": "kind: op-present\nops: [Mul]", "labels": json.dumps(labels)},
        )
        assert answer.status_code == 202, answer.text
        job_id: str = answer.json()["id"]
    return job_id


def open_job(service: Service, browser: Browser, job_id: str, lang: str) -> None:
    browser.set_language({"en": "en-US,en", "zh-CN": "zh-CN,zh"}[lang])
    browser.open(f"{service.url}/#/jobs/{job_id}")
    browser.js("localStorage.removeItem('onnx-reducer.lang')")
    browser.reload()
    browser.sign_in(service.token)
    browser.wait(lambda d: browser.find("job-status").get_attribute("data-status"), "the job's facts")


@pytest.mark.parametrize("lang", ["en", "zh-CN"])
def test_labels_and_the_link_to_the_ci_run(service: Service, browser: Browser, lang: str) -> None:
    words = catalogue(lang)
    labels = {"ci": "github-actions", "repo": "org/app", "branch": "main", "run_url": RUN}
    open_job(service, browser, submit(service, labels), lang)
    browser.wait(lambda d: browser.find("job-labels").is_displayed(), "the labels")
    assert browser.text("job-labels-label") == plain(words["job.labels"])
    chips = browser.js(
        "return [...document.querySelectorAll('#job-labels .label-chip')].map(c => [c.dataset.key, c.textContent])"
    )
    assert chips == [["branch", "branch main"], ["ci", "ci github-actions"], ["repo", "repo org/app"]]
    link = browser.find("job-run-link")
    assert link.get_attribute("href") == RUN and link.text == plain(words["job.labels.run"])
    assert link.get_attribute("rel") == "noopener noreferrer"


def test_no_labels_no_row_and_no_link_but_http(service: Service, browser: Browser) -> None:
    open_job(service, browser, submit(service, {}), "en")
    assert not browser.find("job-labels").is_displayed() and not browser.find("job-labels-label").is_displayed()
    open_job(service, browser, submit(service, {"run_url": "javascript:alert(1)", "team": "x"}), "en")
    browser.wait(lambda d: browser.find("job-labels").is_displayed(), "the labels")
    assert browser.js("return document.getElementById('job-run-link')") is None


def test_the_jobs_list_shows_where_a_job_came_from_and_filters_by_label(service: Service, browser: Browser) -> None:
    app = submit(service, {"repo": "org/listed-app", "branch": "main"})
    other = submit(service, {"repo": "org/other"})
    words = catalogue("en")
    browser.set_language("en-US,en")
    browser.open(f"{service.url}/#/jobs")
    browser.sign_in(service.token)
    listed = f"return !!document.querySelector('#jobs-body tr[data-id=\"{other}\"]')"
    browser.wait(lambda d: browser.js(listed), "the list")
    origin = (
        "return [...document.querySelectorAll('#jobs-body tr')]"
        ".map(r => [r.dataset.id, (r.querySelector('.job-origin') || {}).textContent || ''])"
    )
    shown = dict(browser.js(origin))
    assert shown[app] == "org/listed-app · main" and shown[other] == "org/other"

    field = browser.find("label-filter")
    field.send_keys("repo=org/listed-app", Keys.ENTER)
    browser.wait(lambda d: [row[0] for row in browser.js(origin)] == [app], "only the org/listed-app job")
    field.clear()
    field.send_keys("repo=org/nothing", Keys.ENTER)
    no_job = plain(words["jobs.state.no_label"], label="repo=org/nothing")
    browser.wait(lambda d: browser.text("jobs-state") == no_job, "no job with that label")
    field.clear()
    field.send_keys("repo", Keys.ENTER)  # no '=': the server says how to write it
    browser.wait(lambda d: browser.find("error").is_displayed(), "the error")
    assert "label=key=value" in browser.text("error")
    field.clear()
    field.send_keys(Keys.ENTER)
