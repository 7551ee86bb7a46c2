// Drawing an ONNX graph (the JSON of GET /v1/jobs/{id}/artifacts/{name}/graph) as a layered DAG in
// SVG: graph inputs on top, each node on the layer after its deepest producer, outputs at the
// bottom; the order inside a layer is improved by a few barycentre sweeps. Pan (drag, arrow keys)
// and zoom (wheel, + / −, 0 fits) move the SVG viewBox, so a few hundred nodes stay fluid.

import { svg } from "./chart.js";
import { t } from "./i18n.js";

const LAYER_GAP = 64;
const NODE_GAP = 22;
const NODE_H = 42;
const CHAR_W = 7.2;
const EDGE_LABELS_UP_TO = 80;
let counter = 0;

export function shapeText(info) {
  if (!info) return "";
  const dims = info.shape ? `[${info.shape.map((d) => (d === null ? "?" : d)).join(",")}]` : "";
  return `${info.dtype || "?"}${dims}`;
}

const clip = (text, max) => (text.length > max ? `${text.slice(0, max - 1)}…` : text);

function boxWidth(lines) {
  return Math.min(240, Math.max(84, Math.max(...lines.map((l) => l.length)) * CHAR_W + 20));
}

/** Items (inputs, nodes, outputs) with layers and positions, and the edges between them. */
export function layoutGraph(graph) {
  const initializers = new Set(graph.initializers);
  const items = new Map();
  const producer = new Map();
  const add = (item) => {
    items.set(item.id, { ...item, incoming: [], outgoing: [] });
    return items.get(item.id);
  };
  for (const value of graph.inputs) {
    if (initializers.has(value.name)) continue;
    const lines = [clip(value.name, 30), shapeText(value)];
    add({ id: `in:${value.name}`, kind: "input", lines, tensor: value.name });
    producer.set(value.name, `in:${value.name}`);
  }
  for (const node of graph.nodes) {
    const lines = [node.op, clip(node.name || node.outputs[0] || "", 30)];
    add({ id: node.id, kind: "node", lines, node });
    for (const output of node.outputs) if (output) producer.set(output, node.id);
  }
  for (const value of graph.outputs) {
    add({ id: `out:${value.name}`, kind: "output", lines: [clip(value.name, 30), shapeText(value)], tensor: value.name });
  }
  const edges = [];
  const connect = (from, to, tensor) => {
    if (!items.has(from)) return;
    edges.push({ from, to, tensor });
    items.get(from).outgoing.push(to);
    items.get(to).incoming.push(from);
  };
  for (const node of graph.nodes) {
    for (const input of node.inputs) {
      if (input && !initializers.has(input) && producer.has(input)) connect(producer.get(input), node.id, input);
    }
  }
  for (const value of graph.outputs) {
    if (producer.has(value.name)) connect(producer.get(value.name), `out:${value.name}`, value.name);
  }
  assignLayers(items);
  const layers = orderLayers(items);
  place(layers);
  return { items: [...items.values()], edges, layers };
}

function assignLayers(items) {
  // Kahn's order; a cycle (never in a valid model) leaves the rest on layer 0.
  const pending = new Map([...items.values()].map((item) => [item.id, item.incoming.length]));
  const queue = [...items.values()].filter((item) => item.incoming.length === 0);
  for (const item of items.values()) item.layer = 0;
  while (queue.length) {
    const item = queue.shift();
    for (const next of item.outgoing) {
      const target = items.get(next);
      target.layer = Math.max(target.layer, item.layer + 1);
      pending.set(next, pending.get(next) - 1);
      if (pending.get(next) === 0) queue.push(target);
    }
  }
  // a source (graph input) sits just above its first consumer, not at the top with long edges
  for (const item of items.values()) {
    if (item.incoming.length === 0 && item.outgoing.length) {
      item.layer = Math.max(0, Math.min(...item.outgoing.map((id) => items.get(id).layer)) - 1);
    }
  }
  const deepest = Math.max(0, ...[...items.values()].filter((i) => i.kind !== "output").map((i) => i.layer));
  for (const item of items.values()) if (item.kind === "output") item.layer = deepest + 1;
}

function orderLayers(items) {
  const layers = [];
  for (const item of items.values()) (layers[item.layer] ||= []).push(item);
  const filled = layers.filter(Boolean);
  filled.forEach((layer) => layer.forEach((item, i) => { item.order = i; }));
  const centre = (ids) => (ids.length ? ids.reduce((s, id) => s + items.get(id).order, 0) / ids.length : null);
  for (let sweep = 0; sweep < 4; sweep += 1) {
    const down = sweep % 2 === 0;
    const sequence = down ? filled.slice(1) : filled.slice(0, -1).reverse();
    for (const layer of sequence) {
      for (const item of layer) {
        const c = centre(down ? item.incoming : item.outgoing);
        item.weight = c === null ? item.order : c;
      }
      layer.sort((a, b) => a.weight - b.weight);
      layer.forEach((item, i) => { item.order = i; });
    }
  }
  return filled;
}

function place(layers) {
  let widest = 0;
  for (const layer of layers) {
    let x = 0;
    for (const item of layer) {
      item.w = boxWidth(item.lines);
      item.h = NODE_H;
      item.x = x;
      x += item.w + NODE_GAP;
    }
    layer.width = x - NODE_GAP;
    widest = Math.max(widest, layer.width);
  }
  layers.forEach((layer, depth) => {
    const shift = (widest - layer.width) / 2;
    for (const item of layer) {
      item.x += shift;
      item.y = depth * (NODE_H + LAYER_GAP);
    }
  });
}

function tooltip(item, graph) {
  const info = (name) => `${name}: ${shapeText(graph.tensors[name]) || "?"}`;
  if (item.kind !== "node") return `${t(item.kind === "input" ? "graphs.input" : "graphs.output")} ${info(item.tensor)}`;
  const node = item.node;
  return [
    `${node.op} ${node.name}`,
    `${t("graphs.inputs")}: ${node.inputs.filter(Boolean).map(info).join("; ") || "–"}`,
    `${t("graphs.outputs")}: ${node.outputs.filter(Boolean).map(info).join("; ") || "–"}`,
  ].join("\n");
}

/** Draw `graph` into `container`, nodes whose id is in `highlight` marked. Returns the view control. */
export function drawGraph(container, graph, highlight) {
  const layout = layoutGraph(graph);
  const byId = new Map(layout.items.map((item) => [item.id, item]));
  const uid = `g${(counter += 1)}`;
  const root = svg("svg", { class: "graph-svg", preserveAspectRatio: "xMidYMid meet" });
  const defs = svg("defs", {}, root);
  const marker = svg("marker", {
    id: `${uid}-arrow`, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto",
  }, defs);
  svg("path", { d: "M0 0L10 5L0 10Z", class: "arrow" }, marker);
  const edgeLayer = svg("g", { class: "edges" }, root);
  const labels = layout.edges.length <= EDGE_LABELS_UP_TO;
  for (const edge of layout.edges) {
    const a = byId.get(edge.from);
    const b = byId.get(edge.to);
    const x1 = a.x + a.w / 2;
    const y1 = a.y + a.h;
    const x2 = b.x + b.w / 2;
    const y2 = b.y;
    const bend = (y2 - y1) / 2;
    const group = svg("g", { class: "edge", "data-tensor": edge.tensor }, edgeLayer);
    svg("path", {
      d: `M${x1} ${y1} C${x1} ${y1 + bend} ${x2} ${y2 - bend} ${x2} ${y2 - 1}`,
      "marker-end": `url(#${uid}-arrow)`,
    }, group);
    svg("title", {}, group).textContent = `${edge.tensor}: ${shapeText(graph.tensors[edge.tensor]) || "?"}`;
    if (labels && b.kind === "node") {
      // a third of the way along the curve: edges that meet at one node keep their labels apart
      const u = 0.33;
      const lx = (1 - u) ** 3 * x1 + 3 * (1 - u) ** 2 * u * x1 + 3 * (1 - u) * u ** 2 * x2 + u ** 3 * x2;
      const ly = y1 + (y2 - y1) * 0.3;
      // beside its edge, on the side the edge leans away from: edges meeting at one node fan apart
      const rightward = x2 > x1 + 1;
      const text = svg("text", {
        x: rightward ? lx - 5 : lx + 5, y: ly + 4, "text-anchor": rightward ? "end" : "start", class: "edge-label",
      }, group);
      text.textContent = `${clip(edge.tensor, 22)} ${shapeText(graph.tensors[edge.tensor])}`;
    }
  }
  const nodeLayer = svg("g", { class: "nodes" }, root);
  for (const item of layout.items) {
    const classes = ["gnode", item.kind];
    if (item.kind === "node" && highlight.has(item.id)) classes.push("diff");
    const group = svg("g", {
      class: classes.join(" "),
      "data-id": item.id,
      "data-op": item.node ? item.node.op : "",
      transform: `translate(${item.x} ${item.y})`,
    }, nodeLayer);
    const radius = item.kind === "node" ? 6 : item.h / 2;
    svg("rect", { width: item.w, height: item.h, rx: radius, ry: radius }, group);
    const first = svg("text", { x: item.w / 2, y: 17, "text-anchor": "middle", class: "l1" }, group);
    first.textContent = item.lines[0];
    const second = svg("text", { x: item.w / 2, y: 33, "text-anchor": "middle", class: "l2" }, group);
    second.textContent = item.lines[1];
    svg("title", {}, group).textContent = tooltip(item, graph);
  }
  container.replaceChildren(root);
  const bounds = {
    x: -20,
    y: -20,
    w: Math.max(...layout.items.map((i) => i.x + i.w), 100) + 40,
    h: Math.max(...layout.items.map((i) => i.y + i.h), 40) + 40,
  };
  return attachPanZoom(container, root, bounds);
}

function attachPanZoom(container, root, bounds) {
  const view = { ...bounds };
  const apply = () => root.setAttribute("viewBox", `${view.x} ${view.y} ${view.w} ${view.h}`);
  const scale = () => {
    const rect = root.getBoundingClientRect();
    return Math.max(view.w / (rect.width || 1), view.h / (rect.height || 1));
  };
  const control = {
    fit() {
      // the whole graph, but never magnified past 1:1 (a two-node graph stays at its natural size)
      const rect = container.getBoundingClientRect();
      const w = Math.max(bounds.w, rect.width || 0);
      const h = Math.max(bounds.h, rect.height || 0);
      Object.assign(view, { x: bounds.x - (w - bounds.w) / 2, y: bounds.y - (h - bounds.h) / 2, w, h });
      apply();
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
  };
  let drag = null;
  root.addEventListener("pointerdown", (event) => {
    drag = { x: event.clientX, y: event.clientY, s: scale() };
    try {
      root.setPointerCapture(event.pointerId);
    } catch {
      // a pointer the browser does not track (synthetic events): panning works without capture
    }
    root.classList.add("dragging");
  });
  root.addEventListener("pointermove", (event) => {
    if (!drag) return;
    control.pan((drag.x - event.clientX) * drag.s, (drag.y - event.clientY) * drag.s);
    drag.x = event.clientX;
    drag.y = event.clientY;
  });
  const end = () => {
    drag = null;
    root.classList.remove("dragging");
  };
  root.addEventListener("pointerup", end);
  root.addEventListener("pointercancel", end);
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
  control.fit();
  return control;
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
