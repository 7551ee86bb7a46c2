"""The workers page as a new user reads it (issue 29), in a real headless Chromium against the
embedded service: a slot without a GPU lists no gpu queue (it could run none of that queue's
checks; a slot with a GPU lists it), and the runtimes column wraps between words, never inside one
(`CPUExecutionProvider` used to break anywhere, the page's default)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from persistence.migrate import upgrade
from tests.service.conftest import client_for
from tests.service.web_harness import Browser, Service
from worker.context import context_from_settings
from worker.local import LocalRunner
from worker.settings import WorkerSettings

H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def sqlite_url(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'slots.db'}"
    upgrade(url)
    yield url


@pytest.mark.parametrize(("gpus", "queues"), [("none", ("cpu",)), (H100, ("cpu", "gpu"))])
def test_a_slot_lists_the_gpu_queue_only_with_a_gpu(
    sqlite_url: str, tmp_path: Path, gpus: str, queues: tuple[str, ...]
) -> None:
    settings = WorkerSettings(database_url=sqlite_url, redis_url=None, data_dir=tmp_path / "data", worker_gpus=gpus)
    runner = LocalRunner(context_from_settings(settings), settings)
    assert [node.identity.queues for node in runner.nodes] == [queues] * len(runner.nodes)


def test_the_workers_page_lists_no_gpu_queue_without_a_gpu(service: Service, browser: Browser) -> None:
    with client_for(service.url, service.token) as client:
        workers = client.get("/v1/workers").json()["items"]
    assert workers, "the embedded service's slots report as workers"
    gpuless = [w for w in workers if not w["gpus"]]
    assert gpuless, "this test machine's slots have no GPU"
    assert all(w["queues"] == ["cpu"] for w in gpuless), gpuless
    browser.open(service.url + "/#/workers")
    browser.sign_in(service.token)
    row = f'#workers-body tr[data-worker="{gpuless[0]["name"]}"]'
    browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, row), "the worker's row")
    queues = browser.driver.find_element(By.CSS_SELECTOR, f"{row} td:nth-child(3)").text
    assert queues == "cpu"


BROKEN_WORDS = """const cell = arguments[0];
    const broken = [];
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const text = node.textContent;
      for (const match of text.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(node, match.index);
        range.setEnd(node, match.index + match[0].length);
        const lines = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
        if (lines.size > 1) broken.push(match[0]);
      }
    }
    return broken;"""


@pytest.mark.parametrize("width", [760, 1000, 1100])
def test_the_runtimes_column_does_not_wrap_mid_word(service: Service, browser: Browser, width: int) -> None:
    size = browser.driver.get_window_size()
    browser.driver.set_window_size(width, size["height"])
    try:
        browser.open(service.url + "/#/workers")
        browser.sign_in(service.token)
        cells = "#workers-body tr[data-worker] td:nth-child(5)"  # Runtimes
        browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, cells), "the runtimes column")
        for cell in browser.driver.find_elements(By.CSS_SELECTOR, cells):
            assert "onnxruntime" in cell.text and "CPU" in cell.text
            assert browser.js(BROKEN_WORDS, cell) == [], cell.text
            # the providers by their short names (CPU), the full ones in the tooltip
            title = browser.js("return arguments[0].querySelector('[title]')?.title || ''", cell)
            assert "CPUExecutionProvider" in title, title
        for heading in browser.driver.find_elements(By.CSS_SELECTOR, "#workers-table th"):
            assert browser.js(BROKEN_WORDS, heading) == [], heading.text  # the headings wrap between words too
        if width < 1000:  # nine columns, the short ones on one line: they fit from about 1,000 px
            return
        # the table stays inside its card: no column cut off, no sideways scroll
        fits = browser.js(
            """const table = document.getElementById('workers-table');
            const card = table.parentElement.getBoundingClientRect();
            return [table.getBoundingClientRect().right <= card.right + 1,
                    document.documentElement.scrollWidth <= document.documentElement.clientWidth];"""
        )
        assert fits == [True, True], fits
    finally:
        browser.driver.set_window_size(size["width"], size["height"])
