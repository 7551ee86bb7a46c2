"""The error overlay of the job page's graphs (issue 20, item 13), in a real headless Chromium
against the embedded service: a finished compare job (an fp16 overflow planted in a 40-node chain)
offers an "Error overlay" switch; on, every measured node is filled on the colour scale by its
error from the localisation step, the overflowing node (and what follows it) in the non-finite
colour, with a legend; hovering a node shows its value; off, the plain drawing comes back. A job
whose check measures no errors (op-present) offers no switch. The switch, legend and values speak
Chinese."""

from __future__ import annotations

import re
from itertools import pairwise
from typing import Any

import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By

from api.graph_view import describe_graph
from tests.checks.conftest import COMPARE_FP16
from tests.checks.models import chain_model
from tests.service.conftest import client_for
from tests.service.graph_models import add_chain, transformer_model
from tests.service.helpers import wait_job
from tests.service.web_harness import PROBE_BOX_JS, Browser, Service, catalogue, plain, severe

EN = catalogue("en")
ZH = catalogue("zh-CN")
FAULT_AT = 23
NONFINITE_FILL = "rgb(74, 20, 140)"  # overlay.js NONFINITE_COLOUR
PLAIN_FILL = "rgb(238, 243, 251)"  # app.css .gnode rect
ORIGINAL = "#graph-original"


@pytest.fixture(scope="module")
def jobs(service: Service) -> dict[str, Any]:
    """A finished compare job on the chain with its node errors, and a finished op-present job."""
    model = chain_model(40, fault_at=FAULT_AT).SerializeToString()
    ids = {}
    with client_for(service.url, service.token) as client:
        for name, spec in (("compare", COMPARE_FP16), ("op-present", "kind: op-present\nops: [Mul]")):
            answer = client.post("/v1/jobs", files={"model": ("chain.onnx", model)}, data={"check_spec": spec})
            answer.raise_for_status()
            ids[name] = answer.json()["id"]
        for job_id in ids.values():
            assert wait_job(client, job_id, timeout=600)["status"] == "succeeded"
        errors = client.get(f"/v1/jobs/{ids['compare']}/node-errors")
        assert errors.status_code == 200, errors.text
    return ids | {"errors": errors.json()}


def _open(service: Service, browser: Browser, job_id: str) -> None:
    browser.open(f"{service.url}/#/jobs/{job_id}")
    browser.sign_in(service.token)
    browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, f"{ORIGINAL} g.gnode.node"), "the original graph")


def _fills(browser: Browser) -> dict[str, dict[str, Any]]:
    """Every drawn node of the original graph: its computed fill, overlay value, and whether it is
    one of the min-bad's (drawn in the min-bad's colours without the overlay)."""
    browser.js("document.getElementById('graph-original').graphControl.flush()")
    return dict(
        browser.js(
            """return [...document.querySelectorAll('#graph-original g.gnode.node')].map((g) => [g.dataset.id,
              {fill: getComputedStyle(g.querySelector('rect')).fill, error: g.dataset.error || null,
               focus: g.classList.contains('focus')}]);"""
        )
    )


def _luminance(rgb: str) -> float:
    r, g, b = (int(v) for v in re.findall(r"\d+", rgb)[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _hover(browser: Browser, node_id: str) -> str:
    node = browser.driver.find_element(By.CSS_SELECTOR, f'{ORIGINAL} g.gnode[data-id="{node_id}"]')
    browser.js("arguments[0].scrollIntoView({block: 'center'})", browser.find("graph-original"))
    ActionChains(browser.driver).move_to_element(node).perform()
    box = f"{ORIGINAL} .graph-hover"
    browser.wait(
        lambda d: (
            d.find_element(By.CSS_SELECTOR, box).is_displayed()
            and d.find_element(By.CSS_SELECTOR, box).get_attribute("data-id") == node_id
        ),
        f"the hover box of {node_id}",
    )
    return str(browser.driver.find_element(By.CSS_SELECTOR, box).text)


def test_the_overlay_colours_nodes_by_their_error_and_hover_shows_the_value(
    service: Service, browser: Browser, jobs: dict[str, Any]
) -> None:
    _open(service, browser, jobs["compare"])
    browser.wait(lambda d: browser.find("error-overlay").is_displayed(), "the overlay switch")
    assert browser.find("error-overlay-on").get_attribute("checked") is None  # off until asked for
    plain_fills = _fills(browser)
    assert plain_fills[f"n{FAULT_AT}_overflow"]["focus"]  # the min-bad, inside the original
    assert {v["fill"] for v in plain_fills.values() if not v["focus"]} == {PLAIN_FILL}
    assert all(v["error"] is None for v in plain_fills.values())

    browser.find("error-overlay-on").click()
    browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, f"{ORIGINAL} g.gnode.err"), "coloured nodes")
    fills = _fills(browser)
    by_tensor = {e["tensor"]: e for e in jobs["errors"]["tensors"]}
    assert fills[f"n{FAULT_AT}_overflow"] == {"fill": NONFINITE_FILL, "error": "nonfinite", "focus": True}
    assert all(fills[f"n{i}_{op}"]["fill"] == NONFINITE_FILL for i, op in ((24, "restore"), (25, "relu")))
    # before the culprit: finite values from the API, lighter colours for smaller errors
    before = [f"n{i}_{'add' if i % 2 == 0 else 'relu'}" for i in range(0, FAULT_AT - 1)] + [f"n{FAULT_AT - 1}_scale"]
    values = [float(fills[n]["error"]) for n in before]
    assert values == [by_tensor[f"t{i}"]["max_abs"] for i in range(FAULT_AT)]
    shades = [_luminance(str(fills[n]["fill"])) for n in before]
    beyond = [by_tensor[f"t{i}"]["beyond"] for i in range(FAULT_AT)]
    for side in (False, True):  # within the tolerance (greys) and beyond it (warm): each its own scale
        assert all(a >= b for a, b in pairwise(s for s, k in zip(shades, beyond, strict=True) if k == side)), shades
    assert shades[0] > shades[-1] + 100  # the smallest error light, the largest dark
    assert all(fills[n]["fill"] != PLAIN_FILL for n in before)
    legend = browser.text("error-legend")
    assert EN["graphs.overlay.nonfinite"] in legend and EN["graphs.overlay.metric.max_abs"] in legend
    assert f"{max(values):.4g}" in legend  # the scale's top: the largest finite error

    text = _hover(browser, f"n{FAULT_AT}_overflow")
    assert f"n{FAULT_AT}_overflow" in text and EN["graphs.overlay.nonfinite"] in text
    assert EN["graphs.overlay.beyond"] in text
    scale = by_tensor[f"t{FAULT_AT - 1}"]
    text = _hover(browser, f"n{FAULT_AT - 1}_scale")
    assert f"t{FAULT_AT - 1}: " in text and f"{scale['max_abs']:.4g}" in text and f"{scale['max_rel']:.4g}" in text
    title = browser.js(
        f"return document.querySelector('{ORIGINAL} g.gnode[data-id=\"n{FAULT_AT - 1}_scale\"] title').textContent"
    )
    assert f"{scale['max_abs']:.4g}" in title  # the native tooltip says it too

    # by relative error: the values follow the metric
    browser.driver.find_element(By.CSS_SELECTOR, '#error-metric option[value="max_rel"]').click()
    browser.wait(
        lambda d: _fills(browser)["n0_add"]["error"] == str(by_tensor["t0"]["max_rel"]), "colours by relative error"
    )
    browser.driver.find_element(By.CSS_SELECTOR, '#error-metric option[value="max_abs"]').click()

    browser.find("error-overlay-on").click()  # off: the plain drawing again
    browser.wait(lambda d: not d.find_elements(By.CSS_SELECTOR, f"{ORIGINAL} g.gnode.err"), "plain nodes")
    assert _fills(browser) == plain_fills
    assert not severe(browser)


def test_a_check_that_measures_no_errors_offers_no_overlay(
    service: Service, browser: Browser, jobs: dict[str, Any]
) -> None:
    _open(service, browser, jobs["op-present"])
    # opening the job hid the graphs (the page may still hold the last job's): shown once drawn
    browser.wait(lambda d: browser.find("graphs").is_displayed(), "this job's graphs")
    assert browser.driver.find_elements(By.CSS_SELECTOR, "#graph-min-bad g.gnode")
    assert not browser.find("error-overlay").is_displayed()
    assert not browser.js("return document.querySelectorAll('g.gnode.err').length")


def test_the_overlay_speaks_chinese(service: Service, browser: Browser, jobs: dict[str, Any]) -> None:
    browser.set_language("zh-CN,zh")
    try:
        browser.open(f"{service.url}/#/jobs/{jobs['compare']}")
        browser.js("localStorage.removeItem('onnx-reducer.lang')")
        browser.reload()
        browser.sign_in(service.token)
        browser.wait(lambda d: browser.find("error-overlay").is_displayed(), "the overlay switch")
        assert browser.js("return document.documentElement.lang") == "zh-CN"
        label = browser.driver.find_element(By.CSS_SELECTOR, "#error-overlay .inline-check").text
        assert label == ZH["graphs.overlay"]
        if browser.find("error-overlay-on").get_attribute("checked") is None:
            browser.find("error-overlay-on").click()
        browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, f"{ORIGINAL} g.gnode.err"), "coloured nodes")
        assert ZH["graphs.overlay.nonfinite"] in browser.text("error-legend")
        assert ZH["graphs.overlay.metric.max_abs"] in browser.text("error-legend")
        assert plain(ZH["graphs.overlay.tolerance.atol"], value="0.001") in browser.text("error-legend")
        assert ZH["graphs.overlay.scale"] in browser.text("error-legend")
        text = _hover(browser, f"n{FAULT_AT}_overflow")
        assert ZH["graphs.overlay.nonfinite"] in text and ZH["graphs.overlay.beyond"] in text
        scale = next(e for e in jobs["errors"]["tensors"] if e["tensor"] == f"t{FAULT_AT - 1}")
        words = plain(ZH["graphs.overlay.value"], abs=f"{scale['max_abs']:.4g}", rel=f"{scale['max_rel']:.4g}")
        assert words in _hover(browser, f"n{FAULT_AT - 1}_scale")
    finally:
        browser.set_language("en-US,en")
        browser.js("localStorage.removeItem('onnx-reducer.lang')")
        browser.reload()  # English again for the tests after this one (a new document)
        assert browser.js("return document.documentElement.lang") == "en"


def _softmax_entry(
    node: dict[str, Any], max_abs: float | None, max_rel: float | None, *, nonfinite: bool, beyond: bool
) -> dict[str, Any]:
    """The overlay document's entry for a Softmax node's output."""
    return {
        "tensor": node["outputs"][0],
        "node": node["id"],
        "op": "Softmax",
        "max_abs": max_abs,
        "max_rel": max_rel,
        "nonfinite": nonfinite,
        "beyond": beyond,
    }


def test_a_closed_name_scope_takes_the_colour_of_its_worst_node(
    service: Service, browser: Browser, jobs: dict[str, Any]
) -> None:
    """On a 1,018-node transformer drawn by the page's own code with its layers closed, a layer
    holding a non-finite tensor is filled in the non-finite colour and says which node it is;
    a layer of small errors is filled on the scale; a layer without any measured node stays plain."""
    graph = describe_graph(transformer_model(24), 2000).model_dump()
    softmax = [n for n in graph["nodes"] if n["op"] == "Softmax"]
    layer = lambda node: node["id"].split("/")[3]  # noqa: E731 - /m/encoder/layer.N/...
    entries = [
        _softmax_entry(softmax[5], None, None, nonfinite=True, beyond=True),
        _softmax_entry(softmax[4], 0.002, 0.001, nonfinite=False, beyond=False),
        _softmax_entry(softmax[3], 0.5, 0.1, nonfinite=False, beyond=True),
    ]
    document = {"sample": 0, "total": 3, "truncated": False, "tensors": entries}
    browser.open(service.url + "/#/jobs")
    groups = browser.driver.execute_async_script(
        PROBE_BOX_JS
        + r"""
        const [graph, doc, done] = arguments;
        Promise.all([import('/ui/js/graph.js'), import('/ui/js/overlay.js')]).then(([g, o]) => {
          const box = probeBox();
          const control = g.drawGraph(box, graph, new Set(), { overlay: o.buildOverlay(graph, doc) });
          control.flush();
          done(Object.fromEntries([...box.querySelectorAll('g.gnode.group')].map((el) => [el.dataset.id,
            { fill: getComputedStyle(el.querySelector('rect')).fill, error: el.dataset.error || null,
              title: el.querySelector('title').textContent }])));
        });
        """,
        graph,
        document,
    )
    browser.js("document.getElementById('probe-graph').remove()")
    group = lambda node: groups[f"grp:m/encoder/{layer(node)}"]  # noqa: E731
    assert group(softmax[5])["fill"] == NONFINITE_FILL and group(softmax[5])["error"] == "nonfinite"
    assert (
        softmax[5]["id"] in group(softmax[5])["title"] and EN["graphs.overlay.nonfinite"] in group(softmax[5])["title"]
    )
    assert group(softmax[4])["error"] == "0.002" and group(softmax[3])["error"] == "0.5"
    assert _luminance(group(softmax[4])["fill"]) > _luminance(group(softmax[3])["fill"]) + 100
    assert group(softmax[10])["fill"] != group(softmax[4])["fill"] and group(softmax[10])["error"] is None


def _chroma(rgb: str) -> int:
    """How far from grey a colour is: its largest channel less its smallest."""
    r, g, b = (int(v) for v in re.findall(r"\d+", rgb)[:3])
    return max(r, g, b) - min(r, g, b)


def _warm(rgb: str) -> bool:
    r, _, b = (int(v) for v in re.findall(r"\d+", rgb)[:3])
    return _chroma(rgb) > 80 and r > b + 80


AT_TOLERANCE = [  # (max_abs, max_rel, beyond) around the spec's tolerance, atol = rtol = 0.001
    (1e-6, 1e-6, False),
    (4e-4, 2e-4, False),
    (0.001, 0.001, False),  # at the tolerance: still within
    (0.00101, 0.0011, True),  # just beyond
    (0.05, 0.02, True),
    (3.0, 1.5, True),
]


def _draw_with_overlay(browser: Browser, graph: dict[str, Any], doc: dict[str, Any], metric: str) -> dict[str, Any]:
    """The page's own drawing and overlay code on ``graph`` with ``doc``: per node its fill and
    value, and the legend's text."""
    result: dict[str, Any] = browser.driver.execute_async_script(
        PROBE_BOX_JS
        + r"""
        const [graph, doc, metric, done] = arguments;
        Promise.all([import('/ui/js/graph.js'), import('/ui/js/overlay.js')]).then(([g, o]) => {
          const box = probeBox();
          const overlay = o.buildOverlay(graph, doc, metric);
          const control = g.drawGraph(box, graph, new Set(), { overlay });
          control.flush();
          const legend = document.createElement('div');
          o.drawOverlayLegend(legend, overlay);
          box.append(legend);
          done({ nodes: Object.fromEntries([...box.querySelectorAll('g.gnode.node')].map((el) => [el.dataset.id,
            { fill: getComputedStyle(el.querySelector('rect')).fill, error: el.dataset.error || null }])),
            legend: legend.innerText });
        });
        """,
        graph,
        doc,
        metric,
    )
    browser.js("document.getElementById('probe-graph').remove()")
    return result


@pytest.mark.parametrize("metric", ["max_abs", "max_rel"])
def test_the_colour_scale_is_anchored_at_the_tolerance(service: Service, browser: Browser, metric: str) -> None:
    """Errors within the spec's tolerance (up to and at it) are in neutral greys, lighter for
    smaller ones; beyond it, from the first step past it, in the warm scale, darker for larger
    ones; the legend names the tolerance. (A min->max scale put 0.0004, within tolerance, in warm
    orange.)"""
    graph = describe_graph(add_chain(len(AT_TOLERANCE)), 1000).model_dump()
    nodes = graph["nodes"]
    entries = [
        {"tensor": node["outputs"][0], "node": node["id"], "op": "Add", "max_abs": a, "max_rel": r}
        | {"nonfinite": False, "beyond": beyond}
        for node, (a, r, beyond) in zip(nodes, AT_TOLERANCE, strict=True)
    ]
    doc = {"sample": 0, "total": len(entries), "truncated": False, "tensors": entries}
    doc["tolerance"] = {"atol": 0.001, "rtol": 0.001}
    browser.open(service.url + "/#/jobs")
    drawn = _draw_with_overlay(browser, graph, doc, metric)
    fills = [drawn["nodes"][node["id"]]["fill"] for node in nodes]
    within = [fill for fill, (_, _, beyond) in zip(fills, AT_TOLERANCE, strict=True) if not beyond]
    beyond = [fill for fill, (_, _, over) in zip(fills, AT_TOLERANCE, strict=True) if over]
    assert all(_chroma(fill) < 40 for fill in within), within  # greys, up to and at the tolerance
    assert all(_warm(fill) for fill in beyond), beyond  # warm from the first step past it
    assert [_luminance(f) for f in within] == sorted((_luminance(f) for f in within), reverse=True), within
    assert [_luminance(f) for f in beyond] == sorted((_luminance(f) for f in beyond), reverse=True), beyond
    assert _luminance(within[0]) > _luminance(within[-1]) + 40  # the scale spreads within the tolerance too
    key = "graphs.overlay.tolerance.rtol" if metric == "max_rel" else "graphs.overlay.tolerance.atol"
    assert plain(EN[key], value="0.001") in drawn["legend"]
    assert EN["graphs.overlay.scale"] in drawn["legend"]
    top = max(entry[metric] for entry in entries)
    assert f"{top:.4g}" in drawn["legend"]


def test_the_job_page_colours_within_and_beyond_by_the_jobs_tolerance(
    service: Service, browser: Browser, jobs: dict[str, Any]
) -> None:
    """The compare job's node errors carry its spec's tolerance; on its page every measured node
    within it is grey and every one beyond it warm (or the non-finite colour)."""
    assert jobs["errors"]["tolerance"] == {"atol": 0.001, "rtol": 0.001, "per_output": {}}
    _open(service, browser, jobs["compare"])
    browser.wait(lambda d: browser.find("error-overlay").is_displayed(), "the overlay switch")
    if browser.find("error-overlay-on").get_attribute("checked") is None:
        browser.find("error-overlay-on").click()
    browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, f"{ORIGINAL} g.gnode.err"), "coloured nodes")
    fills = _fills(browser)
    by_node = {e["node"]: e for e in jobs["errors"]["tensors"]}
    measured = {node: fills[node]["fill"] for node in by_node if node in fills}
    assert measured
    for node, fill in measured.items():
        entry = by_node[node]
        if entry["nonfinite"]:
            assert fill == NONFINITE_FILL
        elif entry["beyond"]:
            assert _warm(fill), (node, entry, fill)
        else:
            assert _chroma(fill) < 40, (node, entry, fill)
    assert plain(EN["graphs.overlay.tolerance.atol"], value="0.001") in browser.text("error-legend")
    browser.find("error-overlay-on").click()
    browser.wait(lambda d: not d.find_elements(By.CSS_SELECTOR, f"{ORIGINAL} g.gnode.err"), "plain nodes")
