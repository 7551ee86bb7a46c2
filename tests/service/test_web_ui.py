"""The web page in a real headless Chromium (Selenium + chromedriver, Debian packages `chromium` and
`chromium-driver`; `make test` installs them via scripts/test-browser.sh) against the embedded
service (SQLite, in-process runner) over real HTTP. The browser resolves no host but 127.0.0.1.

It signs in (and says what to do without a token or with a refused one), drops the reference
example on the drop zone, watches it finish, sees both graphs with the Mul highlighted, downloads
min-bad; shows server errors next to their fields; survives a cut event stream; cancels only after
a confirmation and still offers the best model so far; speaks Chinese; renders /docs offline; and
never scrolls sideways at 420 px."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import httpx
import numpy as np
import onnx
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.actions.wheel_input import ScrollOrigin
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from api.graph_view import describe_graph
from bench.samples_bench import input_overflow_chain
from examples.build_example_model import build_example_model
from tests.precision_models import COMPARE_FP16, one_node_overflows
from tests.service.conftest import EXAMPLE, client_for, finished_job
from tests.service.helpers import chain_model
from tests.service.web_harness import (
    OVERFLOW_JS,
    Browser,
    CuttableProxy,
    Service,
    catalogue,
    embedded_service,
    plain,
    severe,
)

NO_GRAPH = onnx.ModelProto(ir_version=8).SerializeToString()  # parses, but is no model
EN = catalogue("en")
ZH = catalogue("zh-CN")
SLOW_CHECK = ["sh", "-c", 'sleep 0.8; if grep -q Mul "$1"; then exit 1; fi', "sh", "{model}"]


NUMBERS = "return [...document.querySelectorAll('#iterations-body tr[data-number]')].map((r) => +r.dataset.number)"


def _wait_status(browser: Browser, status: str) -> None:
    browser.wait(lambda d: browser.find("job-status").get_attribute("data-status") == status, f"status {status}")


def _unstaged(detail: str) -> str:
    """A problem detail without the per-request staging folder's name (unique per upload)."""
    return re.sub(r"staging/[0-9a-f]{32}", "staging/*", detail)


def _job_id(browser: Browser) -> str:
    browser.wait(lambda d: "#/jobs/" in d.current_url, "the job page")
    return str(browser.driver.current_url.rsplit("/", 1)[1])


def _use_yaml(browser: Browser, spec: str) -> None:
    browser.find("spec-source-yaml").click()
    field = browser.find("check-spec")
    field.clear()
    field.send_keys(spec)


def test_the_sign_in_states_say_what_to_do_next(service: Service, browser: Browser) -> None:
    browser.open(service.url + "/#/jobs")
    hint = plain(EN["jobs.state.signin"])
    assert browser.text("jobs-state") == hint and "onnx-reducer token create --team NAME" in hint
    assert not browser.find("jobs-table").is_displayed()
    assert browser.text("token-state") == plain(EN["token.state.none"])

    field = browser.find("token")
    field.send_keys("not-a-token")
    browser.find("token-save").click()
    browser.wait(lambda d: browser.find("token-state").get_attribute("data-state") == "refused", "the refusal")
    assert browser.text("token-state") == plain(EN["token.state.refused"])
    assert "Signed in" not in browser.find("main").text + browser.text("token-state")
    assert browser.text("jobs-state") == hint  # the refusal is said once, beside the field
    assert browser.js("return localStorage.getItem('onnx-reducer.token')") is None

    browser.find("nav-new").click()
    browser.wait(lambda d: browser.find("view-new").is_displayed(), "the new-job form")
    assert browser.text("new-state") == hint
    assert browser.find("submit-job").get_property("disabled")

    browser.sign_in(service.token)
    assert browser.text("token-state") == plain(EN["token.state.ok"], team="default")
    assert not browser.find("submit-job").get_property("disabled")
    assert not browser.find("token").is_displayed() and browser.find("token-forget").is_displayed()
    assert all(service.token not in f"{r.path}?{r.query}" for r in service.seen)  # headers only


def _download_the_bundle(browser: Browser, job_id: str) -> None:
    """The bug-report zip (min-bad, the inputs it sees, the check, repro.py) from the page's button."""
    browser.find("download-bundle").click()
    report = browser.downloads / f"{job_id}-bundle.zip"
    browser.wait(lambda d: report.is_file() and zipfile.is_zipfile(report), "the bundle download", timeout=20)
    assert {"min_bad.onnx", "repro.py", "README.md"} <= set(zipfile.ZipFile(report).namelist())


def test_drop_the_example_watch_it_and_compare_the_graphs(service: Service, browser: Browser) -> None:
    browser.open(service.url + "/#/new")
    browser.sign_in(service.token)
    browser.drop_file("drop-zone", "model.onnx", EXAMPLE)
    assert browser.text("model-chosen") == plain(EN["new.model.chosen"], name="model.onnx", size=f"{len(EXAMPLE)} B")
    assert browser.find("spec-preview").text == 'kind: op-present\nops: ["Mul"]'
    Select(browser.find("mode")).select_by_value("auto")
    browser.find("submit-job").click()

    job_id = _job_id(browser)
    assert browser.text("job-id") == job_id
    _wait_status(browser, "succeeded")
    browser.wait(lambda d: browser.text("job-nodes-after") == "1", "the final node count")
    assert browser.text("job-nodes-before") == "5"

    bad = "#graph-min-bad g.gnode.node"
    browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, bad), "the min-bad graph")
    nodes = browser.driver.find_elements(By.CSS_SELECTOR, bad)
    assert [(n.get_attribute("data-op"), "diff" in n.get_attribute("class")) for n in nodes] == [("Mul", True)]
    good = browser.driver.find_elements(By.CSS_SELECTOR, "#graph-min-good g.gnode.node")
    assert good and "Mul" not in [n.get_attribute("data-op") for n in good]
    assert all("diff" in n.get_attribute("class") for n in good)  # none of them is in min-bad
    labels = browser.js("return [...document.querySelectorAll('#graph-min-bad text')].map(t => t.textContent)")
    # the data step is opt-in (reduce_data): the answer keeps the example's 2 x 2 inputs
    assert "onnx_graphsurgeon_node_5" in labels and "float32[1,1,2,2]" in labels
    summary = plain(EN["summary.single"], name="onnx_graphsurgeon_node_5", op="Mul")
    assert browser.text("job-summary") == summary
    assert "5" in browser.find("original-summary").text

    with client_for(service.url, service.token) as client:
        iterations = client.get(f"/v1/jobs/{job_id}/iterations").json()["items"]
    # the rows come with the event stream (the chart a frame later), maybe after the status said succeeded
    browser.wait(lambda d: browser.text("stream-state") == EN["stream.ended"], "the event stream to end")
    browser.wait(lambda d: browser.js(NUMBERS) == [it["number"] for it in iterations], "every iteration listed")
    charted = lambda d: browser.js("return document.querySelectorAll('#chart .mark').length") == len(iterations)  # noqa: E731
    browser.wait(charted, "every iteration charted")
    assert browser.find("cancel-job").get_property("disabled")

    browser.find("download-min-bad").click()
    expected = browser.downloads / f"{job_id}-min-bad.onnx"
    browser.wait(lambda d: expected.is_file() and expected.stat().st_size > 0, "the min-bad download", timeout=20)
    assert [n.op_type for n in onnx.load(str(expected)).graph.node] == ["Mul"]
    _download_the_bundle(browser, job_id)
    first_row = '#iterations-body tr[data-number="1"] button.link'
    browser.driver.find_element(By.CSS_SELECTOR, first_row).click()  # iteration 1: the original
    first = browser.downloads / f"{job_id}-iteration-1.onnx"
    browser.wait(lambda d: first.is_file() and first.stat().st_size > 0, "the iteration download", timeout=20)
    assert len(onnx.load(str(first)).graph.node) == iterations[0]["nodes"]

    browser.find("nav-jobs").click()
    row = f'#jobs-body tr[data-id="{job_id}"]'
    browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, row), "the job in the jobs list")
    assert "5 → 1" in browser.driver.find_element(By.CSS_SELECTOR, row).text
    Select(browser.find("status-filter")).select_by_value("failed")
    expected_state = plain(EN["jobs.state.none_status"], status=EN["status.failed"])
    browser.wait(lambda d: browser.text("jobs-state") == expected_state, "the status filter")
    Select(browser.find("status-filter")).select_by_value("")
    assert severe(browser) == []


def test_the_smaller_inputs_checkbox_sends_reduce_data(service: Service, browser: Browser) -> None:
    """The box "Shrink the answer's inputs and weights" is unticked by default; ticking it sends
    ``reduce_data=true``: the job stores it (its op-present check reads no values, so its min-bad
    graph keeps the example's 2 x 2 inputs all the same)."""
    browser.open(service.url + "/#/new")
    browser.sign_in(service.token)
    box = browser.find("reduce_data")
    assert not box.get_property("checked") and browser.text("reduce_data-help") == plain(EN["new.reduce_data.help"])
    browser.driver.find_element(By.CSS_SELECTOR, 'label[for="reduce_data"]').click()
    assert box.get_property("checked")
    browser.drop_file("drop-zone", "model.onnx", EXAMPLE)
    browser.find("submit-job").click()
    job_id = _job_id(browser)
    browser.js("document.getElementById('reduce_data').checked = false")  # later tests: the default again
    _wait_status(browser, "succeeded")
    with client_for(service.url, service.token) as client:
        job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["options"]["reduce_data"] is True
    labels = "return [...document.querySelectorAll('#graph-min-bad text')].map(t => t.textContent)"
    # (the page may still hold the graph of the job opened before: wait for this job's)
    browser.wait(lambda d: "float32[1,1,2,2]" in browser.js(labels), "this job's min-bad graph")
    assert "float32[1,1,1,1]" not in browser.js(labels)
    assert severe(browser) == []


def test_an_upload_shows_its_progress(service: Service, browser: Browser) -> None:
    """A 6 MB model: the upload's progress events move the bar (recorded as they happen)."""
    browser.open(service.url + "/#/new")
    browser.sign_in(service.token)
    model = build_example_model()
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.zeros(1_500_000, "float32"), "w"))
    browser.js(
        """window.progressSeen = [];
        const bar = document.getElementById('upload-progress');
        new MutationObserver(() => window.progressSeen.push(bar.value)).observe(bar, { attributes: true });"""
    )
    browser.drop_file("drop-zone", "big.onnx", model.SerializeToString())
    browser.find("submit-job").click()
    _job_id(browser)
    seen = browser.js("return window.progressSeen")
    assert seen and seen[-1] == 100 and seen == sorted(seen), seen


def test_server_errors_appear_next_to_their_field(service: Service, browser: Browser) -> None:
    with client_for(service.url, service.token) as client:
        bad_model = client.post(
            "/v1/jobs",
            files={"model": ("model.onnx", NO_GRAPH)},
            data={"check_spec": "kind: op-present\nops: [Mul]"},
        ).json()
        bad_ops = client.post(
            "/v1/jobs", files={"model": ("m.onnx", EXAMPLE)}, data={"check_spec": "kind: op-present\nops: []\n"}
        ).json()
        bad_kind = client.post(
            "/v1/jobs", files={"model": ("m.onnx", EXAMPLE)}, data={"check_spec": "kind: nope"}
        ).json()
    browser.open(service.url + "/#/new")
    browser.sign_in(service.token)

    browser.drop_file("drop-zone", "model.onnx", NO_GRAPH)
    browser.find("submit-job").click()
    browser.wait(lambda d: browser.find("model-error").is_displayed(), "the model's error")
    assert _unstaged(browser.text("model-error")) == _unstaged(bad_model["detail"])
    assert browser.find("model").get_attribute("aria-invalid") == "true"

    browser.drop_file("drop-zone", "model.onnx", EXAMPLE)
    assert not browser.find("model-error").is_displayed()
    browser.find("ops").clear()
    browser.find("submit-job").click()
    browser.wait(lambda d: browser.find("ops-error").is_displayed(), "the ops field's error")
    assert browser.text("ops-error") == bad_ops["detail"]

    _use_yaml(browser, "kind: nope")
    browser.find("submit-job").click()
    browser.wait(lambda d: browser.find("check_spec-error").is_displayed(), "the spec's error")
    assert browser.text("check_spec-error") == bad_kind["detail"]
    assert "#/new" in browser.driver.current_url  # no job was created
    assert severe(browser) == []
    browser.find("spec-source-form").click()


def test_a_missing_job_says_so_and_offers_no_buttons(service: Service, browser: Browser) -> None:
    browser.open(service.url + "/#/jobs/0123456789abcdef")
    browser.sign_in(service.token)
    browser.wait(lambda d: browser.find("job-missing").is_displayed(), "the missing-job message")
    assert browser.text("job-missing-text") == plain(EN["job.missing"], id="0123456789abcdef")
    assert not browser.find("job-card").is_displayed()
    buttons = browser.driver.find_elements(By.CSS_SELECTOR, "#view-job button")
    assert not [b for b in buttons if b.is_displayed() and b.is_enabled()]
    assert not browser.find("error").is_displayed()


def _start_slow_job(browser: Browser) -> str:
    """A 24-node chain reduced linearly with a command check that sleeps: many iterations."""
    browser.drop_file("drop-zone", "chain.onnx", chain_model(24, 15).SerializeToString())
    Select(browser.find("check-kind")).select_by_value("command")
    browser.find("command").clear()
    browser.find("command").send_keys("\n".join(SLOW_CHECK))
    Select(browser.find("mode")).select_by_value("linear")
    browser.find("submit-job").click()
    return _job_id(browser)


def _cancel_after_confirming(browser: Browser) -> None:
    """Cancel asks first: "keep it running" leaves the job running; confirming cancels it."""
    browser.find("cancel-job").click()
    assert browser.find("cancel-dialog").get_property("open")
    browser.find("cancel-keep").click()
    assert not browser.find("cancel-dialog").get_property("open")
    time.sleep(1)
    assert browser.find("job-status").get_attribute("data-status") == "running"
    browser.find("cancel-job").click()
    browser.find("cancel-confirm").click()
    _wait_status(browser, "cancelled")


def test_the_live_page_survives_a_cut_stream_and_cancel_asks_first(service: Service, browser: Browser) -> None:
    """Through a proxy whose connections are cut mid-job: the page reconnects by itself with
    Last-Event-ID and shows every iteration once; cancel needs a confirmation; the cancelled job
    offers its best model so far."""
    proxy = CuttableProxy(int(service.url.rsplit(":", 1)[1])).start()
    try:
        browser.open(proxy.url + "/#/new")
        browser.sign_in(service.token)
        job_id = _start_slow_job(browser)
        rows = "#iterations-body tr[data-number]"
        browser.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, rows)) >= 3, "a few iterations")
        browser.wait(lambda d: browser.text("job-eta") != "–", "an ETA")
        assert browser.text("job-per-check") != "–"

        before = len(browser.driver.find_elements(By.CSS_SELECTOR, rows))
        cut_at = time.monotonic()
        assert proxy.cut() >= 1
        browser.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, rows)) >= before + 3, "iterations after the cut")
        streams = [r for r in service.seen if r.path == f"/v1/jobs/{job_id}/events"]
        resumed = [r for r in streams if r.at > cut_at]
        assert resumed and all(int(r.last_event_id or 0) > 0 for r in resumed), streams
        numbers = [int(r.get_attribute("data-number")) for r in browser.driver.find_elements(By.CSS_SELECTOR, rows)]
        assert numbers == list(range(1, len(numbers) + 1))
        assert browser.text("stream-state") == EN["stream.live"] and not browser.find("error").is_displayed()

        _cancel_after_confirming(browser)

        with client_for(service.url, service.token) as client:
            items = client.get(f"/v1/jobs/{job_id}/iterations").json()["items"]
        best = min((i for i in items if i["reproduces"]), key=lambda i: (i["nodes"], i["number"]))
        button = browser.find("download-min-bad")
        browser.wait(
            lambda d: button.is_enabled() and button.text == plain(EN["job.download.best"], n=best["nodes"]),
            "the best-so-far download",
        )
        expected = plain(EN["summary.best_so_far"], n=best["nodes"], number=best["number"])
        browser.wait(lambda d: browser.text("job-summary") == expected, "the ended-early summary")
        browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, '#graph-min-bad g.gnode[data-op="Mul"]'), "its graph")
        button.click()
        saved = browser.downloads / f"{job_id}-min-bad-iteration-{best['number']}.onnx"
        browser.wait(lambda d: saved.is_file() and saved.stat().st_size > 0, "the best model so far", timeout=20)
        assert len(onnx.load(str(saved)).graph.node) == best["nodes"]
        assert severe(browser) == []
    finally:
        proxy.stop()


def test_a_queued_job_says_why_it_waits(browser: Browser, tmp_path: Path) -> None:
    """With nobody to run it, the job stays queued and its page shows the api's waiting reason."""
    with embedded_service(tmp_path, run_jobs=False) as idle:
        with client_for(idle.url, idle.token) as client:
            job_id = client.post(
                "/v1/jobs",
                files={"model": ("model.onnx", EXAMPLE)},
                data={"check_spec": "kind: op-present\nops: [Mul]"},
            ).json()["id"]
            reason = client.get(f"/v1/jobs/{job_id}").json()["waiting_reason"]
        assert reason
        browser.open(f"{idle.url}/#/jobs/{job_id}")
        browser.sign_in(idle.token)
        browser.wait(lambda d: browser.find("job-waiting").is_displayed(), "the waiting reason")
        assert browser.text("job-waiting") == reason
        assert browser.find("job-status").get_attribute("data-status") == "queued"


def _texts(browser: Browser) -> list[str]:
    return list(
        browser.js(
            """return [...document.querySelectorAll('[data-i18n]')]
             .filter((e) => e.getClientRects().length).map((e) => [e.dataset.i18n, e.textContent])"""
        )
    )


def test_the_page_follows_a_chinese_browser(service: Service, browser: Browser) -> None:
    browser.set_language("zh-CN,zh")
    try:
        browser.open(service.url + "/#/new")
        browser.js("localStorage.removeItem('onnx-reducer.lang')")
        browser.reload()  # (opening the same address again would not load the page again)
        assert browser.js("return document.documentElement.lang") == "zh-CN"
        browser.sign_in(service.token)
        assert browser.text("token-state") == plain(ZH["token.state.ok"], team="default")
        job_id = finished_job(service)
        english = {v.replace("`", "") for k, v in EN.items() if ZH[k] != v and "{" not in v and len(v) > 3}
        task_names = browser.js("return [...document.querySelectorAll('#task option')].map((o) => o.value)")
        assert "bisect-passes" in task_names
        for route in ("#/new", "#/jobs", f"#/jobs/{job_id}"):
            browser.driver.get(f"{service.url}/{route}")
            browser.wait(lambda d: browser.js("return document.body.dataset.ready === 'true'"), "the page")
            if "jobs/" in route:
                browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#graph-min-bad g.gnode"), "the graphs")
            for key, text in _texts(browser):
                assert text == ZH[key].replace("`", ""), key
            body = browser.find("main").text + browser.text("token-state")
            assert re.search(r"[\u4e00-\u9fff]", body)
            for name in task_names:  # the task names the CLI and the api take, never translated
                body = body.replace(name, "")
            assert not [e for e in english if e in body], route
        assert browser.text("job-summary") == plain(ZH["summary.single"], name="onnx_graphsurgeon_node_5", op="Mul")
        Select(browser.find("lang")).select_by_value("en")
        browser.wait(lambda d: browser.text("job-summary").startswith("The failure needs"), "English again")
        assert browser.js("return document.documentElement.lang") == "en"
    finally:
        browser.set_language("en-US,en")
        browser.js("localStorage.removeItem('onnx-reducer.lang')")


def test_the_api_docs_render_without_a_network(service: Service, browser: Browser) -> None:
    """The browser resolves no host but 127.0.0.1; Swagger UI and ReDoc still render, and every
    URL they asked for is the service's own."""
    browser.requested_urls()  # forget what came before
    browser.driver.get(service.url + "/docs")
    browser.wait(
        lambda d: (
            "onnx-reducer" in "".join(e.text for e in d.find_elements(By.CSS_SELECTOR, ".swagger-ui .info .title"))
        ),
        "Swagger UI",
    )
    browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, ".swagger-ui .opblock"), "the operations")
    browser.driver.get(service.url + "/redoc")
    browser.wait(lambda d: "onnx-reducer" in "".join(e.text for e in d.find_elements(By.CSS_SELECTOR, "h1")), "ReDoc")
    fetched, blocked = browser.requested_urls()
    outside = [u for u in fetched if not u.startswith((service.url, "data:", "blob:"))]
    assert fetched and not outside, outside
    assert all(not u.startswith(service.url) for u in blocked), blocked  # ReDoc's CDN logo: stopped by CSP


def test_no_sideways_scroll_at_420_px_and_every_control_is_labelled(service: Service, browser: Browser) -> None:
    unlabelled = """return [...document.querySelectorAll('input, select, textarea, button')]
        .filter((e) => e.getClientRects().length || e.type === 'file')
        .filter((e) => !(e.labels && e.labels.length) && !e.getAttribute('aria-label')
                       && !e.getAttribute('aria-labelledby') && !(e.textContent || '').trim())
        .map((e) => e.id || e.outerHTML.slice(0, 80))"""
    with browser.narrow():
        job_id = finished_job(service)
        browser.open(service.url + "/#/jobs")
        browser.sign_in(service.token)
        browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#jobs-body tr"), "the jobs")
        assert browser.js(OVERFLOW_JS) == []
        assert browser.js(unlabelled) == []
        browser.driver.get(service.url + "/#/new")
        for kind in ("compare", "error", "command", "op-present"):
            Select(browser.find("check-kind")).select_by_value(kind)
            assert browser.js(OVERFLOW_JS) == [], kind
            assert browser.js(unlabelled) == [], kind
        browser.driver.get(f"{service.url}/#/jobs/{job_id}")
        browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#graph-min-bad g.gnode"), "the graphs")
        assert browser.js(OVERFLOW_JS) == []
        assert browser.js(unlabelled) == []


def _ladder(rungs: int) -> onnx.ModelProto:
    """x -> [Relu, Neg] -> Add -> [Relu, Neg] -> Add ... : 3 nodes per rung, two branches each."""
    nodes, current = [], "x"
    for i in range(rungs):
        nodes += [
            onnx.helper.make_node("Relu", [current], [f"r{i}"], name=f"relu{i}"),
            onnx.helper.make_node("Neg", [current], [f"n{i}"], name=f"neg{i}"),
            onnx.helper.make_node("Add", [f"r{i}", f"n{i}"], [f"a{i}"], name=f"add{i}"),
        ]
        current = f"a{i}"
    value = onnx.helper.make_tensor_value_info
    graph = onnx.helper.make_graph(
        nodes, "ladder", [value("x", onnx.TensorProto.FLOAT, [4])], [value(current, onnx.TensorProto.FLOAT, [4])]
    )
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])


def test_a_graph_of_hundreds_of_nodes_is_drawn_and_pans_and_zooms(service: Service, browser: Browser) -> None:
    """The page's own drawing code on a 300-node graph JSON (as the graph route builds it): every
    node laid out, no two boxes overlapping, only what is in view in the DOM, the highlighted one
    marked; then real mouse drags, the wheel and keys move and scale the view."""
    graph = describe_graph(_ladder(100), 1000).model_dump()
    browser.open(service.url + "/#/jobs")
    result = browser.driver.execute_async_script(
        r"""
        const [graph, done] = arguments;
        import('/ui/js/graph.js').then((m) => {
          const box = document.createElement('div');
          box.className = 'graph-view';
          box.id = 'big-graph';
          box.tabIndex = 0;
          document.getElementById('main').prepend(box);
          const control = m.drawGraph(box, graph, new Set(['add50']));
          const rects = control.layout.items;
          let overlaps = 0;
          for (let i = 0; i < rects.length; i += 1) {
            for (let j = i + 1; j < rects.length; j += 1) {
              const a = rects[i], b = rects[j];
              if (a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h) overlaps += 1;
            }
          }
          const drawn = box.querySelectorAll('g.gnode').length;
          const add = rects.find((i) => i.id === 'add50');
          const [x, y, w, h] = box.querySelector('svg').getAttribute('viewBox').split(' ').map(Number);
          control.pan(add.x + add.w / 2 - (x + w / 2), add.y + add.h / 2 - (y + h / 2));
          control.flush();
          const diff = [...box.querySelectorAll('g.gnode.diff')].map((g) => g.dataset.id);
          control.fit();
          control.flush();
          done({ nodes: control.stats().nodes, items: rects.length, drawn, overlaps, diff });
        });
        """,
        graph,
    )
    assert result["nodes"] == 300 and result["items"] == 302 and result["overlaps"] == 0, result
    assert 0 < result["drawn"] <= 302, result
    assert result["diff"] == ["add50"]

    def view() -> list[float]:
        return [
            float(v)
            for v in browser.js("return document.querySelector('#big-graph svg').getAttribute('viewBox')").split()
        ]

    fitted = view()
    svg_element = browser.driver.find_element(By.CSS_SELECTOR, "#big-graph svg")
    ActionChains(browser.driver).scroll_from_origin(ScrollOrigin.from_element(svg_element), 0, -300).perform()
    zoomed = view()
    assert zoomed[2] < fitted[2] and zoomed[3] < fitted[3]  # the wheel zoomed in
    ActionChains(browser.driver).move_to_element(svg_element).click_and_hold().move_by_offset(
        -80, -60
    ).release().perform()
    dragged = view()
    assert dragged[0] > zoomed[0] and dragged[1] > zoomed[1] and dragged[2] == zoomed[2]  # panned, same scale
    box = browser.find("big-graph")
    box.send_keys(Keys.ARROW_LEFT)
    assert view()[0] < dragged[0]
    box.send_keys("0")
    assert view() == fitted
    browser.js("document.getElementById('big-graph').remove()")


def test_the_page_is_served_without_a_token(service: Service) -> None:
    index = httpx.get(service.url + "/")
    assert index.status_code == 200 and index.headers["content-type"].startswith("text/html")
    assert "/ui/js/app.js" in index.text and "Content-Security-Policy" in index.text
    for asset, kind in (("js/app.js", "javascript"), ("app.css", "text/css"), ("i18n/zh-CN.json", "json")):
        response = httpx.get(f"{service.url}/ui/{asset}")
        assert response.status_code == 200 and kind in response.headers["content-type"], asset
    assert httpx.get(service.url + "/ui/missing.js").headers["content-type"] == "application/problem+json"


def test_the_golden_values_file_is_uploaded_with_the_job(service: Service, browser: Browser, tmp_path: Path) -> None:
    """The optional "Golden values" input sends the file as the job's `golden` field."""
    onnx.save(build_example_model(), tmp_path / "example.onnx")
    command = [sys.executable, "-m", "reducer_cli.main", "golden", "example.onnx", "-o", "example.golden"]
    subprocess.run(command, cwd=tmp_path, check=True, capture_output=True, timeout=120)
    browser.open(service.url + "/#/new")
    browser.sign_in(service.token)
    browser.find("golden").send_keys(str(tmp_path / "example.golden"))
    browser.drop_file("drop-zone", "model.onnx", EXAMPLE)
    browser.find("submit-job").click()
    job_id = _job_id(browser)
    with client_for(service.url, service.token) as client:
        golden = client.get(f"/v1/jobs/{job_id}/artifacts/golden")
    assert golden.status_code == 200, golden.text
    assert golden.content == (tmp_path / "example.golden").read_bytes()


def test_a_precision_job_from_the_form_shows_the_nodes_to_keep_in_fp32(service: Service, browser: Browser) -> None:
    """The "Task" select sends `task: precision`; the job page names the nodes that must stay fp32 and
    offers the mixed-precision model instead of min-bad / min-good."""
    browser.console()  # drained: what earlier pages logged (the offline /redoc's blocked CDN logo) is theirs
    browser.open(service.url + "/#/new")
    browser.sign_in(service.token)
    browser.drop_file("drop-zone", "overflow.onnx", one_node_overflows().SerializeToString())
    Select(browser.find("task")).select_by_value("precision")
    _use_yaml(browser, COMPARE_FP16.strip())
    browser.find("submit-job").click()
    job_id = _job_id(browser)
    _wait_status(browser, "succeeded")
    browser.wait(lambda d: browser.text("job-keep-fp32") == "scale_up", "the nodes kept in fp32")
    assert browser.find("download-mixed").is_displayed()
    assert not browser.find("download-min-bad").is_displayed()
    assert not browser.find("download-bundle").is_displayed()
    with client_for(service.url, service.token) as client:
        job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["task"] == "precision" and job["keep_fp32"] == ["scale_up"]
    assert not severe(browser)


def test_a_finished_job_opened_later_shows_its_iterations(service: Service, browser: Browser) -> None:
    """A job page opened after the job ended reads its event stream once: the iteration table and
    the chart are filled (the stream replays every event, then closes)."""
    job_id = finished_job(service)
    with client_for(service.url, service.token) as client:
        listed = client.get(f"/v1/jobs/{job_id}/iterations").json()["items"]
    browser.open(f"{service.url}/#/jobs/{job_id}")
    browser.sign_in(service.token)
    _wait_status(browser, "succeeded")
    rows = "#iterations-body tr[data-number]"
    browser.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, rows)) == len(listed), "every iteration listed")
    assert listed


def test_input_samples_are_uploaded_in_order_and_the_page_names_the_failing_one(
    service: Service, browser: Browser, tmp_path: Path
) -> None:
    """The optional "Input samples" input sends each chosen file as an `inputs` part, in order; the
    job's page says how many samples were judged and which ones fail (issue 22)."""
    paths = []
    for i, value in enumerate((0.5, 100.0, 0.5)):
        np.savez(tmp_path / f"s{i}.npz", x=np.full((1, 8), value, np.float32))
        paths.append(str(tmp_path / f"s{i}.npz"))
    browser.open(service.url + "/#/new")
    browser.sign_in(service.token)
    browser.js("document.getElementById('golden').value = ''")  # an earlier test's choice: not this job's
    Select(browser.find("task")).select_by_value("reduce")  # the precision test before left "precision" chosen
    browser.find("inputs").send_keys("\n".join(paths))
    browser.wait(lambda d: "s2.npz" in browser.text("inputs-chosen"), "the chosen files")
    browser.drop_file("drop-zone", "chain.onnx", input_overflow_chain().SerializeToString())
    _use_yaml(browser, "kind: compare\ntarget: {precision: fp16}\ntolerance: {atol: 0.01, rtol: 0.01}")
    browser.find("submit-job").click()
    job_id = _job_id(browser)
    _wait_status(browser, "succeeded")
    expected = "original: samples 1 of 3 fail · best model: samples 1 of 3 fail"
    browser.wait(lambda d: browser.text("job-samples") == expected, "the failing samples")
    with client_for(service.url, service.token) as client:
        second = client.get(f"/v1/jobs/{job_id}/artifacts/inputs-1")
    assert second.content == Path(paths[1]).read_bytes()
    assert not severe(browser)
