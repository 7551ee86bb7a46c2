// Drawing an ONNX graph (the JSON of GET /v1/jobs/{id}/artifacts/{name}/graph) in SVG, laid out by
// graphlayout.js: name scopes as collapsible groups, long chains folded into columns. Only what is
// in view is in the DOM (a 10,000-node graph stays fluid); below a legible scale the labels are
// hidden and a minimap shows where the view is. Pan (drag, arrow keys), zoom (wheel, + / −; Fit
// and 0 show the whole graph), search by node name or op, click a group to open or close it. With an error overlay
// (overlay.js: a compare/golden job's per-node errors) the nodes are filled by their error and
// hovering one shows it.

import { svg } from "./chart.js";
import { t } from "./i18n.js";
import { ancestors, clip, defaultExpanded, layoutGraph, scopeTree, shapeText } from "./graphlayout.js";
import { worse } from "./overlay.js";

export { layoutGraph, shapeText } from "./graphlayout.js";

const LEGIBLE = 0.72; // the smallest scale Fit uses: 12 px labels stay >= 8.6 px
const LABELS_FROM = 0.38; // below this scale, boxes without text
const EDGE_LABELS_UP_TO = 60;
let counter = 0;


function tooltip(item, graph) {
  const info = (name) => `${name}: ${shapeText(graph.tensors[name]) || "?"}`;
  if (item.kind === "group") return `${item.group.id.slice(4)}\n${t("graphs.count", { n: item.group.count })}`;
  if (item.kind !== "node") return `${t(item.kind === "input" ? "graphs.input" : "graphs.output")} ${info(item.tensor)}`;
  const node = item.node;
  return [
    `${node.op} ${node.name}`,
    `${t("graphs.inputs")}: ${node.inputs.filter(Boolean).map(info).join("; ") || "–"}`,
    `${t("graphs.outputs")}: ${node.outputs.filter(Boolean).map(info).join("; ") || "–"}`,
  ].join("\n");
}

const overlaps = (r, v) => r.x < v.x + v.w && v.x < r.x + r.w && r.y < v.y + v.h && v.y < r.y + r.h;

/** Draw `graph` into `container`: nodes whose id is in `highlight` marked (the min-good
 * difference). options.focus: ids shown inside the graph (the min-bad in the original), the rest
 * dimmed but the path from the inputs to them; options.budget: boxes shown before groups close;
 * options.overlay: an error overlay (overlay.js buildOverlay) to fill the nodes by.
 * Returns the view control (fit, overview, zoom, pan, search, next, toggle, setOverlay, stats). */
export function drawGraph(container, graph, highlight = new Set(), options = {}) {
  const started = performance.now();
  const focus = options.focus && options.focus.size ? options.focus : null;
  const path = focus ? ancestors(graph, focus) : new Set();
  const tree = scopeTree(graph);
  const open = defaultExpanded(tree, focus || new Set(), options.budget);
  const uid = `g${(counter += 1)}`;
  const box = container.getBoundingClientRect();
  const target = { w: Math.max(240, box.width || 600), h: Math.max(160, box.height || 400) };
  const root = svg("svg", { class: "graph-svg", preserveAspectRatio: "xMidYMid meet" });
  const defs = svg("defs", {}, root);
  const marker = svg("marker", {
    id: `${uid}-arrow`, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto",
  }, defs);
  svg("path", { d: "M0 0L10 5L0 10Z", class: "arrow" }, marker);
  const frameLayer = svg("g", { class: "frames" }, root);
  const edgeLayer = svg("g", { class: "edges" }, root);
  const nodeLayer = svg("g", { class: "nodes" }, root);
  const minimap = document.createElement("canvas");
  minimap.className = "graph-minimap";
  const small = (box.width || 600) < 700; // a half-width panel: a smaller minimap hides less
  minimap.width = small ? 132 : 180;
  minimap.height = small ? 88 : 120;
  minimap.style.width = `${minimap.width}px`;
  minimap.style.height = `${minimap.height}px`;
  minimap.hidden = true;
  minimap.setAttribute("aria-hidden", "true");
  const hover = document.createElement("div");
  hover.className = "graph-hover";
  hover.hidden = true;
  hover.setAttribute("role", "status");
  container.classList.add("graph-host");
  container.replaceChildren(root, minimap, hover);

  // which groups hold focus, path and search-match nodes
  const inGroups = (ids) => {
    const counts = new Map();
    for (const id of ids) {
      for (let g = tree.groupOf.get(id); g; g = g.parent) counts.set(g.id, (counts.get(g.id) || 0) + 1);
    }
    return counts;
  };
  const focusIn = focus ? inGroups(focus) : new Map();
  const pathIn = inGroups(path);
  const diffIn = inGroups(highlight);
  let overlay = null;
  let groupErrors = new Map(); // a group's worst measured member, by group id
  let matches = [];
  let matchSet = new Set();
  let matchIn = new Map();
  let current = null;
  let layout;
  let records = [];
  let byId = new Map();
  let bounds;

  const nodeClasses = (item) => {
    const classes = ["gnode", item.kind];
    const id = item.kind === "group" ? item.group.id : item.id;
    if (item.kind === "node") {
      if (highlight.has(id)) classes.push("diff");
      if (focus) classes.push(focus.has(id) ? "focus" : path.has(id) ? "path" : "dim");
      if (matchSet.has(id)) classes.push("match");
      if (id === current) classes.push("current");
    } else if (item.kind === "group") {
      if (diffIn.has(id)) classes.push("diff");
      if (focus) classes.push(focusIn.has(id) ? "focus" : pathIn.has(id) ? "path" : "dim");
      if (matchIn.has(id)) classes.push("match");
    }
    return classes.join(" ");
  };
  const lit = (item) => !focus || item.kind === "input" || item.kind === "output"
    || (item.kind === "node" ? focus.has(item.id) || path.has(item.id) : focusIn.has(item.group.id) || pathIn.has(item.group.id));

  const errorOf = (item) => {
    if (!overlay) return null;
    if (item.kind === "node") return overlay.byNode.get(item.id) || null;
    return item.kind === "group" ? groupErrors.get(item.group.id) || null : null;
  };
  const buildNode = (item) => {
    const group = svg("g", {
      class: nodeClasses(item),
      "data-id": item.kind === "group" ? item.group.id : item.id,
      "data-op": item.node ? item.node.op : "",
      transform: `translate(${item.x} ${item.y})`,
    });
    if (item.kind === "group") group.dataset.group = item.group.id;
    const radius = item.kind === "node" ? 6 : item.kind === "group" ? 3 : item.h / 2;
    const rect = svg("rect", { width: item.w, height: item.h, rx: radius, ry: radius }, group);
    const error = errorOf(item);
    if (error) {
      rect.style.fill = error.colour;
      group.classList.add("err");
      if (error.dark) group.classList.add("err-dark");
      group.dataset.error = error.entry.nonfinite ? "nonfinite" : String(error.value);
    }
    const first = svg("text", { x: item.w / 2, y: 17, "text-anchor": "middle", class: "l1" }, group);
    first.textContent = item.lines[0];
    const second = svg("text", { x: item.w / 2, y: 33, "text-anchor": "middle", class: "l2" }, group);
    second.textContent = item.kind === "group"
      ? `+ ${t("graphs.count", { n: item.group.count })}${matchIn.has(item.group.id) ? ` · ${t("graphs.search.in_group", { n: matchIn.get(item.group.id) })}` : ""}`
      : item.lines[1];
    svg("title", {}, group).textContent = error ? `${tooltip(item, graph)}\n${hoverText(item, error)}` : tooltip(item, graph);
    return group;
  };
  const hoverText = (item, error) => {
    const where = error.entry.tensor;
    return item.kind === "group" ? `${t("graphs.overlay.worst")} ${error.entry.node} (${where}): ${error.text}` : `${where}: ${error.text}`;
  };
  const buildFrame = (frame) => {
    const group = svg("g", {
      class: `gframe${focus && !focusIn.has(frame.group.id) && !pathIn.has(frame.group.id) ? " dim" : ""}`,
      transform: `translate(${frame.x} ${frame.y})`,
      "data-id": frame.group.id,
    });
    svg("rect", { width: frame.w, height: frame.h, rx: 8, ry: 8 }, group);
    const head = svg("g", { class: "gframe-head", "data-group": frame.group.id }, group);
    svg("rect", { width: frame.w, height: 22, rx: 8, ry: 8 }, head);
    const label = svg("text", { x: 8, y: 15, class: "fl" }, head);
    label.textContent = `− ${clip(frame.group.label, Math.max(6, Math.floor(frame.w / 7.5) - 3))}`;
    svg("title", {}, head).textContent = `${frame.group.id.slice(4)}: ${t("graphs.group.collapse")}`;
    return group;
  };
  const buildEdge = (edge, labels) => {
    const a = byId.get(edge.from);
    const b = byId.get(edge.to);
    const x1 = a.x + a.w / 2;
    const y1 = a.y + a.h;
    const x2 = b.x + b.w / 2;
    const y2 = b.y;
    const wraps = y2 < y1;
    const bend = wraps ? 40 : Math.max(12, (y2 - y1) / 2);
    const classes = ["edge"];
    if (wraps) classes.push("wrap");
    if (focus) classes.push(lit(a) && lit(b) ? "lit" : "dim");
    const group = svg("g", { class: classes.join(" "), "data-tensor": edge.tensor });
    svg("path", {
      d: `M${x1} ${y1} C${x1} ${y1 + bend} ${x2} ${y2 - bend} ${x2} ${y2 - 1}`,
      "marker-end": `url(#${uid}-arrow)`,
    }, group);
    svg("title", {}, group).textContent = `${edge.tensor}: ${shapeText(graph.tensors[edge.tensor]) || "?"}`;
    if (labels && b.kind === "node" && !wraps) {
      const rightward = x2 > x1 + 1;
      const text = svg("text", {
        x: rightward ? x1 + (x2 - x1) * 0.26 - 5 : x1 + 5,
        y: y1 + (y2 - y1) * 0.45 + 4,
        "text-anchor": rightward ? "end" : "start",
        class: "edge-label",
      }, group);
      text.textContent = `${clip(edge.tensor, 22)} ${shapeText(graph.tensors[edge.tensor])}`;
    }
    return group;
  };

  const relayout = () => {
    layout = layoutGraph(graph, { tree, open, target });
    byId = new Map(layout.items.map((item) => [item.kind === "group" ? item.group.id : item.id, item]));
    for (const item of layout.items) byId.set(item.id, item);
    const labels = layout.edges.length <= EDGE_LABELS_UP_TO;
    records = [];
    miniBase = null;
    frameLayer.replaceChildren();
    edgeLayer.replaceChildren();
    nodeLayer.replaceChildren();
    for (const frame of layout.frames) {
      records.push({ x: frame.x, y: frame.y, w: frame.w, h: frame.h, layer: frameLayer, build: () => buildFrame(frame), el: null });
    }
    for (const edge of layout.edges) {
      const a = byId.get(edge.from);
      const b = byId.get(edge.to);
      const x = Math.min(a.x, b.x);
      const y = Math.min(a.y, b.y) - 40;
      const w = Math.max(a.x + a.w, b.x + b.w) - x;
      const h = Math.max(a.y + a.h, b.y + b.h) + 80 - y;
      records.push({ x, y, w, h, layer: edgeLayer, build: () => buildEdge(edge, labels), el: null });
    }
    for (const item of layout.items) {
      records.push({ x: item.x, y: item.y, w: item.w, h: item.h, layer: nodeLayer, build: () => buildNode(item), el: null, item });
    }
    bounds = { x: -20, y: -20, w: Math.max(layout.width, 100) + 40, h: Math.max(layout.height, 40) + 40 };
  };

  const view = { x: 0, y: 0, w: 1, h: 1 };
  let frameRequest = 0;
  const scaleNow = () => {
    const rect = root.getBoundingClientRect();
    return Math.min((rect.width || target.w) / view.w, (rect.height || target.h) / view.h);
  };
  const update = () => {
    frameRequest = 0;
    root.setAttribute("viewBox", `${view.x} ${view.y} ${view.w} ${view.h}`);
    const margin = { x: view.x - view.w * 0.15, y: view.y - view.h * 0.15, w: view.w * 1.3, h: view.h * 1.3 };
    for (const record of records) {
      const visible = overlaps(record, margin);
      if (visible && !(record.el && record.el.isConnected)) record.layer.append((record.el ||= record.build()));
      else if (!visible && record.el && record.el.isConnected) record.el.remove();
    }
    root.classList.toggle("lod", scaleNow() < LABELS_FROM);
    const whole = view.x <= bounds.x + 1 && view.y <= bounds.y + 1
      && view.x + view.w >= bounds.x + bounds.w - 1 && view.y + view.h >= bounds.y + bounds.h - 1;
    // the minimap stays while the drawing is below a legible scale (a big graph at Fit)
    minimap.hidden = whole && scaleNow() >= LEGIBLE - 1e-6;
    if (!whole) drawMinimap();
  };
  const apply = () => {
    root.setAttribute("viewBox", `${view.x} ${view.y} ${view.w} ${view.h}`);
    if (!frameRequest) frameRequest = requestAnimationFrame(update);
  };
  const mini = () => {
    const s = Math.min(minimap.width / bounds.w, minimap.height / bounds.h);
    return { s, ox: (minimap.width - bounds.w * s) / 2 - bounds.x * s, oy: (minimap.height - bounds.h * s) / 2 - bounds.y * s };
  };
  let miniBase = null; // the boxes, drawn once per layout or search; each view change adds its frame
  function drawMinimap() {
    const ctx = minimap.getContext("2d");
    const { s, ox, oy } = mini();
    if (!miniBase) miniBase = drawMiniBase(s, ox, oy);
    ctx.clearRect(0, 0, minimap.width, minimap.height);
    ctx.drawImage(miniBase, 0, 0);
    ctx.strokeStyle = "#1f5fbf";
    ctx.lineWidth = 1.5;
    ctx.strokeRect(ox + view.x * s, oy + view.y * s, view.w * s, view.h * s);
  }
  function drawMiniBase(s, ox, oy) {
    const base = document.createElement("canvas");
    base.width = minimap.width;
    base.height = minimap.height;
    const ctx = base.getContext("2d");
    ctx.fillStyle = "rgba(255,255,255,0.92)";
    ctx.fillRect(0, 0, minimap.width, minimap.height);
    for (const record of records) {
      const item = record.item;
      if (!item) continue;
      const id = item.kind === "group" ? item.group.id : item.id;
      let colour = "#b7c3d6";
      const error = errorOf(item);
      if (error) colour = error.colour;
      else if (focus && (focus.has(id) || focusIn.has(id))) colour = "#d1495b";
      else if (highlight.has(id) || diffIn.has(id)) colour = "#d1495b";
      else if (matchSet.has(id) || matchIn.has(id)) colour = "#e0a800";
      ctx.fillStyle = colour;
      ctx.fillRect(ox + item.x * s, oy + item.y * s, Math.max(1.5, item.w * s), Math.max(1.5, item.h * s));
    }
    return base;
  }
  const centreOn = (cx, cy) => {
    view.x = cx - view.w / 2;
    view.y = cy - view.h / 2;
    apply();
  };

  const control = {
    /** The whole graph in view (never magnified past 1:1), however small that makes it: the Fit
     * button and the 0 key. Below a legible scale the minimap stays. */
    fit() {
      const rect = root.getBoundingClientRect();
      const cw = rect.width || target.w;
      const ch = rect.height || target.h;
      const s = Math.min(cw / bounds.w, ch / bounds.h, 1);
      Object.assign(view, { w: cw / s, h: ch / s });
      centreOn(bounds.x + bounds.w / 2, bounds.y + bounds.h / 2);
    },
    /** The first view: the whole graph when its labels stay legible; otherwise an overview at the
     * smallest legible scale, on the min-bad (or the inputs), with the minimap. */
    overview() {
      const rect = root.getBoundingClientRect();
      const cw = rect.width || target.w;
      const ch = rect.height || target.h;
      let s = Math.min(cw / bounds.w, ch / bounds.h, 1);
      let cx = bounds.x + bounds.w / 2;
      let cy = bounds.y + bounds.h / 2;
      if (s < LEGIBLE) {
        s = LEGIBLE;
        const spot = focus ? layout.items.filter((i) => i.kind === "node" && focus.has(i.id)) : [];
        if (spot.length) {
          cx = (Math.min(...spot.map((i) => i.x)) + Math.max(...spot.map((i) => i.x + i.w))) / 2;
          cy = (Math.min(...spot.map((i) => i.y)) + Math.max(...spot.map((i) => i.y + i.h))) / 2;
        } else {
          cx = bounds.x + Math.min(bounds.w, cw / s) / 2;
          cy = bounds.y + Math.min(bounds.h, ch / s) / 2;
        }
      }
      Object.assign(view, { w: cw / s, h: ch / s });
      // an overview stays on the drawing: no empty margin where the graph goes on
      const keep = (c, size, lo, span) => (span > size ? Math.min(Math.max(c, lo + size / 2), lo + span - size / 2) : c);
      centreOn(keep(cx, view.w, bounds.x, bounds.w), keep(cy, view.h, bounds.y, bounds.h));
    },
    zoom(factor, cx = view.x + view.w / 2, cy = view.y + view.h / 2) {
      const w = Math.min(Math.max(view.w / factor, 40), bounds.w * 8);
      const ratio = w / view.w;
      view.x = cx - (cx - view.x) * ratio;
      view.y = cy - (cy - view.y) * ratio;
      view.w = w;
      view.h *= ratio;
      apply();
    },
    pan(dx, dy) {
      view.x += dx;
      view.y += dy;
      apply();
    },
    /** Open or close a group; the view follows it. */
    toggle(groupId) {
      if (groupId === tree.root.id || !tree.groups.has(groupId)) return;
      if (open.has(groupId)) open.delete(groupId);
      else open.add(groupId);
      relayout();
      const spot = byId.get(groupId) || layout.frames.find((f) => f.group.id === groupId);
      if (spot) centreOn(spot.x + Math.min(spot.w, view.w) / 2, spot.y + Math.min(spot.h, view.h) / 2);
      else apply();
      if (options.onChange) options.onChange(control);
    },
    /** Fill the nodes by `next` (overlay.js buildOverlay), or plainly again (null). */
    setOverlay(next) {
      overlay = next || null;
      groupErrors = new Map();
      if (overlay) {
        for (const [id, info] of overlay.byNode) {
          for (let g = tree.groupOf.get(id); g; g = g.parent) {
            const seen = groupErrors.get(g.id);
            if (!seen || worse(info, seen)) groupErrors.set(g.id, info);
          }
        }
      }
      root.classList.toggle("overlay", Boolean(overlay));
      hover.hidden = true;
      miniBase = null;
      for (const record of records) {
        if (record.el && record.el.isConnected) record.el.remove();
        record.el = null;
      }
      apply();
    },
    get overlay() {
      return overlay;
    },
    /** Mark the nodes whose name, id or op holds `query`; returns how many. */
    search(query) {
      const q = query.trim().toLowerCase();
      matches = q ? graph.nodes.filter((n) => n.op.toLowerCase().includes(q) || n.id.toLowerCase().includes(q)
        || (n.name || "").toLowerCase().includes(q)).map((n) => n.id) : [];
      matchSet = new Set(matches);
      matchIn = inGroups(matches);
      current = null;
      miniBase = null;
      for (const record of records) {
        if (record.el && record.el.isConnected) record.el.remove();
        record.el = null;
      }
      apply();
      return matches.length;
    },
    matchCount() {
      return matches.length;
    },
    /** Show the next match (its groups opened); returns its position (1-based) or 0. */
    next() {
      if (!matches.length) return 0;
      const at = (matches.indexOf(current) + 1) % matches.length;
      current = matches[at];
      let opened = false;
      for (let g = tree.groupOf.get(current); g; g = g.parent) {
        if (!open.has(g.id)) {
          open.add(g.id);
          opened = true;
        }
      }
      if (opened) relayout();
      else for (const record of records) {
        if (record.el && record.el.isConnected) record.el.remove();
        record.el = null;
      }
      const item = byId.get(current);
      const s = Math.max(scaleNow(), LEGIBLE);
      const rect = root.getBoundingClientRect();
      Object.assign(view, { w: (rect.width || target.w) / s, h: (rect.height || target.h) / s });
      centreOn(item.x + item.w / 2, item.y + item.h / 2);
      return at + 1;
    },
    stats() {
      return {
        items: layout.items.length,
        nodes: layout.items.filter((i) => i.kind === "node").length,
        groups: layout.items.filter((i) => i.kind === "group").length,
        frames: layout.frames.length,
        drawn: nodeLayer.childElementCount,
        width: layout.width,
        height: layout.height,
        ms: drawMs,
      };
    },
    get layout() {
      return layout;
    },
    get open() {
      return open;
    },
    /** Draw now what the last view change asked for (tests; a frame does it otherwise). */
    flush() {
      if (frameRequest) cancelAnimationFrame(frameRequest);
      update();
    },
  };

  relayout();
  if (options.overlay) control.setOverlay(options.overlay);
  attachInput(container, root, minimap, control, view, scaleNow, mini);
  // hovering a node with the overlay on shows its error beside the pointer
  root.addEventListener("pointermove", (event) => {
    const target = event.target.closest ? event.target.closest("g.gnode") : null;
    const item = target ? byId.get(target.dataset.id) : null;
    const error = item ? errorOf(item) : null;
    if (!error || root.classList.contains("dragging")) {
      hover.hidden = true;
      return;
    }
    const name = item.kind === "node" ? `${item.node.op} ${item.node.name || item.id}` : item.group.id.slice(4);
    hover.replaceChildren();
    const head = document.createElement("strong");
    head.textContent = name;
    const line = document.createElement("div");
    line.textContent = hoverText(item, error);
    hover.append(head, line);
    hover.dataset.id = target.dataset.id;
    const box = container.getBoundingClientRect();
    hover.style.left = `${Math.min(event.clientX - box.left + 14, Math.max(0, box.width - 260))}px`;
    hover.style.top = `${event.clientY - box.top + 14}px`;
    hover.hidden = false;
  });
  root.addEventListener("pointerleave", () => { hover.hidden = true; });
  control.overview();
  control.flush();
  const drawMs = performance.now() - started;
  return control;
}

function attachInput(container, root, minimap, control, view, scaleNow, mini) {
  let drag = null;
  root.addEventListener("pointerdown", (event) => {
    const s = scaleNow();
    drag = { x: event.clientX, y: event.clientY, s: 1 / (s || 1), moved: 0, target: event.target };
    try {
      root.setPointerCapture(event.pointerId);
    } catch {
      // a pointer the browser does not track (synthetic events): panning works without capture
    }
    root.classList.add("dragging");
  });
  root.addEventListener("pointermove", (event) => {
    if (!drag) return;
    drag.moved += Math.abs(drag.x - event.clientX) + Math.abs(drag.y - event.clientY);
    control.pan((drag.x - event.clientX) * drag.s, (drag.y - event.clientY) * drag.s);
    drag.x = event.clientX;
    drag.y = event.clientY;
  });
  const end = () => {
    if (drag && drag.moved < 4 && drag.target && drag.target.closest) {
      const group = drag.target.closest("[data-group]");
      if (group) control.toggle(group.dataset.group);
    }
    drag = null;
    root.classList.remove("dragging");
  };
  root.addEventListener("pointerup", end);
  root.addEventListener("pointercancel", () => {
    drag = null;
    root.classList.remove("dragging");
  });
  root.addEventListener("wheel", (event) => {
    event.preventDefault();
    const matrix = root.getScreenCTM();
    let cx;
    let cy;
    if (matrix) {
      const point = new DOMPoint(event.clientX, event.clientY).matrixTransform(matrix.inverse());
      cx = point.x;
      cy = point.y;
    }
    control.zoom(event.deltaY < 0 ? 1.2 : 1 / 1.2, cx, cy);
  }, { passive: false });
  const jump = (event) => {
    const rect = minimap.getBoundingClientRect();
    const { s, ox, oy } = mini();
    const x = ((event.clientX - rect.left) * (minimap.width / rect.width) - ox) / s;
    const y = ((event.clientY - rect.top) * (minimap.height / rect.height) - oy) / s;
    view.x = x - view.w / 2;
    view.y = y - view.h / 2;
    control.pan(0, 0);
  };
  let miniDrag = false;
  minimap.addEventListener("pointerdown", (event) => {
    miniDrag = true;
    jump(event);
  });
  minimap.addEventListener("pointermove", (event) => { if (miniDrag) jump(event); });
  minimap.addEventListener("pointerup", () => { miniDrag = false; });
  minimap.addEventListener("pointerleave", () => { miniDrag = false; });
  container.onkeydown = (event) => {
    const step = Math.max(view.w, view.h) * 0.1;
    const keys = {
      ArrowLeft: () => control.pan(-step, 0),
      ArrowRight: () => control.pan(step, 0),
      ArrowUp: () => control.pan(0, -step),
      ArrowDown: () => control.pan(0, step),
      "+": () => control.zoom(1.2),
      "=": () => control.zoom(1.2),
      "-": () => control.zoom(1 / 1.2),
      0: () => control.fit(),
    };
    if (keys[event.key]) {
      event.preventDefault();
      keys[event.key]();
    }
  };
}

/** The nodes of `graph` as a table (the drawing's text alternative); rows in `highlight` marked. */
export function graphTable(graph, highlight) {
  const table = document.createElement("table");
  table.className = "graph-table stack";
  const head = table.createTHead().insertRow();
  const columns = ["graphs.col.node", "graphs.col.op", "graphs.inputs", "graphs.outputs"];
  for (const key of columns) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = t(key);
    head.append(th);
  }
  const body = table.createTBody();
  const tensors = (names) => names.filter(Boolean).map((n) => `${n} ${shapeText(graph.tensors[n])}`).join(", ");
  for (const node of graph.nodes) {
    const row = body.insertRow();
    row.dataset.id = node.id;
    if (highlight.has(node.id)) row.className = "diff";
    [node.name || node.id, node.op, tensors(node.inputs), tensors(node.outputs)].forEach((text, i) => {
      const cell = row.insertCell();
      cell.textContent = text;
      cell.dataset.label = t(columns[i]);
    });
  }
  return table;
}
