"""The graph drawings (api/static/js/graph.js, graphlayout.js) in a real headless Chromium against
the embedded service: a 39-node chain stays readable at Fit (folded into columns, labels of a
legible size); a 1,018-node transformer's original graph shows a finished job's min-bad inside it
(its nodes highlighted, the path from the input marked, the rest dimmed, layers grouped and
collapsed); search finds a node in a collapsed group; groups open and close by a click; the
labels and the search speak Chinese. The drawing time is printed (bench/README.md records it),
never asserted: this machine is shared."""

from __future__ import annotations

from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from api.graph_view import describe_graph
from tests.service.conftest import client_for
from tests.service.graph_models import add_chain, transformer_model
from tests.service.helpers import OP_PRESENT_SOFTMAX, submit, wait_job
from tests.service.web_harness import PROBE_BOX_JS, Browser, Service, catalogue, plain

EN = catalogue("en")
ZH = catalogue("zh-CN")
TRANSFORMER = transformer_model(24)


@pytest.fixture(scope="module")
def transformer_job(service: Service) -> dict[str, Any]:
    """A finished job on the transformer whose check fails while a Softmax is in the graph: its
    min-bad is one Softmax, somewhere in the 24 layers."""
    with client_for(service.url, service.token) as client:
        answer = submit(client, TRANSFORMER.SerializeToString(), OP_PRESENT_SOFTMAX, filename="encoder.onnx")
        answer.raise_for_status()
        job: dict[str, Any] = wait_job(client, answer.json()["id"], timeout=600)
        assert job["status"] == "succeeded", job
        bad = client.get(f"/v1/jobs/{job['id']}/artifacts/min-bad/graph").json()
    return {"id": job["id"], "min_bad": [n["id"] for n in bad["nodes"]]}


def _draw(browser: Browser, graph: dict[str, Any], width: int, height: int, focus: list[str] | None = None) -> Any:
    """The page's own drawing code on ``graph`` in a box of the given size; the control's stats."""
    return browser.driver.execute_async_script(
        PROBE_BOX_JS
        + r"""
        const [graph, width, height, focus, done] = arguments;
        import('/ui/js/graph.js').then((m) => {
          const box = probeBox(width, height);
          const control = m.drawGraph(box, graph, new Set(), { focus: focus ? new Set(focus) : undefined });
          box.graphControl = control;
          done(control.stats());
        });
        """,
        graph,
        width,
        height,
        focus,
    )


def _label_px(browser: Browser, view_id: str) -> list[float]:
    """The rendered size (CSS px on screen) of every node's first label in the drawing."""
    return list(
        browser.js(
            """const svg = document.querySelector(`#${arguments[0]} svg`);
            const scale = svg.getScreenCTM().a;
            return [...svg.querySelectorAll('g.gnode text.l1')].map(
              (t) => parseFloat(getComputedStyle(t).fontSize) * scale);""",
            view_id,
        )
    )


def test_a_39_node_chain_is_readable_at_fit(service: Service, browser: Browser) -> None:
    """The issue's case: a 39-node chain in a half-width panel, once a one-pixel column at Fit.
    Now folded into columns: every node drawn, labels at least 8.5 px on screen, no overlaps, and
    the drawing about as wide as the panel rather than a thin column."""
    browser.open(service.url + "/#/jobs")
    graph = describe_graph(add_chain(39), 1000).model_dump()
    stats = _draw(browser, graph, 600, 416)
    assert stats["nodes"] == 39 and stats["drawn"] == 41, stats  # and the input and the output
    sizes = _label_px(browser, "probe-graph")
    assert len(sizes) == 41 and min(sizes) >= 8.5, sizes
    assert stats["width"] / stats["height"] > 0.8, stats  # across the width, not a column
    boxes = browser.js(
        """return [...document.querySelectorAll('#probe-graph g.gnode')].map((g) => {
          const r = g.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; });"""
    )
    view = browser.js(
        """const r = document.getElementById('probe-graph').getBoundingClientRect();
        return [r.left, r.top, r.right, r.bottom];"""
    )
    inside = [
        b for b in boxes if b[0] >= view[0] - 1 and b[2] <= view[2] + 1 and b[1] >= view[1] - 1 and b[3] <= view[3] + 1
    ]
    assert len(inside) == 41, (view, [b for b in boxes if b not in inside], stats)  # the whole chain in view at Fit
    overlaps = sum(
        1
        for i, a in enumerate(boxes)
        for b in boxes[i + 1 :]
        if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
    )
    assert overlaps == 0
    print(f"39-node chain: drawn in {stats['ms']:.0f} ms, {stats['width']:.0f} x {stats['height']:.0f}")
    browser.js("document.getElementById('probe-graph').remove()")


def test_a_transformer_shows_its_min_bad_inside_the_original(
    service: Service, browser: Browser, transformer_job: dict[str, Any]
) -> None:
    """The job page draws the 1,018-node original with the min-bad inside it: its node (and only
    it) highlighted, layers as collapsed groups but the one holding the min-bad open, the path from
    the input marked, the rest dimmed."""
    min_bad = transformer_job["min_bad"]
    assert len(min_bad) == 1 and "/attention/self/Softmax" in min_bad[0]
    layer = min_bad[0].split("/")[3]  # /m/encoder/layer.N/...
    browser.open(f"{service.url}/#/jobs/{transformer_job['id']}")
    browser.sign_in(service.token)
    browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#graph-original g.gnode.focus"), "the original graph")
    stats = browser.js("return document.getElementById('graph-original').graphControl.stats()")
    focused = browser.js(
        "return [...document.querySelectorAll('#graph-original g.gnode.node.focus')].map((g) => g.dataset.id)"
    )
    assert focused == min_bad
    groups = browser.js(
        "return [...document.querySelectorAll('#graph-original g.gnode.group')].map((g) => g.dataset.id)"
    )
    open_frames = browser.js(
        "return [...document.querySelectorAll('#graph-original g.gframe')].map((g) => g.dataset.id)"
    )
    assert f"grp:m/encoder/{layer}" in open_frames and f"grp:m/encoder/{layer}" not in groups
    assert sum(1 for g in groups if g.startswith("grp:m/encoder/layer.")) >= 20  # the other layers, closed
    assert stats["nodes"] < 200 and stats["items"] < 260, stats  # not 1,018 boxes at once
    # the path from the input: the layers before the min-bad's are on it, those after it dimmed
    index = int(layer.split(".")[1])
    classes = browser.js(
        """return Object.fromEntries([...document.querySelectorAll('#graph-original g.gnode.group')]
          .map((g) => [g.dataset.id, g.getAttribute('class')]))"""
    )
    if index > 0:
        assert "path" in classes.get(f"grp:m/encoder/layer.{index - 1}", "path")
    if index < 23:
        assert "dim" in classes.get(f"grp:m/encoder/layer.{index + 1}", "dim")
    sizes = _label_px(browser, "graph-original")
    assert sizes and min(sizes) >= 8.5
    assert browser.text("caption-original") == plain(EN["graphs.count"], n=1018)
    print(f"transformer (1,018 nodes) drawn in {stats['ms']:.0f} ms with {stats['items']} boxes")


def test_search_opens_the_group_of_what_it_finds_and_groups_fold(
    service: Service, browser: Browser, transformer_job: dict[str, Any]
) -> None:
    browser.open(f"{service.url}/#/jobs/{transformer_job['id']}")
    browser.sign_in(service.token)
    browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#graph-original g.gnode.focus"), "the original graph")
    field = browser.find("search-original")
    field.send_keys("erf")
    state = "#panel-original [data-search-state]"
    browser.wait(
        lambda d: d.find_element(By.CSS_SELECTOR, state).text == plain(EN["graphs.search.count"], n=24), "24 matches"
    )
    # the count is written at once, the marks on the next drawn frame: draw it, then read them
    browser.js("document.getElementById('graph-original').graphControl.flush()")
    marked = "return document.querySelectorAll('#graph-original g.gnode.group.match').length"
    browser.wait(lambda d: browser.js(marked) >= 20, "the closed layers that hold an Erf say so")
    field.send_keys(Keys.ENTER)
    browser.wait(
        lambda d: d.find_element(By.CSS_SELECTOR, state).text == plain(EN["graphs.search.at"], k=1, n=24), "1 of 24"
    )
    control = "document.getElementById('graph-original').graphControl"
    browser.js(f"{control}.flush()")
    current = browser.js(
        "return [...document.querySelectorAll('#graph-original g.gnode.current')].map((g) => g.dataset.op)"
    )
    assert current == ["Erf"]
    # click a closed layer: it opens (its nodes drawn in a frame); click the frame's head: closed
    target = "grp:m/encoder/layer.20"
    before = browser.js(f"return {control}.stats().items")
    browser.js(f"{control}.fit(); {control}.flush()")
    # bring the group into view, then click it as a user would
    browser.js(
        f"""const c = {control}; const item = c.layout.items.find((i) => i.id === arguments[0]);
        const svg = document.querySelector('#graph-original svg');
        const [x, y, w, h] = svg.getAttribute('viewBox').split(' ').map(Number);
        c.pan(item.x + item.w / 2 - (x + w / 2), item.y + item.h / 2 - (y + h / 2)); c.flush();""",
        target,
    )
    browser.driver.find_element(By.CSS_SELECTOR, f'#graph-original g.gnode.group[data-id="{target}"]').click()
    browser.wait(
        lambda d: d.find_elements(By.CSS_SELECTOR, f'#graph-original g.gframe[data-id="{target}"]'), "the layer open"
    )
    browser.js(f"{control}.flush()")
    opened = browser.js(f"return {control}.stats().items")
    assert opened > before
    browser.driver.find_element(By.CSS_SELECTOR, f'#graph-original g.gframe[data-id="{target}"] .gframe-head').click()
    browser.wait(
        lambda d: d.find_elements(By.CSS_SELECTOR, f'#graph-original g.gnode.group[data-id="{target}"]'),
        "the layer closed",
    )
    assert browser.js(f"return {control}.stats().items") < opened


def test_the_graph_tools_speak_chinese(service: Service, browser: Browser, transformer_job: dict[str, Any]) -> None:
    browser.set_language("zh-CN,zh")
    try:
        browser.open(f"{service.url}/#/jobs/{transformer_job['id']}")
        browser.js("localStorage.removeItem('onnx-reducer.lang')")
        browser.reload()  # a new document: the browser's languages and a fresh drawing
        browser.sign_in(service.token)
        browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#graph-original g.gnode.focus"), "the original graph")
        assert browser.js("return document.documentElement.lang") == "zh-CN"
        heading = browser.driver.find_element(By.CSS_SELECTOR, "#panel-original figcaption strong").text
        assert heading == ZH["graphs.original"]
        assert browser.driver.find_element(By.CSS_SELECTOR, 'label[for="search-original"]').text == ZH["graphs.search"]
        group_label = browser.js("return document.querySelector('#graph-original g.gnode.group text.l2').textContent")
        assert "个节点" in group_label
        browser.find("search-original").send_keys("Softmax")
        state = "#panel-original [data-search-state]"
        browser.wait(
            lambda d: d.find_element(By.CSS_SELECTOR, state).text == plain(ZH["graphs.search.count"], n=24), "匹配"
        )
    finally:
        browser.set_language("en-US,en")
        browser.js("localStorage.removeItem('onnx-reducer.lang')")
