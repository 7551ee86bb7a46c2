// The live chart: candidate size (nodes) per check, one mark per iteration coloured and shaped by
// its verdict, and the best (smallest failing) size so far as a step line. Plain SVG.

import { t } from "./i18n.js";

const SVG = "http://www.w3.org/2000/svg";
export const VERDICTS = ["fail", "pass", "timeout", "crash", "infra-error", "pending"];
const WIDTH = 640;
const HEIGHT = 220;
const PAD = { left: 44, right: 12, top: 12, bottom: 30 };

export function svg(tag, attrs = {}, parent = null) {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) element.setAttribute(name, String(value));
  if (parent) parent.append(element);
  return element;
}

function ticks(max, count) {
  if (max <= 0) return [0];
  const raw = max / count;
  const step = [1, 2, 5, 10].map((m) => m * 10 ** Math.floor(Math.log10(raw))).find((s) => s >= raw) || raw;
  const out = [];
  for (let v = 0; v <= max + 1e-9; v += step) out.push(Math.round(v));
  return out;
}

function mark(group, verdict, x, y) {
  const cls = `mark v-${verdict}`;
  if (verdict === "pass") return svg("rect", { x: x - 3.5, y: y - 3.5, width: 7, height: 7, class: cls }, group);
  if (verdict === "fail") return svg("circle", { cx: x, cy: y, r: 4, class: cls }, group);
  return svg("path", { d: `M${x} ${y - 5}L${x + 5} ${y + 4}L${x - 5} ${y + 4}Z`, class: cls }, group);
}

/** Draw `rows` ({number, nodes, verdict, best_size}) into `container`; `before` is the original size. */
export function drawChart(container, rows, before) {
  const maxNodes = Math.max(before || 0, ...rows.map((r) => r.nodes), 1);
  const maxIter = Math.max(rows.length ? rows[rows.length - 1].number : 1, 1);
  const plotW = WIDTH - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const x = (n) => PAD.left + (maxIter <= 1 ? plotW / 2 : ((n - 1) / (maxIter - 1)) * plotW);
  const y = (v) => PAD.top + plotH - (v / maxNodes) * plotH;
  const root = svg("svg", {
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    class: "chart-svg",
    role: "img",
    "aria-label": t("chart.aria", { n: rows.length, best: bestOf(rows) ?? "–" }),
  });
  const axes = svg("g", { class: "axes" }, root);
  for (const v of ticks(maxNodes, 4)) {
    svg("line", { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(v), y2: y(v), class: "grid" }, axes);
    svg("text", { x: PAD.left - 6, y: y(v) + 4, "text-anchor": "end" }, axes).textContent = String(v);
  }
  for (const n of ticks(maxIter - 1, 6).map((v) => v + 1)) {
    svg("text", { x: x(n), y: HEIGHT - PAD.bottom + 16, "text-anchor": "middle" }, axes).textContent = String(n);
  }
  svg("text", { x: PAD.left, y: HEIGHT - 2, class: "axis-title" }, axes).textContent = t("chart.x");
  const best = bestSteps(rows);
  if (best.length) {
    let d = `M${x(best[0].number)} ${y(best[0].best)}`;
    for (const r of best.slice(1)) d += ` H${x(r.number)} V${y(r.best)}`;
    svg("path", { d, class: "best-line" }, root);
  }
  const marks = svg("g", { class: "marks" }, root);
  for (const row of rows) {
    const verdict = VERDICTS.includes(row.verdict) ? row.verdict : "pending";
    const element = mark(marks, verdict, x(row.number), y(row.nodes));
    svg("title", {}, element).textContent = t("chart.point", {
      number: row.number,
      nodes: row.nodes,
      verdict: t(`verdict.${verdict}`),
    });
  }
  container.replaceChildren(root);
}

/** The smallest failing size known at each row, in iteration order: it never rises. A row's own
 * best_size is the best when its verdict was recorded, and verdicts are not recorded in iteration
 * order (checks run ahead on other slots finish later; a cached verdict keeps the number of the
 * last check run), so a later iteration may carry an older, larger best. */
export function bestSteps(rows) {
  const steps = [];
  let best = Infinity;
  for (const row of rows) {
    if (row.best_size === null || row.best_size === undefined) continue;
    best = Math.min(best, row.best_size);
    steps.push({ number: row.number, best });
  }
  return steps;
}

function bestOf(rows) {
  const steps = bestSteps(rows);
  return steps.length ? steps[steps.length - 1].best : null;
}

/** The legend: one entry per verdict shape and colour, and the best-size line. */
export function drawLegend(container) {
  const items = ["fail", "pass", "timeout", "crash", "infra-error"].map((verdict) => {
    const item = document.createElement("span");
    item.className = "legend-item";
    const icon = svg("svg", { viewBox: "-6 -6 12 12", width: 12, height: 12, "aria-hidden": "true" });
    mark(icon, verdict, 0, 0);
    item.append(icon, ` ${t(`verdict.${verdict}`)}`);
    return item;
  });
  const line = document.createElement("span");
  line.className = "legend-item";
  const icon = svg("svg", { viewBox: "0 0 16 12", width: 16, height: 12, "aria-hidden": "true" });
  svg("path", { d: "M0 6H16", class: "best-line" }, icon);
  line.append(icon, ` ${t("chart.best")}`);
  container.replaceChildren(...items, line);
}
