"""The web page's interactive jobs and workers page in a real headless Chromium against the
embedded service (SQLite, the in-process runner) over real HTTP.

An interactive job is started from the form (kind "interactive"); on its page the test acts as the
person: it downloads each iteration's model with the panel's button, opens it, and clicks "It
fails" when the model still holds the Mul and "It passes" when not (some answers by keyboard),
until the job succeeds with the Mul alone. The workers page lists the embedded worker with what
GET /v1/workers says, turns it busy with the job and its check while a slow job runs (live, no
reload), and speaks Chinese."""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import onnx
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from examples.build_example_model import build_example_model
from tests.service.conftest import client_for
from tests.service.helpers import chain_model
from tests.service.web_harness import (
    OVERFLOW_JS,
    Browser,
    Service,
    catalogue,
    plain,
    severe,
)

EN = catalogue("en")
ZH = catalogue("zh-CN")
LOADED_WAIT_S = 180.0  # a deadline for a broken run only: the waits end as soon as the page shows it
SLOW_CHECK = ["sh", "-c", 'sleep 1.5; if grep -q Mul "$1"; then exit 1; fi', "sh", "{model}"]


def _status(browser: Browser) -> str:
    return str(browser.find("job-status").get_attribute("data-status"))


def _ended(browser: Browser) -> bool:
    """The job's page shows it ended (before its first answer, the page shows no status yet)."""
    return _status(browser) in ("succeeded", "failed", "cancelled")


def _downloaded_model(browser: Browser, job_id: str, number: int) -> onnx.ModelProto:
    path: Path = browser.downloads / f"{job_id}-iteration-{number}.onnx"
    browser.wait(lambda d: path.is_file() and path.stat().st_size > 0, f"the download of iteration {number}", 20)
    return onnx.load(str(path))


def test_the_interactive_flow_completes_a_reduction_by_clicking_verdicts(service: Service, browser: Browser) -> None:
    browser.open(service.url + "/#/new")
    browser.sign_in(service.token)
    browser.drop_file("drop-zone", "model.onnx", build_example_model().SerializeToString())
    Select(browser.find("check-kind")).select_by_value("interactive")
    assert browser.find("spec-preview").text == "kind: interactive"
    assert not browser.find("timeout").is_displayed()
    browser.find("submit-job").click()
    browser.wait(lambda d: "#/jobs/" in d.current_url, "the job page")
    job_id = str(browser.driver.current_url.rsplit("/", 1)[1])

    answers: list[tuple[int, str]] = []
    for _ in range(40):
        browser.wait(lambda d: browser.find("verdict-panel").is_displayed() or _ended(browser), "a question")
        if _ended(browser):
            break
        heading = browser.text("verdict-heading")
        found = re.search(r"iteration (\d+) ", heading)
        assert found, heading
        number = int(found.group(1))
        model = _downloaded_model_after_click(browser, job_id, number)
        assert heading == plain(EN["answer.heading"], number=number, nodes=len(model.graph.node))
        flight = browser.text("job-flight-list")
        assert plain(EN["flight.you"]) in flight and f"{len(model.graph.node)} nodes" in flight
        verdict = "fail" if any(n.op_type == "Mul" for n in model.graph.node) else "pass"
        button = browser.find(f"verdict-{verdict}")
        if len(answers) % 2:
            button.send_keys(Keys.ENTER)  # keyboard: the focused button answers with Enter
        else:
            button.click()
        answers.append((number, verdict))
        _wait_past(browser, number)
        if _status(browser) == "running":
            assert browser.js("return document.activeElement.id") == "verdict-heading"
    browser.wait(lambda d: _status(browser) == "succeeded", "the job to succeed")
    assert not browser.find("verdict-panel").is_displayed() and not browser.find("job-flight").is_displayed()
    browser.wait(lambda d: browser.text("job-nodes-after") == "1", "the final node count")
    browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#graph-min-bad g.gnode.node"), "the min-bad graph")
    nodes = browser.driver.find_elements(By.CSS_SELECTOR, "#graph-min-bad g.gnode.node")
    assert [n.get_attribute("data-op") for n in nodes] == ["Mul"]

    with client_for(service.url, service.token) as client:
        iterations = client.get(f"/v1/jobs/{job_id}/iterations").json()["items"]
    assert [(i["number"], i["verdict"]) for i in iterations] == answers
    # the last rows come with the event stream (polled), maybe after the answer's reply said succeeded
    numbers = "return [...document.querySelectorAll('#iterations-body tr[data-number]')].map((r) => +r.dataset.number)"
    browser.wait(lambda d: browser.js(numbers) == [n for n, _ in answers], "every answered iteration in the list")
    assert severe(browser) == []


def _wait_past(browser: Browser, number: int) -> None:
    """Until the page asks about another iteration, or the job ended."""
    browser.wait(
        lambda d: _ended(browser) or f"iteration {number} " not in browser.text("verdict-heading"),
        "the next question",
    )


def _downloaded_model_after_click(browser: Browser, job_id: str, number: int) -> onnx.ModelProto:
    browser.find("verdict-download").click()
    return _downloaded_model(browser, job_id, number)


def test_an_answer_from_elsewhere_moves_the_page_on(service: Service, browser: Browser) -> None:
    """Two people on one job: the other's verdict (over the API) reaches this page by its event
    stream; a cancel ends the job at once (no worker has to notice it)."""
    with client_for(service.url, service.token) as client:
        job_id = client.post(
            "/v1/jobs",
            files={"model": ("model.onnx", chain_model(6, mul_at=3).SerializeToString())},
            data={"check_spec": "kind: interactive"},
        ).json()["id"]
        browser.open(service.url + f"/#/jobs/{job_id}")
        browser.sign_in(service.token)
        browser.wait(lambda d: browser.find("verdict-panel").is_displayed(), "the question")
        assert browser.text("verdict-heading") == plain(EN["answer.heading"], number=1, nodes=6)
        assert client.post(f"/v1/jobs/{job_id}/verdict", json={"iteration": 1, "verdict": "fail"}).status_code == 200
    browser.wait(lambda d: "iteration 2 " in browser.text("verdict-heading"), "the next question, live")
    assert browser.driver.find_elements(By.CSS_SELECTOR, '#iterations-body tr[data-number="1"]')

    browser.find("cancel-job").click()
    browser.find("cancel-confirm").click()
    browser.wait(lambda d: _status(browser) == "cancelled", "the cancel, at once")
    assert not browser.find("verdict-panel").is_displayed()


def test_the_workers_page_shows_the_farm_live(service: Service, browser: Browser) -> None:
    browser.open(service.url + "/#/workers")
    browser.sign_in(service.token)
    with client_for(service.url, service.token) as client:
        workers = client.get("/v1/workers").json()
        assert workers["items"], "the embedded service's runner reports as a worker"
        worker = workers["items"][0]
        row = f'#workers-body tr[data-worker="{worker["name"]}"]'
        browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, row), "the worker's row")
        text = browser.driver.find_element(By.CSS_SELECTOR, row).text
        assert worker["host"] in text and ", ".join(worker["queues"]) in text
        if worker["runtimes"]["onnxruntime"]:
            assert f"onnxruntime {worker['runtimes']['onnxruntime']}" in text
        assert plain(EN["workers.no_gpu"]) in text or all(g in text for g in worker["gpus"])
        assert browser.text("workers-summary").startswith(f"{workers['online']} online, ")

        slow = chain_model(8, mul_at=5).SerializeToString()
        spec = json.dumps({"kind": "command", "command": SLOW_CHECK})
        job_id = client.post("/v1/jobs", files={"model": ("m.onnx", slow)}, data={"check_spec": spec}).json()["id"]
        # either of the embedded server's slots may take the job's checks, and hand them to the other
        browser.wait(
            lambda d: _busy_row_text(browser, job_id, "iteration"), "a worker busy with the job, live", LOADED_WAIT_S
        )
        link = f'#workers-body tr[data-worker] a[href="#/jobs/{job_id}"]'
        browser.wait(lambda d: any(a.text == job_id for a in d.find_elements(By.CSS_SELECTOR, link)), "its link")
        assert browser.text("nav-workers") == EN["nav.workers"]
        assert browser.find("nav-workers").get_attribute("aria-current") == "page"

        Select(browser.find("lang")).select_by_value("zh-CN")
        browser.wait(lambda d: browser.text("workers-heading") == ZH["workers.heading"], "the Chinese page")
        browser.wait(lambda d: _busy_row_text(browser, job_id, ZH["workers.state.busy"]), "Chinese rows", LOADED_WAIT_S)
        Select(browser.find("lang")).select_by_value("en")
        client.post(f"/v1/jobs/{job_id}/cancel")
        deadline = time.monotonic() + LOADED_WAIT_S
        while client.get(f"/v1/jobs/{job_id}").json()["status"] != "cancelled" and time.monotonic() < deadline:
            time.sleep(0.3)
        states = "return [...document.querySelectorAll('#workers-body [data-state]')].map((e) => e.dataset.state)"
        browser.wait(lambda d: set(browser.js(states)) == {"idle"}, "every worker idle again", LOADED_WAIT_S)
    assert severe(browser) == []


def _busy_row_text(browser: Browser, job_id: str, words: str) -> bool:
    """Whether a worker row the page shows busy with ``job_id`` holds ``words`` (read in one go:
    the list is redrawn live)."""
    texts = browser.js(
        """return [...document.querySelectorAll('#workers-body tr[data-worker]')]
          .filter((row) => row.querySelector('[data-state="busy"]'))
          .filter((row) => row.querySelector(`a[href="#/jobs/${arguments[0]}"]`))
          .map((row) => row.innerText)""",
        job_id,
    )
    return any(words in text for text in texts)


def test_the_question_and_the_workers_fit_420_px(service: Service, browser: Browser) -> None:
    with browser.narrow():
        with client_for(service.url, service.token) as client:
            job_id = client.post(
                "/v1/jobs",
                files={"model": ("a-rather-long-model-file-name.onnx", build_example_model().SerializeToString())},
                data={"check_spec": "kind: interactive"},
            ).json()["id"]
        browser.open(f"{service.url}/#/jobs/{job_id}")
        browser.sign_in(service.token)
        browser.wait(lambda d: browser.find("verdict-panel").is_displayed(), "the question")
        assert browser.js(OVERFLOW_JS) == []
        browser.driver.get(f"{service.url}/#/workers")
        browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#workers-body tr"), "the workers")
        assert browser.js(OVERFLOW_JS) == []


def test_two_answers_at_once_on_the_embedded_sqlite(service: Service) -> None:
    """The race of test_interactive.py (PostgreSQL) on the embedded default's SQLite: one wins."""
    with client_for(service.url, service.token) as client:
        model = build_example_model().SerializeToString()
        job_id = client.post(
            "/v1/jobs", files={"model": ("m.onnx", model)}, data={"check_spec": "kind: interactive"}
        ).json()["id"]

        def post(_: int) -> int:
            return client.post(f"/v1/jobs/{job_id}/verdict", json={"iteration": 1, "verdict": "fail"}).status_code

        with ThreadPoolExecutor(6) as pool:
            assert sorted(pool.map(post, range(6))) == [200, 409, 409, 409, 409, 409]
