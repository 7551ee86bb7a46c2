"""What a new user trips on in the web page (issue 20), in a real headless Chromium against the
embedded service (tests/service/web_harness.py; the fixtures are in conftest.py)."""

from __future__ import annotations

import json
import re

from selenium.webdriver.common.by import By

from examples.build_example_model import build_example_model
from tests.service.conftest import client_for
from tests.service.helpers import chain_model
from tests.service.web_harness import Browser, Service, catalogue, plain, severe

EXAMPLE = build_example_model().SerializeToString()
EN = catalogue("en")
ZH = catalogue("zh-CN")
SLOW_SPEC = json.dumps(
    {"kind": "command", "command": ["sh", "-c", 'sleep 0.8; if grep -q Mul "$1"; then exit 1; fi', "sh", "{model}"]}
)
DANGER = "rgb(179, 38, 30)"  # app.css --danger


def _sign_out(browser: Browser) -> None:
    if browser.js("return document.body.classList.contains('signed-in')"):
        browser.find("token-forget").click()


def test_a_wrong_token_is_said_once_and_the_field_keeps_its_width(service: Service, browser: Browser) -> None:
    browser.open(service.url + "/#/jobs")
    _sign_out(browser)
    width = browser.find("token").rect["width"]
    browser.find("token").send_keys("not-a-token")
    browser.find("token-save").click()
    browser.wait(lambda d: browser.find("token-state").get_attribute("data-state") == "refused", "the refusal")
    refusal = plain(EN["token.state.refused"])
    body = browser.find("main").text + "\n" + browser.text("token-state")
    assert body.count(refusal) == 1, body
    assert browser.find("token").rect["width"] == width
    assert browser.text("jobs-state") == plain(EN["jobs.state.signin"])


def test_the_token_help_names_the_servers_home(service: Service, browser: Browser) -> None:
    browser.open(service.url + "/#/jobs")
    _sign_out(browser)
    browser.find("token-help").find_element(By.TAG_NAME, "summary").click()
    help_text = browser.find("token-help").text
    assert "ONNX_REDUCER_HOME=./data" in help_text and "DATABASE_URL" in help_text
    assert "ONNX_REDUCER_HOME" in ZH["token.help.text"] and "DATABASE_URL" in ZH["token.help.text"]


def test_a_refused_file_is_named_as_dropped_and_not_outlined_as_accepted(service: Service, browser: Browser) -> None:
    browser.open(service.url + "/#/new")
    browser.sign_in(service.token)

    def border() -> str:
        return str(browser.js("return getComputedStyle(document.getElementById('drop-zone')).borderTopColor"))

    browser.drop_file("drop-zone", "report.pdf", b"%PDF-1.7 not a model")
    accepted = border()
    browser.find("submit-job").click()
    browser.wait(lambda d: browser.find("model-error").is_displayed(), "the model's error")
    assert browser.text("model-error").startswith("'report.pdf' is not a readable ONNX model")
    assert accepted != DANGER
    browser.wait(lambda d: border() == DANGER, "the zone outlined as refused")
    browser.drop_file("drop-zone", "model.onnx", EXAMPLE)  # a new file: no error, accepted again
    assert not browser.find("model-error").is_displayed()
    assert border() == accepted
    assert severe(browser) == []


def test_a_running_job_in_the_list_shows_its_best_as_so_far(service: Service, browser: Browser) -> None:
    with client_for(service.url, service.token) as client:
        job_id = client.post(
            "/v1/jobs",
            files={"model": ("chain.onnx", chain_model(24, 15).SerializeToString())},
            data={"check_spec": SLOW_SPEC, "mode": "linear"},
        ).json()["id"]
        browser.open(service.url + "/#/jobs")
        browser.sign_in(service.token)

        def nodes_cell() -> str:
            cells = browser.driver.find_elements(By.CSS_SELECTOR, f'#jobs-body tr[data-id="{job_id}"] td')
            return str(cells[2].text) if len(cells) > 2 else ""

        browser.wait(lambda d: nodes_cell().startswith("24 → –"), "the new job's row")  # (not "24 → 24")

        def smaller() -> bool:
            job = client.get(f"/v1/jobs/{job_id}").json()
            return job["status"] == "running" and (job["progress"]["best_size"] or 24) < 24

        browser.wait(lambda d: smaller(), "a smaller failing model", timeout=90)
        browser.find("jobs-refresh").click()
        # read inside the wait: the live list may redraw the row between two reads
        shown = browser.wait(lambda d: c if "(so far" in (c := nodes_cell()) else "", "the best so far in the row")
        assert shown.startswith("24 → – (so far ")
        so_far = int(shown.removeprefix("24 → – (so far ").rstrip(")"))
        assert so_far < 24

        # the job's read may be a copy up to its ttl old (api.job_cache): its best only shrinks, so it
        # reaches what the row showed, or smaller
        def caught_up() -> bool:
            return int(client.get(f"/v1/jobs/{job_id}").json()["progress"]["best_size"]) <= so_far

        browser.wait(lambda d: caught_up(), "the job's best at most what the row showed")

        # its page lists the checks in flight under the slot that runs each (item 9)
        browser.driver.get(f"{service.url}/#/jobs/{job_id}")

        def flight_workers() -> list[str]:
            items = browser.driver.find_elements(By.CSS_SELECTOR, "#job-flight-list li")
            return [str(item.text).split(" · ")[3] for item in items if item.text.count(" · ") >= 3]

        workers = browser.wait(lambda d: flight_workers(), "a check in flight")  # (read once: the list redraws)
        assert all(re.search(r"/slot-[12]$", worker) for worker in workers), workers
        client.post(f"/v1/jobs/{job_id}/cancel")


def test_a_misspelled_spec_field_gets_a_suggestion_and_the_guide_is_a_link(service: Service, browser: Browser) -> None:
    browser.open(service.url + "/#/new")
    browser.sign_in(service.token)
    browser.drop_file("drop-zone", "model.onnx", EXAMPLE)
    browser.find("spec-source-yaml").click()
    link = browser.find("spec-guide")
    assert link.is_displayed() and link.get_attribute("href") == service.url + "/guide/check-specs"
    spec = browser.find("check-spec")
    spec.clear()
    spec.send_keys("kind: op-present\nop: [Mul]")
    browser.find("submit-job").click()
    browser.wait(lambda d: browser.find("check_spec-error").is_displayed(), "the spec's error")
    assert "did you mean 'ops'?" in browser.text("check_spec-error")
    browser.find("spec-source-form").click()

    browser.driver.get(service.url + "/guide/check-specs")
    browser.wait(lambda d: d.find_elements(By.TAG_NAME, "h1"), "the guide")
    assert browser.driver.find_element(By.TAG_NAME, "h1").text == "Check specs"
    assert browser.driver.find_elements(By.CSS_SELECTOR, "table th")  # the field tables, rendered


def test_the_phases_are_explained_once_in_the_pages_language(service: Service, browser: Browser) -> None:
    with client_for(service.url, service.token) as client:
        job_id = client.post(
            "/v1/jobs", files={"model": ("model.onnx", EXAMPLE)}, data={"check_spec": "kind: op-present\nops: [Mul]"}
        ).json()["id"]
    browser.set_language("zh-CN,zh")
    try:
        browser.open(f"{service.url}/#/jobs/{job_id}")
        browser.js("localStorage.removeItem('onnx-reducer.lang')")
        browser.reload()  # a new document follows the browser's language
        assert browser.js("return document.documentElement.lang") == "zh-CN"
        browser.sign_in(service.token)
        browser.wait(lambda d: browser.find("job-status").get_attribute("data-status") == "succeeded", "the end")
        browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, '#iterations-body tr[data-number="1"]'), "a row")
        legend = browser.find("phase-legend")
        legend.find_element(By.TAG_NAME, "summary").click()
        assert legend.find_element(By.TAG_NAME, "summary").text == ZH["phases.summary"]
        terms = [e.text for e in legend.find_elements(By.TAG_NAME, "dt")]
        meanings = [e.text for e in legend.find_elements(By.TAG_NAME, "dd")]
        assert dict(zip(terms, meanings, strict=True)) == {
            k.removeprefix("phase."): v for k, v in ZH.items() if k.startswith("phase.")
        }
        # iterations are numbered as their verdicts are recorded: a check run ahead may come first
        cells = browser.driver.find_elements(By.CSS_SELECTOR, "#iterations-body tr code")
        original = [c for c in cells if c.text == "original"]
        assert len(original) == 1 and original[0].get_attribute("title") == ZH["phase.original"]
    finally:
        browser.set_language("en-US,en")
        browser.js("localStorage.removeItem('onnx-reducer.lang')")


def test_the_charts_best_line_never_rises(service: Service, browser: Browser) -> None:
    """Verdicts recorded out of iteration order (checks run ahead, cached answers) carry the best of
    their time: 50, 38, 50, 44 in iteration order is drawn 50, 38, 38, 38."""
    browser.open(service.url + "/#/jobs")
    browser.js("localStorage.setItem('onnx-reducer.lang', 'en')")
    browser.reload()  # an earlier test may have left the page in another language
    assert browser.js("return document.documentElement.lang") == "en"
    rows = [
        {"number": 1, "nodes": 50, "verdict": "fail", "best_size": 50},
        {"number": 2, "nodes": 38, "verdict": "fail", "best_size": 38},
        {"number": 3, "nodes": 25, "verdict": "pass", "best_size": 50},
        {"number": 4, "nodes": 44, "verdict": "fail", "best_size": 44},
    ]
    drawn = browser.driver.execute_async_script(
        """
        const [rows, done] = arguments;
        import("/ui/js/chart.js").then(({ drawChart, bestSteps }) => {
          const box = document.createElement("div");
          drawChart(box, rows, 50);
          const line = box.querySelector("path.best-line").getAttribute("d");
          done({ steps: bestSteps(rows).map((s) => s.best), line, label: box.firstChild.getAttribute("aria-label") });
        });
        """,
        rows,
    )
    assert drawn["steps"] == [50, 38, 38, 38]
    heights = [float(v) for v in re.findall(r"V([\d.]+)", drawn["line"])]
    assert heights == sorted(heights)  # SVG y grows downwards: the line only goes down in size
    assert drawn["label"] == plain(EN["chart.aria"], n=4, best=38)
