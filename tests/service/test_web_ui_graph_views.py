"""The graph drawings as a new user tries them (issue 29), in a real headless Chromium against the
embedded service: "Fit" on a 2,000-node original shows the whole graph (every top-level group
inside the view; it used to leave the view where it was) and the minimap stays; inside an opened
group data flows top to bottom (an attention group used to read upwards: its groups were folded
into side-by-side columns)."""

from __future__ import annotations

from typing import Any

import pytest
from selenium.webdriver.common.by import By

from api.graph_view import describe_graph
from tests.service.conftest import client_for
from tests.service.graph_models import transformer_model
from tests.service.helpers import OP_PRESENT_SOFTMAX, submit, wait_job
from tests.service.web_harness import PROBE_BOX_JS, Browser, Service

ORIGINAL = "#graph-original"


@pytest.fixture(scope="module")
def big_job(service: Service) -> str:
    """A finished job on a 48-layer encoder (2,018 nodes) whose check fails while a Softmax is in it."""
    model = transformer_model(48)
    assert len(model.graph.node) >= 2000
    with client_for(service.url, service.token) as client:
        answer = submit(client, model.SerializeToString(), OP_PRESENT_SOFTMAX, filename="encoder48.onnx")
        answer.raise_for_status()
        job: dict[str, Any] = wait_job(client, answer.json()["id"], timeout=900)
    assert job["status"] == "succeeded", job
    return str(job["id"])


def _top_level(browser: Browser) -> dict[str, Any]:
    """The original graph's view box on screen, and each top-level member's (its groups, open or
    closed, and the inputs and outputs): None for one not in the DOM (out of view)."""
    result: dict[str, Any] = browser.js(
        """const box = document.getElementById('graph-original');
        const control = box.graphControl;
        control.flush();
        const rect = (el) => { if (!el) return null; const r = el.getBoundingClientRect();
          return [r.left, r.top, r.right, r.bottom]; };
        const layout = control.layout;
        const ids = [...layout.tree.root.groups.values()].map((g) => g.id)
          .concat(layout.items.filter((i) => i.kind === 'input' || i.kind === 'output').map((i) => i.id));
        const members = Object.fromEntries(ids.map((id) => [id,
          rect(box.querySelector(`g.gframe[data-id="${CSS.escape(id)}"] > rect`)
            || box.querySelector(`g.gnode[data-id="${CSS.escape(id)}"] > rect`))]));
        const minimap = box.querySelector('.graph-minimap');
        return { view: rect(box), members, minimap: !minimap.hidden && minimap.getBoundingClientRect().width > 0,
                 viewBox: box.querySelector('svg').getAttribute('viewBox') };"""
    )
    return result


def _inside(inner: list[float] | None, outer: list[float]) -> bool:
    return inner is not None and (
        inner[0] >= outer[0] - 1 and inner[1] >= outer[1] - 1 and inner[2] <= outer[2] + 1 and inner[3] <= outer[3] + 1
    )


def test_fit_shows_the_whole_2000_node_original_and_the_minimap_stays(
    service: Service, browser: Browser, big_job: str
) -> None:
    browser.open(f"{service.url}/#/jobs/{big_job}")
    browser.sign_in(service.token)
    browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, f"{ORIGINAL} g.gnode.node"), "the original graph")
    browser.js("arguments[0].scrollIntoView({block: 'center'})", browser.find("panel-original"))
    before = _top_level(browser)
    assert before["minimap"]  # the first view: the min-bad at a legible scale, with the minimap
    browser.driver.find_element(By.CSS_SELECTOR, '#panel-original [data-zoom="fit"]').click()
    browser.wait(lambda d: _top_level(browser)["viewBox"] != before["viewBox"], "Fit to change the view")
    after = _top_level(browser)
    assert len(after["members"]) >= 4, after  # embeddings, encoder, the input and the output
    outside = {k: v for k, v in after["members"].items() if not _inside(v, after["view"])}
    assert not outside, (after["view"], outside)
    assert after["minimap"]  # the minimap stays: at this scale it is the way around the graph


def _opened_frames(browser: Browser, graph: dict[str, Any], toggles: list[str]) -> dict[str, Any]:
    """The page's own drawing code on ``graph`` with the groups in ``toggles`` opened by a click
    each: per opened group (frame), the edges between two boxes inside it, with both boxes' tops
    and bottoms."""
    result: dict[str, Any] = browser.driver.execute_async_script(
        PROBE_BOX_JS
        + r"""
        const [graph, toggles, done] = arguments;
        import('/ui/js/graph.js').then((m) => {
          const box = probeBox();
          const control = m.drawGraph(box, graph, new Set(), {});
          for (const id of toggles) control.toggle(id);
          const layout = control.layout;
          const tree = layout.tree;
          const byId = new Map(layout.items.map((i) => [i.kind === 'group' ? i.group.id : i.id, i]));
          const holds = (frameId, item) => {
            let g = item.kind === 'group' ? item.group.parent : item.kind === 'node' ? tree.groupOf.get(item.id) : null;
            for (; g; g = g.parent) if (g.id === frameId) return true;
            return false;
          };
          const frames = {};
          for (const frame of layout.frames) {
            frames[frame.group.id] = layout.edges.map((e) => [byId.get(e.from), byId.get(e.to)])
              .filter(([a, b]) => a && b && holds(frame.group.id, a) && holds(frame.group.id, b))
              .map(([a, b]) => ({ from: a.id, to: b.id, fromBottom: a.y + a.h, toTop: b.y,
                                  fromRight: a.x + a.w, toLeft: b.x }));
          }
          box.remove();
          done({ frames, open: [...control.open] });
        });
        """,
        graph,
        toggles,
    )
    return result


def test_inside_an_opened_group_data_flows_top_to_bottom(service: Service, browser: Browser) -> None:
    graph = describe_graph(transformer_model(24), 2000).model_dump()
    browser.open(service.url + "/#/jobs")
    layer = "grp:m/encoder/layer.0"
    opened = _opened_frames(browser, graph, [layer, f"{layer}/attention", f"{layer}/attention/self"])
    frames = opened["frames"]
    assert {layer, f"{layer}/attention", f"{layer}/attention/self"} <= set(frames), frames.keys()
    attention = frames[f"{layer}/attention"]
    assert any(e["to"] == f"{layer}/attention/output" for e in attention), attention  # self -> output
    for frame in (layer, f"{layer}/attention", f"{layer}/attention/self"):  # what was opened: top to bottom
        upward = [e for e in frames[frame] if e["toTop"] < e["fromBottom"]]
        assert not upward, (frame, upward)
    # a long run (the encoder's 24 layers) may fold into columns: an edge goes up only to the next column
    for frame, edges in frames.items():
        wraps = [e for e in edges if e["toTop"] < e["fromBottom"]]
        assert all(e["toLeft"] > e["fromRight"] for e in wraps), (frame, wraps)
