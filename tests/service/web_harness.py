"""The web page's test harness, shared by tests/service/test_web_ui*.py and
scripts/web_screenshots.py: the embedded service (SQLite, in-process runner) over real HTTP in a
thread, a TCP proxy whose connections can be cut, and headless Chromium (Debian's `chromium` and
`chromium-driver`; `make test` installs them via scripts/test-browser.sh) that can reach nothing
but 127.0.0.1."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service as DriverService
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from api.app import create_app
from api.settings import ApiSettings
from persistence.db import Database
from persistence.migrate import upgrade
from persistence.repositories import TeamRepository
from tests.service.helpers import free_port
from tests.service.sockets import accepted_clients
from worker.context import context_from_settings
from worker.local import LocalRunner
from worker.settings import WorkerSettings

CHROMIUM = os.environ.get("CHROMIUM_BINARY", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
WAIT_S = 45.0
STATIC = Path(__file__).resolve().parents[2] / "api" / "static"
# What sticks out sideways (a few ids or classes) when the page scrolls sideways; [] when it does not.
OVERFLOW_JS = """const width = document.documentElement.clientWidth;
    const wide = [...document.querySelectorAll('body *')].filter((e) => e.getBoundingClientRect().right > width + 1)
      .map((e) => e.id || e.className || e.tagName).slice(0, 5);
    return document.documentElement.scrollWidth > width ? wide : [];"""
# The start of a script that runs the page's own drawing code: ``probeBox(width, height)`` puts a
# fresh drawing box (the last one removed) at the top of the page and returns it.
PROBE_BOX_JS = r"""
        const probeBox = (width = 1000, height = 600) => {
          document.getElementById('probe-graph')?.remove();
          const box = document.createElement('div');
          box.className = 'graph-view';
          box.id = 'probe-graph';
          box.style.width = `${width}px`;
          box.style.height = `${height}px`;
          document.getElementById('main').prepend(box);
          return box;
        };
"""


def catalogue(lang: str) -> dict[str, str]:
    data: dict[str, str] = json.loads((STATIC / "i18n" / f"{lang}.json").read_text(encoding="utf-8"))
    return data


@dataclass
class Seen:
    """One request as the server saw it."""

    path: str
    query: str
    last_event_id: str | None
    at: float


@dataclass
class Service:
    url: str
    token: str
    seen: list[Seen]
    data_dir: Path


def _recording(app: Any, seen: list[Seen]) -> Any:
    """The app, noting each request's path, query and Last-Event-ID header."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            query = scope["query_string"].decode("latin-1")
            seen.append(Seen(scope["path"], query, headers.get("last-event-id"), time.monotonic()))
        await app(scope, receive, send)

    return wrapped


def _no_runner(job_id: str, queue: str) -> None:
    """An enqueue that hands the job to nobody: it stays queued."""


@contextmanager
def embedded_service(
    root: Path, run_jobs: bool = True, worker_settings: dict[str, Any] | None = None, **settings: Any
) -> Iterator[Service]:
    """The embedded default in-process: SQLite, a data folder, the local runner (none when
    ``run_jobs`` is false: jobs stay queued; ``worker_settings``: more of its settings), over real HTTP."""
    url = f"sqlite:///{root / 'onnx-reducer.db'}"
    upgrade(url)
    database = Database(url)
    with database.session() as session:
        teams = TeamRepository(session)
        token = teams.create_token(teams.get_or_create("default"))
    database.dispose()
    data_dir = root / "data"
    worker = WorkerSettings(
        database_url=url, redis_url=None, data_dir=data_dir, allow_command_checks=True, **(worker_settings or {})
    )
    runner = (
        LocalRunner(context_from_settings(worker), worker if worker_settings else None).start() if run_jobs else None
    )
    values: dict[str, Any] = {"sse_heartbeat_s": 1, "sse_poll_s": 0.2, "allow_command_checks": True} | settings
    api_settings = ApiSettings(database_url=url, redis_url=None, data_dir=data_dir, **values)
    seen: list[Seen] = []
    app = _recording(create_app(api_settings, enqueue=runner or _no_runner), seen)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the embedded api did not start"
    try:
        yield Service(f"http://127.0.0.1:{port}", token, seen, data_dir)
    finally:
        server.should_exit = True
        thread.join(10)
        if runner is not None:
            runner.stop()


_RESET = b"\x01\x00\x00\x00\x00\x00\x00\x00"  # SO_LINGER on, 0 s: close() sends RST


@dataclass
class _Link:
    client: socket.socket
    upstream: socket.socket
    cut: threading.Event = field(default_factory=threading.Event)
    pumps_done: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def pump_done(self) -> None:
        """Each direction calls this once; a cut link is reset at once, a finished one closed."""
        with self.lock:
            self.pumps_done += 1
            last = self.pumps_done == 2
        if self.cut.is_set() or last:
            self.close(reset=self.cut.is_set())

    def close(self, reset: bool) -> None:
        for sock in (self.client, self.upstream):
            with suppress(OSError):
                if reset:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
                sock.close()


@dataclass
class CuttableProxy:
    """A TCP proxy to ``target_port``; ``cut()`` resets every open connection at once (a network
    failure as the browser sees it, not a clean end of stream)."""

    target_port: int
    port: int = 0
    links: list[_Link] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> CuttableProxy:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        for client in accepted_clients(self.listener):
            link = _Link(client, socket.create_connection(("127.0.0.1", self.target_port)))
            for sock in (link.client, link.upstream):
                sock.settimeout(0.1)
            with self.lock:
                self.links.append(link)
            threading.Thread(target=self._pump, args=(link, link.client, link.upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(link, link.upstream, link.client), daemon=True).start()

    @staticmethod
    def _pump(link: _Link, source: socket.socket, sink: socket.socket) -> None:
        try:
            while not link.cut.is_set():
                try:
                    data = source.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    with suppress(OSError):
                        sink.shutdown(socket.SHUT_WR)
                    return
                sink.sendall(data)
        except OSError:
            return
        finally:
            link.pump_done()

    def cut(self) -> int:
        with self.lock:
            links, self.links = self.links, []
        for link in links:
            link.cut.set()
        return len(links)

    def stop(self) -> None:
        self.listener.close()
        self.cut()


@dataclass
class Browser:
    driver: Any  # selenium.webdriver.Chrome
    downloads: Path

    def wait(self, condition: Callable[[Any], Any], what: str, timeout: float = WAIT_S) -> Any:
        try:
            # a live page re-renders between finding an element and reading it: look again
            waiting = WebDriverWait(
                self.driver, timeout, poll_frequency=0.1, ignored_exceptions=(StaleElementReferenceException,)
            )
            return waiting.until(condition)
        except TimeoutException:
            page = self.driver.find_element(By.TAG_NAME, "body").text
            raise AssertionError(f"timed out waiting for {what}; console: {self.console()}; page:\n{page}") from None

    def console(self) -> list[dict[str, Any]]:
        """The browser console's messages since the last call (warnings and errors)."""
        return list(self.driver.get_log("browser"))

    def requested_urls(self) -> tuple[list[str], list[str]]:
        """The URLs the browser fetched since the last call, and those its Content-Security-Policy
        stopped before they left the browser (from the performance log)."""
        urls: dict[str, str] = {}
        blocked: set[str] = set()
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            params = message["params"]
            if message["method"] == "Network.requestWillBeSent":
                urls[params["requestId"]] = params["request"]["url"]
            elif message["method"] == "Network.loadingFailed" and params.get("blockedReason") == "csp":
                blocked.add(params["requestId"])
        fetched = [url for rid, url in urls.items() if rid not in blocked]
        return fetched, [urls[rid] for rid in blocked if rid in urls]

    def find(self, element_id: str) -> Any:
        return self.driver.find_element(By.ID, element_id)

    def text(self, element_id: str) -> str:
        return str(self.find(element_id).text)

    @contextmanager
    def narrow(self, width: int = 420, height: int = 900) -> Iterator[None]:
        """The page as a screen ``width`` CSS pixels wide shows it, until the block ends."""
        metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
        try:
            yield
        finally:
            self.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def open(self, url: str) -> None:
        self.driver.get(url)
        self.wait(lambda d: self.js("return document.body.dataset.ready === 'true'"), "the page to start")

    def reload(self) -> None:
        """The page again, a new document (it reads the browser's languages and the stored one
        anew), once it has started: its language's catalogue loaded. (Its ``lang`` attribute says
        "en" before any script runs: no sign that the page speaks English yet.)"""
        self.driver.refresh()
        self.wait(lambda d: self.js("return document.body.dataset.ready === 'true'"), "the page to start again")

    def sign_in(self, token: str) -> None:
        if self.js("return document.body.classList.contains('signed-in')"):
            return
        field = self.find("token")
        field.clear()
        field.send_keys(token)
        self.find("token-save").click()
        self.wait(lambda d: self.find("token-state").get_attribute("data-state") == "ok", "the token to be accepted")

    def drop_file(self, zone_id: str, name: str, data: bytes) -> None:
        """Drop a file on the element as a user's drag and drop would (a DataTransfer in a drop event)."""
        self.js(
            """
            const [zoneId, name, b64] = arguments;
            const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
            const transfer = new DataTransfer();
            transfer.items.add(new File([bytes], name, { type: "application/octet-stream" }));
            const zone = document.getElementById(zoneId);
            for (const type of ["dragenter", "dragover", "drop"]) {
              zone.dispatchEvent(new DragEvent(type, { dataTransfer: transfer, bubbles: true, cancelable: true }));
            }
            """,
            zone_id,
            name,
            base64.b64encode(data).decode(),
        )

    def set_language(self, lang: str) -> None:
        """The browser's preferred languages (navigator.languages) as a user's settings would set them."""
        self.driver.execute_cdp_cmd(
            "Network.setUserAgentOverride",
            {"userAgent": self.js("return navigator.userAgent"), "acceptLanguage": lang},
        )


def plain(text: str, **params: Any) -> str:
    """A catalogue text as the page shows it: parameters filled in, `code` marks dropped."""
    for name, value in params.items():
        text = text.replace("{" + name + "}", str(value))
    return text.replace("`", "")


def severe(browser: Browser) -> list[dict[str, Any]]:
    """The page's console errors (failed network requests aside: tests provoke those)."""
    return [m for m in browser.console() if m["level"] == "SEVERE" and m["source"] != "network"]


@contextmanager
def module_browser() -> Iterator[Browser]:
    """Headless Chromium for a test module: a missing browser is a failure, not a skip (CI
    installs it)."""
    try:
        require_chromium()
    except FileNotFoundError as exc:
        pytest.fail(str(exc), pytrace=False)
    with chromium() as browser:
        yield browser


def require_chromium() -> None:
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not Path(path).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{', '.join(missing)} not found: install the browser with scripts/test-browser.sh "
            "(apt-get install chromium chromium-driver; `make test` does it)"
        )


@contextmanager
def chromium(width: int = 1280, height: int = 1000) -> Iterator[Browser]:
    """Headless Chromium with a fresh profile and its own download folder, resolving no host but
    127.0.0.1 (nothing outside this machine can be fetched)."""
    require_chromium()
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
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        "--lang=en-US",
        f"--user-data-dir={profile / 'user-data'}",
        f"--window-size={width},{height}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    options.add_experimental_option(
        "prefs",
        {
            "download.default_directory": str(downloads),
            "download.prompt_for_download": False,
            "download.directory_upgrade": True,
            "safebrowsing.enabled": False,
            "intl.accept_languages": "en-US,en",
        },
    )
    driver = webdriver.Chrome(options=options, service=DriverService(executable_path=CHROMEDRIVER))
    try:
        driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
        yield Browser(driver, downloads)
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
