"""Refresh the web page's screenshots in docs/screenshots/ (shown in the README): the jobs list, a
running job, the workers page, a finished job's graph comparison, the graph drawings (a 39-node
chain, a 1,018-node transformer with its min-bad inside, the same in Chinese, a compare job's
error overlay) and an interactive job's question. Runs the embedded service and headless
Chromium from the browser tests' harness; nothing is fetched from outside.

    make screenshots        (or: PYTHONPATH=. .venv/bin/python scripts/web_screenshots.py [OUT_DIR])
"""

from __future__ import annotations

import base64
import sys
import tempfile
import time
from pathlib import Path

import httpx
import onnx
from selenium.webdriver.common.action_chains import ActionChains

from examples.build_example_model import build_example_model
from tests.checks.conftest import COMPARE_FP16
from tests.checks.models import chain_model as overflow_chain
from tests.service.graph_models import add_chain, transformer_model
from tests.service.helpers import chain_model, wait_job
from tests.service.web_harness import Browser, chromium, embedded_service

WIDTH, HEIGHT = 1100, 760
# fails while the whole 39-node chain is there: its min-bad is the chain itself
LONG_CHECK = (
    "kind: command\ncommand: ['"
    + sys.executable
    + "', -c, 'import onnx, sys; sys.exit(1 if len(onnx.load(sys.argv[1]).graph.node) >= 39 else 0)', '{model}']\n"
)
SLOW_CHECK = "kind: command\ncommand: [sh, -c, 'sleep 0.6; if grep -q Mul \"$1\"; then exit 1; fi', sh, '{model}']\n"


def capture(
    browser: Browser, path: Path, top_id: str, bottom_id: str | None = None, pad: int = 12, beyond: bool = True
) -> None:
    """A PNG of the page from the top of ``top_id`` to the bottom of ``bottom_id`` (or of ``top_id``);
    ``beyond``: what lies beyond the window too (the page is laid out again for it)."""
    box = browser.js(
        """const a = document.getElementById(arguments[0]);
        const b = document.getElementById(arguments[1] || arguments[0]);
        const top = a.getBoundingClientRect().top + scrollY, bottom = b.getBoundingClientRect().bottom + scrollY;
        return [top, bottom];""",
        top_id,
        bottom_id,
    )
    clip = {"x": 0, "y": max(0, box[0] - pad), "width": WIDTH, "height": box[1] - box[0] + 2 * pad, "scale": 1}
    shot = browser.driver.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": beyond}
    )
    path.write_bytes(base64.b64decode(shot["data"]))
    print(f"wrote {path} ({path.stat().st_size // 1024} KiB)")


def submit(client: httpx.Client, model: onnx.ModelProto, spec: str, filename: str, mode: str = "auto") -> str:
    files = {"model": (filename, model.SerializeToString())}
    answer = client.post("/v1/jobs", files=files, data={"check_spec": spec, "mode": mode})
    answer.raise_for_status()
    job_id: str = answer.json()["id"]
    return job_id


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    example = build_example_model()
    with (
        embedded_service(Path(tempfile.mkdtemp(prefix="onnx-reducer-shots-"))) as service,
        chromium(WIDTH, HEIGHT) as browser,
    ):
        headers = {"Authorization": f"Bearer {service.token}"}
        with httpx.Client(base_url=service.url, headers=headers, timeout=60) as client:
            finished = submit(client, example, "kind: op-present\nops: [Mul]", "example.onnx")
            wait_job(client, finished)
            wait_job(client, submit(client, example, "kind: op-present\nops: [Conv]", "no-conv.onnx"))
            wait_job(
                client, submit(client, chain_model(24, 15), "kind: op-present\nops: [Mul]", "chain.onnx", "bisect")
            )
            running = submit(client, chain_model(40, 29), SLOW_CHECK, "encoder-block.onnx", "linear")

            browser.open(service.url + "/#/jobs")
            browser.sign_in(service.token)
            browser.wait(lambda d: len(d.find_elements("css selector", "#jobs-body tr")) == 4, "four jobs")
            capture(browser, out / "jobs.png", "view-jobs")

            browser.driver.get(f"{service.url}/#/jobs/{running}")
            browser.wait(lambda d: len(d.find_elements("css selector", "#iterations-body tr")) >= 9, "iterations")
            browser.wait(lambda d: browser.text("job-eta") != "–", "an ETA")
            time.sleep(0.5)
            capture(browser, out / "running-job.png", "view-job", "chart-legend")

            browser.driver.get(f"{service.url}/#/workers")
            busy = '#workers-body [data-state="busy"]'
            browser.wait(lambda d: d.find_elements("css selector", busy), "a busy worker")
            browser.wait(lambda d: "iteration" in browser.text("workers-body"), "its check")
            capture(browser, out / "workers.png", "view-workers")
            client.post(f"/v1/jobs/{running}/cancel")

            browser.driver.get(f"{service.url}/#/jobs/{finished}")
            browser.wait(lambda d: d.find_elements("css selector", "#graph-min-good g.gnode"), "the graphs")
            time.sleep(0.5)
            capture(browser, out / "graphs.png", "job-summary", "graphs-help")
            wait_job(client, running)

            graphs(browser, client, service.url, out)
            overlay(client, service.url, service.token, out)

            interactive = submit(client, example, "kind: interactive", "no-check-script.onnx")
            client.post(f"/v1/jobs/{interactive}/verdict", json={"iteration": 1, "verdict": "fail"}).raise_for_status()
            browser.driver.get(f"{service.url}/#/jobs/{interactive}")
            browser.wait(lambda d: "iteration 2 " in browser.text("verdict-heading"), "the question")
            time.sleep(0.3)
            capture(browser, out / "interactive.png", "view-job", "verdict-panel")


def graphs(browser: Browser, client: httpx.Client, url: str, out: Path) -> None:
    """The graph drawings: a 39-node chain at Fit, a 1,018-node transformer with its min-bad inside
    the original graph, and the same in Chinese."""
    chain = submit(client, add_chain(39), LONG_CHECK, "fp16-accumulation.onnx")
    encoder = submit(client, transformer_model(24), "kind: op-present\nops: [Softmax]", "encoder.onnx")
    wait_job(client, chain, timeout=600)
    wait_job(client, encoder, timeout=600)
    browser.driver.get(f"{url}/#/jobs/{chain}")
    browser.wait(lambda d: d.find_elements("css selector", "#graph-min-good g.gnode"), "the chain's graphs")
    time.sleep(0.5)
    capture(browser, out / "graph-chain.png", "graphs-heading", "panel-min-bad")
    browser.driver.get(f"{url}/#/jobs/{encoder}")
    browser.wait(lambda d: d.find_elements("css selector", "#graph-original g.gnode.focus"), "the min-bad in context")
    time.sleep(0.5)
    capture(browser, out / "graph-in-context.png", "panel-original")
    browser.js("localStorage.setItem('onnx-reducer.lang', 'zh-CN')")
    browser.driver.refresh()  # a new document in Chinese
    browser.wait(lambda d: d.find_elements("css selector", "#graph-original g.gnode.focus"), "the min-bad in context")
    browser.find("search-original").send_keys("Erf\n")
    time.sleep(0.8)
    capture(browser, out / "graph-in-context-zh.png", "panel-original")
    browser.js("localStorage.removeItem('onnx-reducer.lang')")
    browser.driver.refresh()  # English again for what follows (a hash change keeps the document)


def overlay(client: httpx.Client, url: str, token: str, out: Path) -> None:
    """A compare job's error overlay: an fp16 overflow planted in a 40-node chain with residual
    Adds, each node coloured by its error in the localisation step, the overflowing node hovered.
    In a window tall enough for the whole graphs section, scrolled to the top: the PNG is taken
    without laying the page out again (which would move the nodes under the pointer, ending the
    hover)."""
    job = submit(client, overflow_chain(40, 23, residual_every=5), COMPARE_FP16, "fp16-overflow.onnx")
    wait_job(client, job, timeout=600)
    with chromium(WIDTH, 2800) as browser:
        browser.open(f"{url}/#/jobs/{job}")
        browser.sign_in(token)
        browser.wait(lambda d: browser.find("error-overlay").is_displayed(), "the error overlay switch")
        browser.find("error-overlay-on").click()
        browser.wait(lambda d: d.find_elements("css selector", "#graph-original g.gnode.err"), "coloured nodes")
        browser.js("window.scrollTo(0, 0)")
        node = browser.driver.find_element("css selector", '#graph-original g.gnode[data-id="n23_overflow"]')
        ActionChains(browser.driver).move_to_element(node).perform()
        hovered = "return !document.querySelector('#graph-original .graph-hover').hidden"
        browser.wait(lambda d: browser.js(hovered), "the hover box")
        capture(browser, out / "graph-error-overlay.png", "graphs-heading", "panel-original", beyond=False)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/screenshots"))
