// The layout of an ONNX graph (the JSON of the graph route) for graph.js, with no DOM: nodes are
// grouped by name scope (`/m/encoder/layer.2/attention/MatMul` sits in m › encoder › layer.2 ›
// attention); a collapsed group is one box, an expanded one a frame around its own layout. Each
// level is a layered DAG (a node one layer below its deepest producer, barycentre ordering). The
// outer level's layers are folded into side-by-side columns so that a long chain fills the view's
// width instead of becoming a one-pixel column; inside an opened group (a frame) only a long run
// (more than FOLD_FROM layers: 24 encoder layers) is, read column after column: an attention
// block or a layer opened by a click reads top to bottom, never upwards.

const NODE_H = 40;
const LAYER_GAP = 22;
const NODE_GAP = 18;
const COLUMN_GAP = 40;
const FRAME_PAD = 12;
const FRAME_HEAD = 24;
const CHAR_W = 7.4;
const FOLD_FROM = 12; // inside a frame, a level of more layers than this may fold into columns
export const VISIBLE_BUDGET = 60; // groups open by default while this many boxes or fewer show

export function shapeText(info) {
  if (!info) return "";
  const dims = info.shape ? `[${info.shape.map((d) => (d === null ? "?" : d)).join(",")}]` : "";
  return `${info.dtype || "?"}${dims}`;
}

export const clip = (text, max) => (text.length > max ? `${text.slice(0, max - 1)}…` : text);

function boxWidth(lines) {
  return Math.min(260, Math.max(76, Math.max(...lines.map((l) => l.length)) * CHAR_W + 18));
}

/** The scope of a node name: `/m/enc/layer.2/dense/MatMul` -> ["m", "enc", "layer.2", "dense"]. */
export function scopeOf(name) {
  const parts = (name || "").split("/").filter(Boolean);
  return parts.slice(0, -1);
}

export function shortName(node) {
  const parts = (node.name || "").split("/").filter(Boolean);
  return parts.length ? parts[parts.length - 1] : node.outputs[0] || node.id;
}

/** The scope tree: groups {id, label, parent, groups: Map, nodes: [], count, depth}. Chains of
 * single-child scopes with no nodes of their own are merged (`m/encoder`). */
export function scopeTree(graph) {
  const root = { id: "grp:", label: "", parent: null, groups: new Map(), nodes: [], count: 0, depth: 0 };
  const groupOf = new Map();
  for (const node of graph.nodes) {
    let group = root;
    for (const part of scopeOf(node.name)) {
      if (!group.groups.has(part)) {
        const id = `${group.id}${group === root ? "" : "/"}${part}`;
        group.groups.set(part, { id, label: part, parent: group, groups: new Map(), nodes: [], count: 0, depth: 0 });
      }
      group = group.groups.get(part);
    }
    group.nodes.push(node.id);
    groupOf.set(node.id, group);
  }
  const merge = (group) => {
    for (const [key, child] of [...group.groups]) {
      let merged = child;
      while (merged.nodes.length === 0 && merged.groups.size === 1) {
        const only = [...merged.groups.values()][0];
        only.label = `${merged.label}/${only.label}`;
        only.parent = group;
        merged = only;
      }
      if (merged !== child) group.groups.set(key, merged);
      merge(merged);
    }
  };
  merge(root);
  // a scope holding the whole graph (`/m/...`) is no group either: its contents move up
  while (root.nodes.length === 0 && root.groups.size === 1) {
    const only = [...root.groups.values()][0];
    root.groups = only.groups;
    root.nodes = only.nodes;
    for (const child of root.groups.values()) child.parent = root;
  }
  // a group holding a single node is no group: the node moves up
  const flatten = (group) => {
    for (const [key, child] of [...group.groups]) {
      flatten(child);
      if (child.groups.size === 0 && child.nodes.length === 1) {
        group.nodes.push(child.nodes[0]);
        group.groups.delete(key);
      }
    }
  };
  flatten(root);
  const all = new Map();
  const walk = (group, depth) => {
    group.depth = depth;
    all.set(group.id, group);
    for (const id of group.nodes) groupOf.set(id, group);
    group.count = group.nodes.length;
    for (const child of group.groups.values()) {
      walk(child, depth + 1);
      group.count += child.count;
    }
  };
  walk(root, 0);
  return { root, groups: all, groupOf };
}

/** Groups open by default: level by level, while at most `budget` boxes show; and every group on
 * the way to a node of `reveal` (the min-bad in the original graph). */
export function defaultExpanded(tree, reveal = new Set(), budget = VISIBLE_BUDGET) {
  const open = new Set([tree.root.id]);
  let level = [tree.root];
  let visible = tree.root.nodes.length + tree.root.groups.size;
  while (level.length) {
    const next = level.flatMap((g) => [...g.groups.values()]);
    const grown = visible + next.reduce((s, g) => s + g.nodes.length + g.groups.size - 1, 0);
    if (!next.length || grown > budget) break;
    for (const g of next) open.add(g.id);
    visible = grown;
    level = next;
  }
  for (const id of reveal) {
    for (let g = tree.groupOf.get(id); g; g = g.parent) open.add(g.id);
  }
  return open;
}

/** The layout of `graph` with the groups in `open` expanded: {items, frames, edges, width, height}.
 * items: drawn boxes {id, kind: input|node|output|group, lines, x, y, w, h, node?, group?};
 * frames: expanded groups {group, x, y, w, h}; edges: {from, to, tensor} between item ids. */
export function layoutGraph(graph, options = {}) {
  const tree = options.tree || scopeTree(graph);
  const open = options.open || defaultExpanded(tree);
  const target = options.target || { w: 900, h: 500 };
  const initializers = new Set(graph.initializers);
  const producer = new Map();
  const nodeById = new Map(graph.nodes.map((n) => [n.id, n]));
  // the visible box standing for each node: itself, or its outermost collapsed group
  const shownAs = new Map();
  for (const node of graph.nodes) {
    let rep = node.id;
    for (let g = tree.groupOf.get(node.id); g && g !== tree.root; g = g.parent) {
      if (!open.has(g.id)) rep = g.id;
    }
    shownAs.set(node.id, rep);
  }
  const items = new Map();
  const container = new Map(); // item or frame id -> its parent group id
  const addItem = (item, parent) => {
    items.set(item.id, { ...item, x: 0, y: 0 });
    container.set(item.id, parent);
  };
  for (const value of graph.inputs) {
    if (initializers.has(value.name)) continue;
    addItem({ id: `in:${value.name}`, kind: "input", lines: [clip(value.name, 30), shapeText(value)], tensor: value.name }, tree.root.id);
    producer.set(value.name, `in:${value.name}`);
  }
  for (const node of graph.nodes) for (const output of node.outputs) if (output) producer.set(output, node.id);
  const frames = new Map();
  const visit = (group) => {
    for (const id of group.nodes) {
      const node = nodeById.get(id);
      addItem({ id, kind: "node", lines: [node.op, clip(shortName(node), 30)], node }, group.id);
    }
    for (const child of group.groups.values()) {
      if (open.has(child.id)) {
        frames.set(child.id, { id: child.id, group: child, x: 0, y: 0, w: 0, h: 0 });
        container.set(child.id, group.id);
        visit(child);
      } else {
        addItem({ id: child.id, kind: "group", lines: [clip(child.label, 30), ""], group: child }, group.id);
      }
    }
  };
  visit(tree.root);
  for (const value of graph.outputs) {
    addItem({ id: `out:${value.name}`, kind: "output", lines: [clip(value.name, 30), shapeText(value)], tensor: value.name }, tree.root.id);
  }
  // edges between drawn boxes (several tensors between the same two boxes: one edge)
  const edges = new Map();
  const connect = (fromId, toId, tensor) => {
    const from = items.has(fromId) ? fromId : shownAs.get(fromId);
    const to = items.has(toId) ? toId : shownAs.get(toId);
    if (!from || !to || from === to) return;
    const key = `${from}\u0000${to}`;
    if (!edges.has(key)) edges.set(key, { from, to, tensor, count: 0 });
    edges.get(key).count += 1;
  };
  for (const node of graph.nodes) {
    for (const input of node.inputs) {
      if (input && !initializers.has(input) && producer.has(input)) connect(producer.get(input), node.id, input);
    }
  }
  for (const value of graph.outputs) {
    if (producer.has(value.name)) connect(producer.get(value.name), `out:${value.name}`, value.name);
  }
  // members of each container, and the edges between them (an edge climbs to the children of
  // the innermost container holding both of its ends)
  const members = new Map([[tree.root.id, []]]);
  for (const id of frames.keys()) members.set(id, []);
  for (const [id, parent] of container) members.get(parent).push(id);
  const chain = (id) => {
    const out = [id];
    for (let c = container.get(id); c !== undefined; c = container.get(c)) out.push(c);
    return out.reverse(); // root first
  };
  const memberEdges = new Map([...members.keys()].map((id) => [id, []]));
  for (const edge of edges.values()) {
    const a = chain(edge.from);
    const b = chain(edge.to);
    let i = 0;
    while (i < a.length && i < b.length && a[i] === b[i]) i += 1;
    if (i === 0 || i >= a.length || i >= b.length) continue;
    memberEdges.get(a[i - 1]).push([a[i], b[i]]);
  }
  const size = (id) => (items.has(id) ? items.get(id) : frames.get(id));
  for (const item of items.values()) {
    if (item.kind === "group") item.lines[1] = `${item.group.count}`;
    item.w = boxWidth(item.lines);
    item.h = NODE_H;
  }
  // lay out the innermost frames first
  const order = [...frames.values()].sort((p, q) => q.group.depth - p.group.depth);
  for (const frame of order) {
    const room = { w: target.w - 2 * FRAME_PAD, h: target.h - FRAME_HEAD - FRAME_PAD - 2 * (NODE_H + LAYER_GAP) };
    const inner = layLevel(members.get(frame.id), memberEdges.get(frame.id), size, room, false);
    frame.w = Math.max(inner.w + 2 * FRAME_PAD, boxWidth([frame.group.label]) + 2 * FRAME_PAD);
    frame.h = inner.h + FRAME_PAD + FRAME_HEAD;
    frame.inner = inner;
  }
  const top = layLevel(members.get(tree.root.id), memberEdges.get(tree.root.id), size, target, true);
  // absolute positions, from the root down
  const placeIn = (level, ox, oy) => {
    for (const [id, pos] of level.pos) {
      const box = size(id);
      box.x = ox + pos.x;
      box.y = oy + pos.y;
      if (frames.has(id)) placeIn(box.inner, box.x + FRAME_PAD + (box.w - 2 * FRAME_PAD - box.inner.w) / 2, box.y + FRAME_HEAD);
    }
  };
  placeIn(top, 0, 0);
  const frameList = [...frames.values()].sort((p, q) => p.group.depth - q.group.depth);
  for (const frame of frameList) delete frame.inner;
  return { items: [...items.values()], frames: frameList, edges: [...edges.values()], width: top.w, height: top.h, tree, open };
}

/** One level: members (ids) and their edges -> {pos: Map id -> {x, y}, w, h}; the outer level
 * folded into columns to fit `target`, a frame's level (not `outer`) only when it is longer than
 * FOLD_FROM layers (else one column, top to bottom). */
function layLevel(ids, pairs, size, target, outer) {
  const index = new Map(ids.map((id, i) => [id, i]));
  const incoming = ids.map(() => []);
  const outgoing = ids.map(() => []);
  for (const [a, b] of pairs) {
    const i = index.get(a);
    const j = index.get(b);
    if (i === undefined || j === undefined || i === j) continue;
    outgoing[i].push(j);
    incoming[j].push(i);
  }
  const layer = ids.map(() => 0);
  const pending = incoming.map((list) => list.length);
  const queue = ids.map((_, i) => i).filter((i) => pending[i] === 0);
  const done = new Array(ids.length).fill(false);
  for (let head = 0; head < queue.length; head += 1) {
    const i = queue[head];
    done[i] = true;
    for (const j of outgoing[i]) {
      layer[j] = Math.max(layer[j], layer[i] + 1);
      pending[j] -= 1;
      if (pending[j] === 0) queue.push(j);
    }
  }
  // a cycle between collapsed groups: the rest follow their deepest placed producer
  for (let i = 0; i < ids.length; i += 1) {
    if (!done[i]) layer[i] = Math.max(0, ...incoming[i].filter((k) => done[k]).map((k) => layer[k] + 1));
  }
  // a source sits just above its first consumer; outputs at the bottom (of the outer level)
  for (let i = 0; i < ids.length; i += 1) {
    if (!incoming[i].length && outgoing[i].length) layer[i] = Math.max(0, Math.min(...outgoing[i].map((j) => layer[j])) - 1);
  }
  if (outer) {
    const outs = ids.map((id, i) => (id.startsWith("out:") ? i : -1)).filter((i) => i >= 0);
    const deepest = Math.max(0, ...ids.map((id, i) => (id.startsWith("out:") ? 0 : layer[i])));
    for (const i of outs) layer[i] = deepest + 1;
  }
  const layers = [];
  ids.forEach((_, i) => (layers[layer[i]] ||= []).push(i));
  const filled = layers.filter(Boolean);
  const orderOf = new Array(ids.length).fill(0);
  filled.forEach((row) => row.forEach((i, k) => { orderOf[i] = k; }));
  const weight = new Array(ids.length).fill(0);
  const centre = (list) => (list.length ? list.reduce((s, k) => s + orderOf[k], 0) / list.length : null);
  for (let sweep = 0; sweep < 4; sweep += 1) {
    const down = sweep % 2 === 0;
    const sequence = down ? filled.slice(1) : filled.slice(0, -1).reverse();
    for (const row of sequence) {
      for (const i of row) {
        const c = centre(down ? incoming[i] : outgoing[i]);
        weight[i] = c === null ? orderOf[i] : c;
      }
      row.sort((p, q) => weight[p] - weight[q]);
      row.forEach((i, k) => { orderOf[i] = k; });
    }
  }
  const rows = filled.map((row) => {
    const boxes = row.map((i) => size(ids[i]));
    return {
      row,
      w: boxes.reduce((s, b) => s + b.w, 0) + NODE_GAP * (row.length - 1),
      h: Math.max(...boxes.map((b) => b.h)),
    };
  });
  const k = outer || rows.length > FOLD_FROM ? bestFold(rows, target) : 1;
  const perColumn = Math.ceil(rows.length / k);
  const pos = new Map();
  let x = 0;
  let height = 0;
  for (let c = 0; c < k; c += 1) {
    const column = rows.slice(c * perColumn, (c + 1) * perColumn);
    if (!column.length) break;
    const cw = Math.max(...column.map((r) => r.w));
    let y = 0;
    for (const r of column) {
      let rx = x + (cw - r.w) / 2;
      for (const i of r.row) {
        const box = size(ids[i]);
        pos.set(ids[i], { x: rx, y: y + (r.h - box.h) / 2 });
        rx += box.w + NODE_GAP;
      }
      y += r.h + LAYER_GAP;
    }
    height = Math.max(height, y - LAYER_GAP);
    x += cw + COLUMN_GAP;
  }
  return { pos, w: Math.max(0, x - COLUMN_GAP), h: Math.max(0, height) };
}

/** How many columns to fold `rows` into: the count that lets the whole fit `target` at the
 * largest scale (never counted past 1:1), the fewest columns among equals. */
function bestFold(rows, target) {
  let best = 1;
  let bestScale = -1;
  const limit = Math.min(rows.length, 40);
  for (let k = 1; k <= limit; k += 1) {
    const per = Math.ceil(rows.length / k);
    let w = 0;
    let h = 0;
    for (let c = 0; c < k; c += 1) {
      const column = rows.slice(c * per, (c + 1) * per);
      if (!column.length) break;
      w += Math.max(...column.map((r) => r.w)) + COLUMN_GAP;
      h = Math.max(h, column.reduce((s, r) => s + r.h + LAYER_GAP, 0));
    }
    const scale = Math.min(1, target.w / Math.max(1, w), target.h / Math.max(1, h));
    if (scale > bestScale + 1e-6) {
      best = k;
      bestScale = scale;
    }
  }
  return best;
}

/** Every node (id) from which a node of `targets` can be reached: the path from the inputs. */
export function ancestors(graph, targets) {
  const producer = new Map();
  for (const node of graph.nodes) for (const output of node.outputs) if (output) producer.set(output, node);
  const seen = new Set();
  const stack = [];
  const byId = new Map(graph.nodes.map((n) => [n.id, n]));
  for (const id of targets) if (byId.has(id)) stack.push(byId.get(id));
  while (stack.length) {
    const node = stack.pop();
    for (const input of node.inputs) {
      const from = producer.get(input);
      if (from && !seen.has(from.id) && !targets.has(from.id)) {
        seen.add(from.id);
        stack.push(from);
      }
    }
  }
  return seen;
}
