// The error overlay of the graph drawings: a compare/golden job's per-tensor errors from its
// localisation step (GET /v1/jobs/{id}/node-errors) mapped onto a graph's nodes (a node takes its
// worst output) and a colour scale anchored at the check spec's tolerance: errors within it in
// neutral greys (log scale from the smallest measured error up to the tolerance), errors beyond it
// in the warm scale (from the tolerance up to the largest measured error); a colour of its own for
// non-finite values (inf/NaN: an overflow). Within or beyond is the check's own verdict on the
// tensor (Polygraphy's rule: beyond when the error passes both atol and rtol).

import { t } from "./i18n.js";

// within tolerance: near-white -> slate grey (dark text stays readable on every one)
const NEUTRAL = [[246, 247, 249], [150, 163, 181]];
// beyond tolerance: yellow -> orange -> red -> dark red (sequential, warm from its first step)
const STOPS = [[254, 217, 118], [253, 174, 97], [215, 48, 31], [127, 0, 0]];
export const NONFINITE_COLOUR = "#4a148c";
const DARK_FROM = 0.62; // from this position on the warm scale, labels are drawn light

/** A number as the overlay shows it: 4 significant digits, exponent for the very large or small. */
export function errorNumber(value) {
  if (value === null || value === undefined) return "–";
  if (value === 0) return "0";
  const size = Math.abs(value);
  return size >= 1e4 || size < 1e-3 ? value.toExponential(2) : String(Number(value.toPrecision(4)));
}

function mixAt(stops, at) {
  const x = Math.min(Math.max(at, 0), 1) * (stops.length - 1);
  const i = Math.min(Math.floor(x), stops.length - 2);
  const f = x - i;
  const mix = stops[i].map((c, k) => Math.round(c + (stops[i + 1][k] - c) * f));
  return `rgb(${mix.join(",")})`;
}

/** The colour at position `at` (0..1) on the warm scale (beyond tolerance), as `rgb(...)`. */
export const scaleColour = (at) => mixAt(STOPS, at);

/** The colour at position `at` (0..1) on the neutral scale (within tolerance), as `rgb(...)`. */
export const neutralColour = (at) => mixAt(NEUTRAL, at);

/** The CSS gradient of the legend's warm scale bar (or its neutral one). */
export function scaleGradient(neutral = false) {
  const stops = neutral ? NEUTRAL : STOPS;
  return `linear-gradient(to right, ${stops.map((s) => `rgb(${s.join(",")})`).join(", ")})`;
}

/** The tolerance the scale is anchored at for `metric` (atol for max_abs, rtol for max_rel) of
 * tensor `name` (a graph output may have its own); null without one. */
export function toleranceOf(doc, metric, name = "") {
  const tolerance = doc.tolerance;
  if (!tolerance) return null;
  const own = (tolerance.per_output || {})[name];
  const pick = own || tolerance;
  return metric === "max_rel" ? pick.rtol : pick.atol;
}

/** Where `value` sits between `lo` and `hi` on a log scale (0..1); `whenEqual` for lo == hi. */
function logPosition(value, lo, hi, whenEqual) {
  if (!(value > 0) || !(lo > 0) || !(hi > lo)) return value >= hi && hi > 0 ? whenEqual : 0;
  return Math.min(Math.max((Math.log10(value) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo)), 0), 1);
}

/** Whether overlay entry `a` is worse than `b`. */
export const worse = (a, b) => {
  // non-finite, then not comparable, then the larger value
  const rank = (e, v) => (e.nonfinite ? 3 : v === null ? 2 : 1);
  if (rank(a.entry, a.value) !== rank(b.entry, b.value)) return rank(a.entry, a.value) > rank(b.entry, b.value);
  return (a.value ?? 0) > (b.value ?? 0);
};

/** The overlay of `doc` (node-errors) on `graph` by `metric`: per node id its worst output's
 * {entry, value, colour, dark, text, beyond}; the scale's ends and its anchor (the same for every
 * graph of the job): lo (the smallest finite error), tol (the spec's tolerance for the metric, or
 * null), hi (the largest); null when no node of the graph is measured. */
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
  // one scale for every graph of the job: its ends come from all the tensors measured, its middle
  // is the tolerance (without one, the largest error within tolerance)
  const finite = doc.tensors.filter((e) => !e.nonfinite && e[metric] !== null && e[metric] > 0);
  const values = finite.map((e) => e[metric]);
  const lo = values.length ? Math.min(...values) : 0;
  const hi = values.length ? Math.max(...values) : 0;
  const within = finite.filter((e) => !e.beyond).map((e) => e[metric]);
  const tol = toleranceOf(doc, metric);
  const anchor = tol !== null && tol > 0 ? tol : within.length ? Math.max(...within) : lo;
  const beyondValues = finite.filter((e) => e.beyond).map((e) => e[metric]);
  const top = Math.max(hi, anchor);
  const bottom = Math.min(lo, anchor);
  for (const info of byNode.values()) {
    info.beyond = Boolean(info.entry.beyond);
    if (info.entry.nonfinite) {
      Object.assign(info, { colour: NONFINITE_COLOUR, dark: true });
    } else if (info.value === null) {
      Object.assign(info, { colour: "#9e9e9e", dark: false });
    } else if (info.beyond) {
      // the warm scale runs from the tolerance (its first step) to the largest error
      const from = beyondValues.length ? Math.min(anchor, ...beyondValues) : anchor;
      const at = logPosition(info.value, from, top, 1);
      Object.assign(info, { colour: scaleColour(at), dark: at >= DARK_FROM, at });
    } else {
      const at = logPosition(info.value, bottom, anchor, 1);
      Object.assign(info, { colour: neutralColour(at), dark: false, at });
    }
    info.text = errorLine(info.entry);
  }
  return { byNode, lo, hi, tol, anchor, metric, doc };
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
  const bar = (neutral) => {
    const span = document.createElement("span");
    span.className = neutral ? "error-scale neutral" : "error-scale";
    span.style.background = scaleGradient(neutral);
    return span;
  };
  const metric = t(overlay.metric === "max_rel" ? "graphs.overlay.metric.max_rel" : "graphs.overlay.metric.max_abs");
  const value = errorNumber(overlay.tol);
  const anchor = overlay.tol === null
    ? t("graphs.overlay.tolerance.none")
    : overlay.metric === "max_rel" ? t("graphs.overlay.tolerance.rtol", { value }) : t("graphs.overlay.tolerance.atol", { value });
  const tolerance = text(anchor, "error-tol");
  // within tolerance: lo .. tolerance in greys; beyond: tolerance .. hi in warm colours
  box.append(
    item(
      text(`${metric}:`),
      text(errorNumber(Math.min(overlay.lo, overlay.anchor)), "error-lo"),
      bar(true),
      tolerance,
      bar(false),
      text(errorNumber(Math.max(overlay.hi, overlay.anchor)), "error-hi"),
    ),
  );
  box.append(item(text(t("graphs.overlay.scale"), "muted")));
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
