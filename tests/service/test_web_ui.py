"""The web UI in a real headless Chromium (Selenium + chromedriver, Debian packages `chromium` and
`chromium-driver`; `make test` installs them via scripts/test-browser.sh). The embedded service
(SQLite, in-process runner) runs in this process: the browser saves a token, uploads the reference
example, follows the job live to its single Mul, downloads min-bad, and shows problem details."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import onnx
import pytest
import uvicorn

from api.app import create_app
from api.settings import ApiSettings
from examples.build_example_model import build_example_model
from persistence.db import Database
from persistence.migrate import upgrade
from persistence.repositories import TeamRepository
from tests.service.conftest import client_for
from tests.service.helpers import free_port
from worker.context import context_from_settings
from worker.local import LocalRunner
from worker.settings import WorkerSettings

CHROMIUM = os.environ.get("CHROMIUM_BINARY", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
SPEC = "kind: op-present\nops: [Mul]"
WAIT_S = 45.0
STREAM_LIFETIME_S = 1.5  # short, so that the UI has to resume event streams with Last-Event-ID


@dataclass
class Seen:
    """One request as the server saw it."""

    path: str
    query: str
    last_event_id: str | None


@dataclass
class Service:
    url: str
    token: str
    seen: list[Seen]


def recording(app: Any, seen: list[Seen]) -> Any:
    """The app, noting each request's path, query and Last-Event-ID header."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            seen.append(Seen(scope["path"], scope["query_string"].decode("latin-1"), headers.get("last-event-id")))
        await app(scope, receive, send)

    return wrapped


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The embedded default in-process: SQLite, a data folder, the local runner, over real HTTP."""
    root = tmp_path_factory.mktemp("web-ui-service")
    url = f"sqlite:///{root / 'onnx-reducer.db'}"
    upgrade(url)
    database = Database(url)
    with database.session() as session:
        teams = TeamRepository(session)
        token = teams.create_token(teams.get_or_create("default"))
    database.dispose()
    data_dir = root / "data"
    worker = WorkerSettings(database_url=url, redis_url=None, data_dir=data_dir, allow_command_checks=True)
    runner = LocalRunner(context_from_settings(worker)).start()
    settings = ApiSettings(
        database_url=url,
        redis_url=None,
        data_dir=data_dir,
        allow_command_checks=True,
        sse_heartbeat_s=1,
        sse_poll_s=0.2,
        sse_max_lifetime_s=STREAM_LIFETIME_S,
    )
    seen: list[Seen] = []
    app = recording(create_app(settings, enqueue=runner), seen)
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the embedded api did not start"
    yield Service(f"http://127.0.0.1:{port}", token, seen)
    server.should_exit = True
    thread.join(10)
    runner.stop()


@dataclass
class Browser:
    driver: Any  # selenium.webdriver.Chrome
    downloads: Path

    def wait(self, condition: Callable[[Any], Any], what: str, timeout: float = WAIT_S) -> Any:
        from selenium.common.exceptions import TimeoutException
        from selenium.webdriver.support.ui import WebDriverWait

        try:
            return WebDriverWait(self.driver, timeout, poll_frequency=0.1).until(condition)
        except TimeoutException:
            page = self.text("main")
            raise AssertionError(f"timed out waiting for {what}; console: {self.console()}; page:\n{page}") from None

    def console(self) -> list[dict[str, Any]]:
        """The browser console's messages since the last call (warnings and errors)."""
        return list(self.driver.get_log("browser"))

    def find(self, element_id: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.ID, element_id)

    def text(self, element_id: str) -> str:
        return str(self.find(element_id).text)

    def save_token(self, token: str) -> None:
        field = self.find("token")
        field.clear()
        field.send_keys(token)
        self.find("token-save").click()
        self.wait(lambda d: "saved" in self.text("token-state"), "the token to be saved")


@pytest.fixture(scope="module")
def browser(service: Service) -> Iterator[Browser]:
    """Headless Chromium with a fresh profile and its own download folder. A missing browser is a
    failure, not a skip: CI installs it (`make test` runs scripts/test-browser.sh)."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not Path(path).is_file()]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not found: install the browser with scripts/test-browser.sh "
            "(apt-get install chromium chromium-driver; `make test` does it)",
            pytrace=False,
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as DriverService

    profile = Path(tempfile.mkdtemp(prefix="onnx-reducer-chromium-"))
    downloads = profile / "downloads"
    downloads.mkdir()
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile / 'user-data'}",
        "--window-size=1280,1000",
    ):
        options.add_argument(flag)
    options.add_experimental_option(
        "prefs",
        {
            "download.default_directory": str(downloads),
            "download.prompt_for_download": False,
            "download.directory_upgrade": True,
            "safebrowsing.enabled": False,
        },
    )
    driver = webdriver.Chrome(options=options, service=DriverService(executable_path=CHROMEDRIVER))
    try:
        driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
        driver.get(service.url + "/")
        yield Browser(driver, downloads)
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _choose_model(browser: Browser, tmp_path: Path) -> None:
    model_file = tmp_path / "model.onnx"
    onnx.save(build_example_model(), model_file)
    browser.find("model").send_keys(str(model_file))


def _submit(browser: Browser, tmp_path: Path, spec: str) -> None:
    _choose_model(browser, tmp_path)
    field = browser.find("check-spec")
    field.clear()
    field.send_keys(spec)
    browser.find("submit-job").click()


def test_upload_follow_and_download_the_reduced_model(service: Service, browser: Browser, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver = browser.driver
    assert driver.find_element(By.CSS_SELECTOR, "label[for=token]").text == "API token"
    browser.save_token(service.token)
    browser.find("nav-new").click()
    browser.wait(lambda d: browser.find("view-new").is_displayed(), "the new-job form")
    assert browser.find("check-spec").get_property("value") == SPEC
    _choose_model(browser, tmp_path)
    Select(browser.find("mode")).select_by_value("auto")
    browser.find("submit-job").click()

    browser.wait(lambda d: "#/jobs/" in d.current_url, "the job page")
    job_id = driver.current_url.rsplit("/", 1)[1]
    assert browser.text("job-id") == job_id
    browser.wait(lambda d: browser.text("job-status") == "succeeded", "the job to succeed")
    browser.wait(lambda d: browser.text("job-nodes-after") == "1", "the final node count")
    assert browser.text("job-nodes-before") == "5"

    with client_for(service.url, service.token) as client:
        iterations = client.get(f"/v1/jobs/{job_id}/iterations", params={"limit": 1000}).json()["items"]
        job = client.get(f"/v1/jobs/{job_id}").json()
    assert iterations and job["status"] == "succeeded"
    rows = "#iterations-body tr"
    browser.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, rows)) == len(iterations), "every iteration row")
    numbers = [int(r.get_attribute("data-number")) for r in driver.find_elements(By.CSS_SELECTOR, rows)]
    assert numbers == [it["number"] for it in iterations]
    assert browser.find("job-progress").get_property("value") == 100
    browser.wait(lambda d: "ended" in browser.text("stream-state"), "the event stream to end")
    assert not browser.find("error").is_displayed()
    assert browser.find("cancel-job").get_property("disabled")
    driver.save_screenshot(str(tmp_path / "job-page.png"))
    assert browser.console() == []

    browser.find("download-min-bad").click()
    expected = browser.downloads / f"{job_id}-min-bad.onnx"
    browser.wait(lambda d: expected.is_file() and expected.stat().st_size > 0, "the min-bad download", timeout=20)
    assert [n.op_type for n in onnx.load(str(expected)).graph.node] == ["Mul"]

    browser.find("nav-jobs").click()
    browser.wait(lambda d: d.find_elements(By.LINK_TEXT, job_id), "the job in the jobs list")
    Select(browser.find("status-filter")).select_by_value("failed")
    browser.wait(lambda d: not d.find_elements(By.LINK_TEXT, job_id), "the status filter")
    assert browser.find("jobs-empty").is_displayed()


def test_an_invalid_spec_shows_the_problem_detail(service: Service, browser: Browser, tmp_path: Path) -> None:
    spec = "kind: op-present\nops: []"
    with client_for(service.url, service.token) as client:
        answer = client.post(
            "/v1/jobs",
            files={"model": ("model.onnx", build_example_model().SerializeToString())},
            data={"check_spec": spec},
        )
    assert answer.status_code in (400, 422) and answer.headers["content-type"] == "application/problem+json"
    problem: dict[str, Any] = answer.json()

    browser.driver.get(service.url + "/#/new")
    browser.save_token(service.token)
    _submit(browser, tmp_path, spec)
    browser.wait(lambda d: browser.find("error").is_displayed(), "the problem to be shown")
    assert browser.text("error-title") == f"{problem['title']}:"
    assert browser.text("error-detail") == problem["detail"]
    assert "#/new" in browser.driver.current_url  # no job was created
    errors = [m for m in browser.console() if m["level"] == "SEVERE" and m["source"] != "network"]
    assert errors == []
    with client_for(service.url, service.token) as client:
        assert all(job["check_spec"] != spec for job in client.get("/v1/jobs").json()["items"])


def test_a_dropped_event_stream_resumes_after_the_last_event(
    service: Service, browser: Browser, tmp_path: Path
) -> None:
    """Each check sleeps, the stream's lifetime is short: the page reconnects with Last-Event-ID
    and still shows every iteration once, in order."""
    from selenium.webdriver.common.by import By

    spec = 'kind: command\ncommand: [sh, -c, \'sleep 0.8; if grep -q Mul "$1"; then exit 1; fi\', sh, "{model}"]'
    browser.driver.get(service.url + "/#/new")
    browser.save_token(service.token)
    _submit(browser, tmp_path, spec)
    browser.wait(lambda d: "#/jobs/" in d.current_url, "the job page")
    job_id = browser.driver.current_url.rsplit("/", 1)[1]
    browser.wait(lambda d: browser.text("job-status") == "succeeded", "the job to succeed")
    with client_for(service.url, service.token) as client:
        count = len(client.get(f"/v1/jobs/{job_id}/iterations").json()["items"])
    rows = "#iterations-body tr"
    browser.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, rows)) == count, "every iteration row")
    numbers = [int(r.get_attribute("data-number")) for r in browser.driver.find_elements(By.CSS_SELECTOR, rows)]
    assert numbers == list(range(1, count + 1))
    assert browser.text("job-nodes-after") == "1"

    streams = [r for r in service.seen if r.path == f"/v1/jobs/{job_id}/events"]
    assert len(streams) >= 2, streams
    assert streams[0].last_event_id is None
    resumed = [int(r.last_event_id or 0) for r in streams[1:]]
    assert resumed == sorted(resumed) and resumed[0] > 0, streams
    assert all(service.token not in f"{r.path}?{r.query}" for r in service.seen)  # headers only


def test_the_ui_is_served_without_a_token(service: Service) -> None:
    index = httpx.get(service.url + "/")
    assert index.status_code == 200 and index.headers["content-type"].startswith("text/html")
    assert "/ui/app.js" in index.text and "Content-Security-Policy" in index.text
    for asset, kind in (("app.js", "javascript"), ("app.css", "text/css")):
        response = httpx.get(f"{service.url}/ui/{asset}")
        assert response.status_code == 200 and kind in response.headers["content-type"], asset
    assert httpx.get(service.url + "/ui/").text == index.text
    assert httpx.get(service.url + "/ui/missing.js").headers["content-type"] == "application/problem+json"


def test_the_golden_values_file_is_uploaded_with_the_job(service: Service, browser: Browser, tmp_path: Path) -> None:
    """The optional "Golden values" input sends the file as the job's `golden` field."""
    onnx.save(build_example_model(), tmp_path / "example.onnx")
    command = [sys.executable, "-m", "reducer_cli.main", "golden", "example.onnx", "-o", "example.golden"]
    subprocess.run(command, cwd=tmp_path, check=True, capture_output=True, timeout=120)
    browser.driver.get(service.url + "/#/new")
    browser.save_token(service.token)
    browser.find("golden").send_keys(str(tmp_path / "example.golden"))
    _submit(browser, tmp_path, "kind: op-present\nops: [Mul]")
    browser.wait(lambda d: "#/jobs/" in d.current_url, "the job page")
    job_id = browser.driver.current_url.rsplit("/", 1)[1]
    with client_for(service.url, service.token) as client:
        golden = client.get(f"/v1/jobs/{job_id}/artifacts/golden")
    assert golden.status_code == 200, golden.text
    assert golden.content == (tmp_path / "example.golden").read_bytes()
