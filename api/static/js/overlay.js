// The error overlay of the graph drawings: a compare/golden job's per-tensor errors from its
// localisation step (GET /v1/jobs/{id}/node-errors) mapped onto a graph's nodes (a node takes its
// worst output) and a colour scale: a log scale from the smallest to the largest finite error of
// the measured nodes, and a colour of its own for non-finite values (inf/NaN: an overflow).

import { t } from "./i18n.js";

// light yellow -> orange -> red -> dark red (sequential, readable with dark text up to red)
const STOPS = [[255, 244, 194], [253, 174, 97], [215, 48, 31], [127, 0, 0]];
export const NONFINITE_COLOUR = "#4a148c";
const DARK_FROM = 0.62; // from this position on the scale, labels are drawn light

/** A number as the overlay shows it: 4 significant digits, exponent for the very large or small. */
export function errorNumber(value) {
  if (value === null || value === undefined) return "–";
  if (value === 0) return "0";
  const size = Math.abs(value);
  return size >= 1e4 || size < 1e-3 ? value.toExponential(2) : String(Number(value.toPrecision(4)));
}

/** The colour at position `at` (0..1) on the scale, as `rgb(...)`. */
export function scaleColour(at) {
  const x = Math.min(Math.max(at, 0), 1) * (STOPS.length - 1);
  const i = Math.min(Math.floor(x), STOPS.length - 2);
  const f = x - i;
  const mix = STOPS[i].map((c, k) => Math.round(c + (STOPS[i + 1][k] - c) * f));
  return `rgb(${mix.join(",")})`;
}

/** The CSS gradient of the legend's scale bar. */
export function scaleGradient() {
  return `linear-gradient(to right, ${STOPS.map((s) => `rgb(${s.join(",")})`).join(", ")})`;
}

/** Whether overlay entry `a` is worse than `b`. */
export const worse = (a, b) => {
  // non-finite, then not comparable, then the larger value
  const rank = (e, v) => (e.nonfinite ? 3 : v === null ? 2 : 1);
  if (rank(a.entry, a.value) !== rank(b.entry, b.value)) return rank(a.entry, a.value) > rank(b.entry, b.value);
  return (a.value ?? 0) > (b.value ?? 0);
};

/** The overlay of `doc` (node-errors) on `graph` by `metric`: per node id its worst output's
 * {entry, value, colour, dark, text}; the scale's ends (the same for every graph of the job);
 * null when no node of the graph is measured. */
export function buildOverlay(graph, doc, metric = "max_abs") {
  const byTensor = new Map(doc.tensors.map((e) => [e.tensor, e]));
  const byNode = new Map();
  for (const node of graph.nodes) {
    let worst = null;
    for (const name of node.outputs) {
      const entry = byTensor.get(name);
      if (!entry) continue;
      const candidate = { entry, value: entry.nonfinite ? null : entry[metric] };
      if (!worst || worse(candidate, worst)) worst = candidate;
    }
    if (worst) byNode.set(node.id, worst);
  }
  if (!byNode.size) return null;
  // one scale for every graph of the job: the ends come from all the tensors measured
  const finite = doc.tensors.map((e) => (e.nonfinite ? null : e[metric])).filter((v) => v !== null && v > 0);
  const lo = finite.length ? Math.min(...finite) : 0;
  const hi = finite.length ? Math.max(...finite) : 0;
  const span = hi > lo ? Math.log10(hi) - Math.log10(lo) : 0;
  for (const info of byNode.values()) {
    if (info.entry.nonfinite) {
      Object.assign(info, { colour: NONFINITE_COLOUR, dark: true });
    } else if (info.value === null) {
      Object.assign(info, { colour: "#9e9e9e", dark: false });
    } else {
      const at = info.value <= 0 ? 0 : span > 0 ? (Math.log10(info.value) - Math.log10(lo)) / span : 1;
      Object.assign(info, { colour: scaleColour(at), dark: at >= DARK_FROM, at });
    }
    info.text = errorLine(info.entry);
  }
  return { byNode, lo, hi, metric, doc };
}

/** What one tensor's error says, in words (the tooltip and the hover box). */
export function errorLine(entry) {
  let text;
  if (entry.nonfinite) text = t("graphs.overlay.nonfinite");
  else if (entry.max_abs === null) text = t("graphs.overlay.incomparable");
  else text = t("graphs.overlay.value", { abs: errorNumber(entry.max_abs), rel: errorNumber(entry.max_rel) });
  return entry.beyond ? `${text} · ${t("graphs.overlay.beyond")}` : text;
}

/** Fill `box` with the legend of `overlay`: the scale bar with its ends, non-finite, not measured. */
export function drawOverlayLegend(box, overlay) {
  box.replaceChildren();
  if (!overlay) return;
  const item = (...children) => {
    const span = document.createElement("span");
    span.className = "legend-item";
    span.append(...children);
    return span;
  };
  const text = (value, className = "") => {
    const span = document.createElement("span");
    if (className) span.className = className;
    span.textContent = value;
    return span;
  };
  const bar = document.createElement("span");
  bar.className = "error-scale";
  bar.style.background = scaleGradient();
  const metric = t(overlay.metric === "max_rel" ? "graphs.overlay.metric.max_rel" : "graphs.overlay.metric.max_abs");
  box.append(
    item(text(`${metric}:`), text(errorNumber(overlay.lo), "error-lo"), bar, text(errorNumber(overlay.hi), "error-hi")),
  );
  const nonfinite = text("", "swatch");
  nonfinite.style.background = NONFINITE_COLOUR;
  box.append(item(nonfinite, text(t("graphs.overlay.nonfinite"))));
  const none = text("", "swatch none");
  box.append(item(none, text(t("graphs.overlay.none"))));
  const note = overlay.doc.truncated
    ? t("graphs.overlay.truncated", { k: overlay.doc.tensors.length, n: overlay.doc.total })
    : t("graphs.overlay.sample", { sample: overlay.doc.sample });
  box.append(item(text(note, "muted")));
}
