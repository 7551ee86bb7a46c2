// One job: its facts, the live chart and iteration table (from the event stream, which replays the
// job's history first), the checks in flight, cancel with a confirmation, downloads, and when it
// ends the min-bad and min-good graphs side by side with a summary in plain words. An interactive
// job (check spec `kind: interactive`) asks here for a verdict on each iteration's model.

import { ApiError, NoTokenError, api, getJson, saveResponse } from "./api.js";
import { drawChart, drawLegend } from "./chart.js";
import { follow } from "./events.js";
import { drawGraph, graphTable } from "./graph.js";
import { buildOverlay, drawOverlayLegend } from "./overlay.js";
import { formatDate, formatNumber, setRich, t } from "./i18n.js";
import {
  $, TERMINAL, badge, cell, clearError, formatBytes, formatSeconds, secondsBetween, session, setState, showError, signInHint,
} from "./ui.js";

const REFRESH_MS = 1500;
const SUMMARY_NAMES = 6;
// the status each status event gives the job (job.finishing: its answer is being stored and verified)
const STATUS_OF_EVENT = { "job.queued": "queued", "job.started": "running", "job.finishing": "finishing" };
let current = null;

const jobPath = (state, rest = "") => `/v1/jobs/${encodeURIComponent(state.id)}${rest}`;

export function closeJob() {
  if (!current) return;
  current.controller.abort();
  clearTimeout(current.refreshTimer);
  clearInterval(current.clock);
  current = null;
}

export function openJob(id) {
  closeJob();
  const state = {
    id,
    controller: new AbortController(),
    job: null,
    rows: new Map(),
    ended: false,
    refreshTimer: null,
    lastRefresh: 0,
    chartQueued: false,
    graphsLoaded: false,
    graphs: null,
    clock: null,
    awaiting: null, // the iteration an interactive job asks about: {iteration, phase, nodes, artifact}
    answering: false,
    flights: new Map(), // checks started (check_started events) and not yet finished, by iteration
  };
  current = state;
  document.title = `${t("job.heading")} ${id} · onnx-reducer`;
  $("job-id").textContent = id;
  $("job-card").hidden = true;
  $("job-missing").hidden = true;
  $("iterations-body").replaceChildren();
  $("graphs").hidden = true;
  $("job-summary").hidden = true;
  $("stream-state").textContent = "";
  $("verdict-panel").hidden = true;
  $("verdict-state").textContent = "";
  drawLegend($("chart-legend"));
  drawChart($("chart"), [], null);
  const hint = signInHint();
  if (hint) {
    missing(hint, false);
    return;
  }
  load(state);
}

async function load(state) {
  if (!(await refresh(state))) return;
  $("job-card").hidden = false;
  state.clock = setInterval(() => renderClock(state), 1000);
  follow(jobPath(state, "/events"), state.controller.signal, {
    isOver: () => state.ended,
    onEvent: (event) => onEvent(state, event),
    onGap: () => refresh(state),
    onState: (kind, info) => {
      if (current !== state) return;
      if (kind === "live") $("stream-state").textContent = t("stream.live");
      else if (kind === "waiting") $("stream-state").textContent = t("stream.waiting", { s: info.seconds });
      else if (kind === "stopped") {
        $("stream-state").textContent = t("stream.stopped");
        showError(info.error);
      }
    },
  }).then(() => {
    if (current === state && state.ended) $("stream-state").textContent = t("stream.ended");
  });
}

function missing(text, withLink = true) {
  setRich($("job-missing-text"), text);
  $("job-missing").querySelector("a").parentElement.hidden = !withLink;
  $("job-missing").hidden = false;
  $("job-card").hidden = true;
}

/** GET the job and render it; false when there is nothing to show (404, no token, refused). */
async function refresh(state) {
  state.lastRefresh = Date.now();
  try {
    const job = await getJson(jobPath(state), { signal: state.controller.signal });
    if (current !== state) return false;
    state.job = job;
    state.awaiting = job.awaiting_verdict || null;
    state.flights.clear();
    if (TERMINAL.has(job.status)) state.ended = true;
    render(state);
    return true;
  } catch (err) {
    if (current !== state || (err && err.name === "AbortError")) return false;
    if (err instanceof ApiError && err.status === 404) {
      missing(t("job.missing", { id: state.id }));
      state.ended = true;
      return false;
    }
    if (err instanceof NoTokenError || (err instanceof ApiError && err.status === 401)) {
      if (err instanceof ApiError) session.state = "refused";
      missing(signInHint(), false);
      state.ended = true;
      return false;
    }
    // a network failure while the page already shows the job: the event stream's state says
    // "reconnecting", and the next refresh brings the facts up to date
    if (!(err instanceof TypeError && state.job)) showError(err);
    return state.job !== null;
  }
}

function scheduleRefresh(state) {
  if (state.refreshTimer) return;
  const wait = Math.max(0, REFRESH_MS - (Date.now() - state.lastRefresh));
  state.refreshTimer = setTimeout(() => {
    state.refreshTimer = null;
    if (current === state) refresh(state);
  }, wait);
}

export function rerenderJob() {
  if (!current) return;
  drawLegend($("chart-legend"));
  if (current.job) render(current);
  for (const data of current.rows.values()) addRow(current, data.data);
  queueChart(current);
  if (current.graphs) showGraphs(current, current.graphs);
}

/** The checks running now: the job's `checks_in_flight` (when the server reports them), those
 * started since (check_started events), and the check an interactive job awaits a verdict for. */
function flights(state) {
  const job = state.job;
  const listed = Array.isArray(job.checks_in_flight) ? job.checks_in_flight : [];
  const byNumber = new Map(listed.map((f) => [f.iteration, f]));
  for (const [number, flight] of state.flights) byNumber.set(number, flight);
  if (state.awaiting && !TERMINAL.has(job.status)) {
    byNumber.set(state.awaiting.iteration, { ...state.awaiting, worker: null, you: true, started_at: state.awaiting.asked_at });
  }
  for (const number of finishedFlights(state)) byNumber.delete(number);
  return [...byNumber.values()].sort((a, b) => a.iteration - b.iteration);
}

/** The in-flight numbers of the checks already recorded: an iteration is numbered when its verdict
 * is recorded (no gaps), so a check runs under the number it was queued with (`started_as`). */
function finishedFlights(state) {
  const checked = [...state.rows.values()].filter(({ data }) => !data.cached); // a cached answer never ran
  return new Set(checked.map(({ data }) => data.started_as ?? data.number));
}

function inFlight(state) {
  const count = flights(state).length;
  const value = state.job.progress?.in_flight;
  return typeof value === "number" ? Math.max(value, count) : count;
}

function renderFlights(state) {
  const list = TERMINAL.has(state.job.status) ? [] : flights(state);
  const items = list.map((flight) => {
    const item = document.createElement("li");
    item.dataset.iteration = String(flight.iteration);
    const worker = flight.you ? t("flight.you") : flight.worker || t("flight.unknown");
    let text =
      flight.phase === "layerwise" // no iteration number or candidate: the whole model, once
        ? t("flight.layerwise", { worker })
        : t("flight.item", { number: flight.iteration, phase: flight.phase, nodes: flight.nodes, worker });
    const since = secondsBetween(flight.started_at, null);
    if (since !== null) text += ` · ${t("flight.since", { time: formatSeconds(since) })}`;
    item.textContent = text;
    return item;
  });
  $("job-flight-list").replaceChildren(...items);
  $("job-flight-label").textContent = t("flight.label", { n: list.length });
  $("job-flight").hidden = list.length === 0;
  $("job-flight-label").hidden = list.length === 0;
}

function renderVerdict(state) {
  const awaiting = state.job.status === "running" ? state.awaiting : null;
  $("verdict-panel").hidden = !awaiting;
  if (!awaiting) return;
  setRich($("verdict-heading"), t("answer.heading", { number: awaiting.iteration, nodes: awaiting.nodes }));
  for (const id of ["verdict-fail", "verdict-pass", "verdict-download"]) $(id).disabled = state.answering;
}

async function answer(verdict) {
  const state = current;
  if (!state || !state.awaiting || state.answering) return;
  const number = state.awaiting.iteration;
  state.answering = true;
  renderVerdict(state);
  $("verdict-state").textContent = t("answer.sending");
  clearError();
  try {
    const body = JSON.stringify({ iteration: number, verdict });
    const job = await getJson(jobPath(state, "/verdict"), {
      method: "POST", headers: { "Content-Type": "application/json" }, body,
    });
    if (current !== state) return;
    const label = t(verdict === "fail" ? "answer.fail" : "answer.pass");
    $("verdict-state").textContent = t("answer.answered", { number, verdict: label });
    state.job = job;
    state.awaiting = job.awaiting_verdict || null;
    if (TERMINAL.has(job.status)) state.ended = true;
    state.answering = false;
    render(state);
    if (state.awaiting) $("verdict-heading").focus();
  } catch (err) {
    state.answering = false;
    $("verdict-state").textContent = "";
    showError(err);
    if (current === state) refresh(state);
  }
}

function localization(job) {
  const value = job.localization ?? job.progress?.localization;
  if (!value) return "";
  if (typeof value === "string") return value;
  const parts = [value.path, value.reason].filter(Boolean);
  if (typeof value.checks === "number") parts.push(t("job.localization.checks", { n: value.checks }));
  return parts.join(" · ");
}

function flakiness(job) {
  const value = job.flakiness ?? job.flaky ?? job.original_failure_rate ?? job.progress?.flakiness;
  if (value === undefined || value === null || value === false) return "";
  const rate = typeof value === "number" ? value : value.rate ?? value.failure_rate;
  if (typeof rate === "number" && rate < 1) return t("job.flaky.rate", { percent: formatNumber(rate * 100) });
  if (typeof value === "object" && value.detail) return String(value.detail);
  return typeof value === "string" ? value : "";
}

/** How each final model was verified (GET /v1/jobs/{id} ``verified``): judged, rechecked, disagrees. */
function verification(job) {
  if (!job.verified) return "";
  const parts = [];
  if (job.verified.min_bad) parts.push(`${t("job.verified.min_bad")}: ${verifiedStatus(job.verified.min_bad.status)}`);
  if (job.verified.min_good) parts.push(`${t("job.verified.min_good")}: ${verifiedStatus(job.verified.min_good.status)}`);
  return parts.join(" · ");
}

function verifiedStatus(status) {
  if (status === "judged") return t("job.verified.judged");
  if (status === "rechecked") return t("job.verified.rechecked");
  if (status === "not-rechecked") return t("job.verified.not_rechecked");
  return t("job.verified.disagrees");
}

/** The check fails whatever the model (``suspect``): one sentence, and the original's failure output. */
function renderSuspect(job) {
  const suspect = job.suspect;
  $("job-suspect").hidden = !suspect;
  if (!suspect) return;
  const crash = suspect.crash ? ` (${suspect.crash})` : "";
  fact("job-suspect-text", `${t("job.suspect")}${crash}`);
  fact("job-suspect-output", suspect.output || "");
}

/** The input samples the check judged and which fail: the original's and the best model's. */
function samples(job) {
  const report = job.samples;
  if (!report || !report.original) return "";
  const describe = (r) =>
    r.failing.length
      ? t("job.samples.failing", { failing: r.failing.join(", "), judged: r.judged })
      : t("job.samples.none", { judged: r.judged });
  const parts = [t("job.samples.original", { text: describe(report.original) })];
  if (report.min_bad) parts.push(t("job.samples.best", { text: describe(report.min_bad) }));
  return parts.join(" · ");
}

function bestSoFar(state) {
  let best = null;
  for (const { data } of state.rows.values()) {
    // a cached answer has no model of its own: the best so far is a checked one (as the server's)
    if (data.reproduces && !data.cached && !data.late && (!best || data.nodes < best.nodes)) best = data;
  }
  return best;
}

function fact(id, text) {
  $(id).textContent = text;
}

function optionalFact(id, text) {
  $(id).textContent = text;
  $(id).hidden = !text;
  $(`${id}-label`).hidden = !text;
}

// the job's labels (the CI run it came from, --label pairs) as "key value" chips, and the CI
// run's page as a link (http and https only)
const RUN_URL = "run_url";

function renderLabels(job) {
  const labels = job.labels || {};
  const keys = Object.keys(labels).filter((key) => key !== RUN_URL);
  const box = $("job-labels");
  box.replaceChildren();
  for (const key of keys) {
    const chip = document.createElement("span");
    chip.className = "label-chip";
    chip.dataset.key = key;
    const name = document.createElement("b");
    name.textContent = key;
    chip.append(name, ` ${labels[key]}`);
    box.append(chip);
  }
  const run = labels[RUN_URL] || "";
  if (/^https?:\/\//i.test(run)) {
    const link = document.createElement("a");
    link.id = "job-run-link";
    link.href = run;
    link.target = "_blank";
    link.rel = "noopener noreferrer";
    link.textContent = t("job.labels.run");
    box.append(link);
  }
  const shown = box.childElementCount > 0;
  box.hidden = !shown;
  $("job-labels-label").hidden = !shown;
}

function render(state) {
  const job = state.job;
  badge($("job-status"), job.status);
  fact("job-model", `${job.model.filename} (${formatBytes(job.model.size)})`);
  fact("job-mode", `${job.mode} · ${job.check_kind}`);
  fact("job-nodes-before", job.nodes_before ?? "–");
  fact("job-nodes-after", job.nodes_after ?? "–");
  fact("job-best", job.progress.best_size ?? "–");
  fact("job-checks", flyingChecks(state));
  optionalFact("job-iterations", iterationsNote(job.progress));
  fact("job-per-check", formatSeconds(job.progress.mean_check_s));
  fact("job-eta", job.status === "running" ? formatSeconds(job.progress.eta_s) : "–");
  fact("job-started", formatDate(job.started_at));
  renderClock(state);
  renderLabels(job);
  optionalFact("job-waiting", job.status === "queued" ? job.waiting_reason || "" : "");
  optionalFact("job-localization", localization(job));
  optionalFact("job-flaky", flakiness(job));
  optionalFact("job-samples", samples(job));
  optionalFact("job-keep-fp32", keptFp32(job));
  renderReleases(job);
  optionalFact("job-passes", passesAnswer(job));
  optionalFact("job-verified", verification(job));
  renderSuspect(job);
  if (job.error) {
    fact("job-error", `${job.error.code}${job.error.message ? `: ${job.error.message}` : ""}`);
    $("job-error").hidden = false;
  } else {
    $("job-error").hidden = true;
  }
  renderFlights(state);
  renderVerdict(state);
  renderButtons(state);
  renderSummary(state);
  if (isPrecision(job) || isReleases(job)) return; // no min-bad / min-good graphs: the answer is a list
  if (job.status === "succeeded" && !state.graphsLoaded) loadGraphs(state, true);
  if ((job.status === "cancelled" || job.status === "failed") && !state.graphsLoaded && bestSoFar(state)) {
    loadGraphs(state, false);
  }
}

function renderClock(state) {
  if (!state.job || current !== state) return;
  fact("job-duration", formatSeconds(secondsBetween(state.job.started_at, state.job.finished_at)));
}

/** A precision job finds the nodes that must stay fp32; its model is the "mixed" artifact. */
function isPrecision(job) {
  return job.task === "precision";
}

function keptFp32(job) {
  if (!isPrecision(job) || job.status !== "succeeded" || !job.keep_fp32) return "";
  return job.keep_fp32.length ? job.keep_fp32.join(", ") : t("job.keep_fp32.none");
}

/** A bisect-releases job finds the first onnxruntime release that fails; it makes no model. */
function isReleases(job) {
  return job.task === "bisect-releases";
}

// the releases in order as a strip of pass / fail / not run, and the answer naming both releases
function renderReleases(job) {
  const view = isReleases(job) ? job.releases : null;
  const strip = $("job-releases-strip");
  strip.replaceChildren();
  $("job-releases").hidden = !view;
  $("job-releases-label").hidden = !view;
  if (!view) return;
  for (const item of view.strip) {
    const cell = document.createElement("li");
    cell.className = `release-cell release-${item.state}`;
    cell.dataset.release = item.release;
    cell.dataset.state = item.state;
    cell.textContent = item.release;
    cell.title = `${item.release}: ${t(`job.releases.state.${item.state}`)}`;
    strip.append(cell);
  }
  $("job-releases-answer").textContent = releasesAnswer(view);
}

function releasesAnswer(view) {
  const checks = t("job.releases.checks", { n: view.checks, max: view.max_checks, runs: view.runs });
  if (!view.done) return `${t("job.releases.running")} ${checks}`;
  const text = {
    found: () => t("job.releases.found", { first: view.first_failing, last: view.last_passing }),
    "all-fail": () => t("job.releases.all_fail", { first: view.first_failing }),
    "newest-passes": () => t("job.releases.newest_passes", { newest: view.releases[view.releases.length - 1] }),
  }[view.outcome];
  const flaky = view.flaky ? ` ${t("job.releases.flaky", { p: Math.round((100 * view.failure_rate.failures) / view.failure_rate.runs) })}` : "";
  return `${text ? text() : ""} ${checks}${flaky}`;
}

/** A bisect-passes job finds the runtime optimizers the failure needs; it makes no model. */
function isPasses(job) {
  return job.task === "bisect-passes";
}

// the optimizers to disable and the level the failure first appears at, or the probes so far
function passesAnswer(job) {
  const view = isPasses(job) ? job.passes : null;
  if (!view) return "";
  if (!view.done) return t("job.passes.running", { n: view.checks });
  const checks = t("job.passes.checks", { n: view.checks, candidates: view.candidates.length });
  const text = {
    optimizers: () => {
      const values = { names: view.optimizers.join(", "), level: view.first_failing_level || "-" };
      return view.verified ? t("job.passes.found", values) : t("job.passes.unverified", values);
    },
    "no-optimizer": () => t("job.passes.no_optimizer"),
    "no-failure": () => t("job.passes.no_failure"),
    unresolved: () => t("job.passes.unresolved"),
  }[view.outcome];
  return `${text ? text() : view.message} ${checks}${view.flaky_note ? ` ${view.flaky_note}` : ""}`;
}

function renderButtons(state) {
  const status = state.job.status;
  const precision = isPrecision(state.job) || isReleases(state.job) || isPasses(state.job);
  $("download-min-bad").hidden = precision;
  $("download-min-good").hidden = precision;
  $("download-mixed").hidden = !isPrecision(state.job);
  $("download-bundle").hidden = precision;
  $("download-bundle").disabled = status !== "succeeded";
  $("download-mixed").disabled = status !== "succeeded";
  const best = bestSoFar(state);
  const early = status === "cancelled" || status === "failed";
  const minBad = $("download-min-bad");
  minBad.disabled = !(status === "succeeded" || (early && best));
  setRich(minBad, early && best ? t("job.download.best", { n: best.nodes }) : t("job.download.min_bad"));
  $("download-min-good").disabled = status !== "succeeded" || (state.graphs && !state.graphs.good);
  $("download-original").disabled = false;
  $("cancel-job").disabled = TERMINAL.has(status);
}

function summaryList(nodes) {
  const shown = nodes.slice(0, SUMMARY_NAMES).map((n) => `\`${n.name || n.id}\` (${n.op})`).join(", ");
  return nodes.length > SUMMARY_NAMES ? `${shown} ${t("summary.more", { k: nodes.length - SUMMARY_NAMES })}` : shown;
}

function renderSummary(state) {
  const job = state.job;
  let text = "";
  const graphs = state.graphs;
  if (job.status === "succeeded" && graphs && graphs.bad && !graphs.bad.truncated) {
    const bad = graphs.bad.nodes;
    const good = graphs.good && !graphs.good.truncated ? graphs.good : null;
    const goodIds = new Set(good ? good.nodes.map((n) => n.id) : []);
    const only = bad.filter((n) => !goodIds.has(n.id));
    if (bad.length === 1) {
      const key = good ? "summary.single" : "summary.single_no_good";
      text = t(key, { name: bad[0].name || bad[0].id, op: bad[0].op });
    } else if (good) {
      text = t("summary.many", { n: bad.length, m: good.nodes.length, k: only.length, list: summaryList(only) });
    } else {
      text = t("summary.no_good", { n: bad.length, list: summaryList(bad) });
    }
  } else if (job.status === "cancelled" || job.status === "failed") {
    const best = bestSoFar(state);
    text = best ? t("summary.best_so_far", { n: best.nodes, number: best.number }) : t("summary.nothing_yet");
  }
  setState($("job-summary"), text);
}

// -- live events ---------------------------------------------------------------------------------

function onEvent(state, event) {
  if (current !== state) return;
  let data;
  try {
    data = JSON.parse(event.data);
  } catch {
    return;
  }
  if (event.type === "iteration") {
    addRow(state, data);
    queueChart(state);
    state.flights.delete(data.started_as ?? data.number);
    if (state.awaiting && state.awaiting.iteration === data.number) state.awaiting = null;
    if (state.job) {
      renderFlights(state);
      renderVerdict(state);
    }
    if (state.job) {
      // an iteration answered from a cache ran no check: the checks are the others
      const cached = [...state.rows.values()].filter((r) => r.data.cached).length;
      if (!data.cached) state.job.progress.checks_run = Math.max(state.job.progress.checks_run, data.number - cached);
      if (data.best_size !== null && data.best_size !== undefined) {
        // the best never rises: an event of an earlier check that finished late carries an older best
        const known = state.job.progress.best_size;
        state.job.progress.best_size = known === null || known === undefined ? data.best_size : Math.min(known, data.best_size);
      }
      fact("job-checks", flyingChecks(state));
      fact("job-best", state.job.progress.best_size ?? "–");
    }
    if (!state.ended) scheduleRefresh(state);
  } else if (["verdict.needed", "check_started", "check.started"].includes(event.type)) {
    if (state.ended || finishedFlights(state).has(data.iteration)) return;
    if (event.type === "verdict.needed") state.awaiting = data;
    else {
      state.flights.set(data.iteration, data);
      // a started check is known from its event until the job is read again; a check that ends
      // without an iteration (the layerwise run) leaves the list then, not at the next iteration
      if (!state.ended) scheduleRefresh(state);
    }
    if (state.job) {
      fact("job-checks", flyingChecks(state));
      renderFlights(state);
      renderVerdict(state);
    }
  } else if (Object.hasOwn(STATUS_OF_EVENT, event.type)) {
    if (state.job && !state.ended) {
      state.job.status = STATUS_OF_EVENT[event.type];
      badge($("job-status"), state.job.status);
    }
    scheduleRefresh(state);
  } else if (["job.succeeded", "job.failed", "job.cancelled"].includes(event.type)) {
    state.ended = true;
    clearTimeout(state.refreshTimer);
    state.refreshTimer = null;
    refresh(state);
  }
}

/** The iterations, said (and why) only where their count differs from the checks run: a verdict
 * from a cache is an iteration without a check run; a flaky answer's re-checks and checks run
 * ahead, then not needed, are check runs without an iteration of their own. */
function iterationsNote(progress) {
  const iterations = progress.iteration || 0;
  if (!iterations || iterations === progress.checks_run) return "";
  return t("job.iterations.differ", { n: iterations, checks: progress.checks_run, cached: progress.cache_hits || 0 });
}

function flyingChecks(state) {
  const flying = inFlight(state);
  const checks = state.job.progress.checks_run;
  const hits = state.job.progress.cache_hits || 0;
  const counted = hits ? t("job.checks_cached", { n: checks, k: hits }) : String(checks);
  return flying ? t("job.checks_in_flight", { n: counted, k: flying }) : counted;
}

function queueChart(state) {
  if (state.chartQueued) return;
  state.chartQueued = true;
  requestAnimationFrame(() => {
    state.chartQueued = false;
    if (current !== state) return;
    const rows = [...state.rows.values()].map((r) => r.data).sort((a, b) => a.number - b.number);
    drawChart($("chart"), rows, state.job ? state.job.nodes_before : null);
  });
}

// The phases the legend under the iterations table explains (index.html, i18n keys phase.NAME).
const PHASES = new Set([...document.querySelectorAll("#phase-legend dd[data-i18n]")].map((dd) => dd.dataset.i18n.slice(6)));

function addRow(state, data) {
  const row = document.createElement("tr");
  row.dataset.number = String(data.number);
  row.className = `v-${data.verdict}`;
  cell(row, String(data.number), "#", "num");
  const phase = document.createElement("code");
  phase.textContent = data.phase;
  if (PHASES.has(data.phase)) phase.title = t(`phase.${data.phase}`); // the legend below the table says them all
  cell(row, phase, t("iter.phase"));
  cell(row, String(data.nodes), t("iter.nodes"), "num");
  const verdict = document.createElement("span");
  verdict.className = `verdict v-${data.verdict}`;
  verdict.textContent =
    t(`verdict.${data.verdict}`) + (data.reproduces ? ` · ${t("iter.reproduces")}` : "") + (data.late ? ` · ${t("iter.late")}` : "");
  if (data.late) verdict.title = t("iter.late.title");
  cell(row, verdict, t("iter.verdict"));
  cell(row, data.cached ? t(`iter.cached.${data.cached}`) : formatSeconds(data.duration_s), t("iter.duration"), "num");
  if (data.cached || data.late) {
    cell(row, "–", t("iter.model")); // answered from a cache (no check ran) or late (its model is not kept)
  } else {
    const model = document.createElement("button");
    model.type = "button";
    model.className = "link";
    model.textContent = t("iter.download", { number: data.number });
    model.addEventListener("click", () => download(`iteration-${data.number}`, model));
    cell(row, model, t("iter.model"));
  }
  const output = document.createElement("button");
  output.type = "button";
  output.className = "link";
  output.textContent = t("iter.output.show");
  output.setAttribute("aria-expanded", "false");
  output.addEventListener("click", () => toggleOutput(state, data.number, row, output));
  cell(row, output, t("iter.output"));
  const old = state.rows.get(data.number);
  if (old) {
    if (old.detail) old.detail.remove();
    old.row.replaceWith(row);
  } else {
    insertInOrder(state, row, data.number);
  }
  state.rows.set(data.number, { data, row, detail: null });
}

function insertInOrder(state, row, number) {
  const later = [...state.rows.entries()].filter(([n]) => n > number).sort((a, b) => a[0] - b[0])[0];
  if (later) later[1].row.before(row);
  else $("iterations-body").append(row);
}

async function toggleOutput(state, number, row, button) {
  const entry = state.rows.get(number);
  if (entry.detail) {
    entry.detail.remove();
    entry.detail = null;
    button.textContent = t("iter.output.show");
    button.setAttribute("aria-expanded", "false");
    return;
  }
  try {
    const page = await getJson(jobPath(state, `/iterations?after=${number - 1}&limit=1`));
    const item = page.items[0];
    const detail = document.createElement("tr");
    detail.className = "output-row";
    const td = document.createElement("td");
    td.colSpan = 7;
    const pre = document.createElement("pre");
    pre.className = "output";
    const lines = [item && item.detail, item && item.output_tail].filter(Boolean).join("\n");
    pre.textContent = lines || t("iter.output.empty");
    td.append(pre);
    detail.append(td);
    row.after(detail);
    entry.detail = detail;
    button.textContent = t("iter.output.hide");
    button.setAttribute("aria-expanded", "true");
  } catch (err) {
    showError(err);
  }
}

// -- downloads and cancel ------------------------------------------------------------------------

async function download(name, button) {
  if (!current) return;
  const state = current;
  const before = button.disabled;
  button.disabled = true;
  clearError();
  try {
    const bundle = name === "bundle"; // the bug-report zip (GET /v1/jobs/{id}/bundle)
    const response = await api(jobPath(state, bundle ? "/bundle" : `/artifacts/${name}`));
    await saveResponse(response, `${state.id}-${name}${bundle ? ".zip" : ".onnx"}`);
  } catch (err) {
    showError(err);
  } finally {
    button.disabled = before;
  }
}

async function cancel() {
  if (!current) return;
  const state = current;
  $("cancel-job").disabled = true;
  clearError();
  try {
    const job = await getJson(jobPath(state, "/cancel"), { method: "POST" });
    if (current === state) {
      state.job = job;
      if (TERMINAL.has(job.status)) state.ended = true;
      render(state);
    }
  } catch (err) {
    showError(err);
    $("cancel-job").disabled = false;
  }
}

async function deleteJob() {
  if (!current) return;
  const state = current;
  $("delete-job").disabled = true;
  clearError();
  try {
    await api(jobPath(state), { method: "DELETE" });
    if (current === state) location.hash = "#/jobs";
  } catch (err) {
    showError(err);
    $("delete-job").disabled = false;
  }
}

// -- graphs --------------------------------------------------------------------------------------

const ORIGINAL_MAX_NODES = 20000; // the original is drawn up to this size (graph route's limit)

async function graphOf(state, name, maxNodes) {
  const query = maxNodes ? `?max_nodes=${maxNodes}` : "";
  try {
    return await getJson(jobPath(state, `/artifacts/${name}/graph${query}`), { signal: state.controller.signal });
  } catch (err) {
    if (err instanceof ApiError && (err.status === 404 || err.status === 422)) return null;
    throw err;
  }
}

const MEASURED_KINDS = ["compare", "golden"]; // checks whose localisation step measures every tensor's error

/** The job's per-tensor errors from its localisation step (compare/golden), or null. */
async function nodeErrorsOf(state) {
  if (!state.job || !MEASURED_KINDS.includes(state.job.check_kind)) return null;
  try {
    return await getJson(jobPath(state, "/node-errors"), { signal: state.controller.signal });
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) return null;
    throw err;
  }
}

async function loadGraphs(state, succeeded) {
  state.graphsLoaded = true;
  try {
    const [bad, good, original, errors] = await Promise.all([
      graphOf(state, "min-bad"),
      succeeded ? graphOf(state, "min-good") : Promise.resolve(null),
      graphOf(state, "original", ORIGINAL_MAX_NODES),
      nodeErrorsOf(state),
    ]);
    if (current !== state) return;
    state.graphs = { bad, good, original, succeeded, errors };
    showGraphs(state, state.graphs);
    renderButtons(state);
    renderSummary(state);
  } catch (err) {
    state.graphsLoaded = false;
    showError(err);
  }
}

function bindSearch(panel, control) {
  const form = panel.querySelector("[data-search]");
  if (!form) return;
  const input = form.querySelector("input");
  const status = form.querySelector("[data-search-state]");
  let asked = null;
  input.value = "";
  status.textContent = "";
  input.oninput = () => {
    asked = null;
    const n = input.value.trim() ? control.search(input.value) : control.search("");
    status.textContent = input.value.trim() ? (n ? t("graphs.search.count", { n }) : t("graphs.search.none")) : "";
  };
  form.onsubmit = (event) => {
    event.preventDefault();
    if (asked !== input.value) {
      asked = input.value;
      control.search(input.value);
    }
    const at = control.next();
    status.textContent = at ? t("graphs.search.at", { k: at, n: control.matchCount() }) : t("graphs.search.none");
  };
}

/** The error overlay's state: on or off, and the metric the nodes are coloured by. */
const overlayChoice = { on: false, metric: "max_abs" };

function overlayOf(graphs, graph) {
  return overlayChoice.on && graphs.errors && graph && !graph.truncated
    ? buildOverlay(graph, graphs.errors, overlayChoice.metric)
    : null;
}

/** The overlay switch, metric choice and legend (shown when the job has per-node errors). */
function renderOverlayTools(graphs) {
  const tools = $("error-overlay");
  tools.hidden = !graphs.errors;
  $("error-overlay-on").checked = overlayChoice.on;
  $("error-metric").value = overlayChoice.metric;
  $("error-metric").disabled = !overlayChoice.on;
  const shown = ["original", "bad", "good"].map((k) => graphs[k]).find((g) => g && !g.truncated);
  drawOverlayLegend($("error-legend"), overlayChoice.on && graphs.errors && shown ? buildOverlay(shown, graphs.errors, overlayChoice.metric) : null);
}

function applyOverlay(state) {
  const graphs = state.graphs;
  if (!graphs) return;
  for (const [name, graph] of [["min-bad", graphs.bad], ["min-good", graphs.good], ["original", graphs.original]]) {
    const control = $(`graph-${name}`).graphControl;
    if (control && graph && !graph.truncated) control.setOverlay(overlayOf(graphs, graph));
  }
  renderOverlayTools(graphs);
}

function drawPanel(name, graph, highlight, emptyText, options = {}) {
  const view = $(`graph-${name}`);
  const table = $(`table-${name}`);
  const panel = $(`panel-${name}`);
  const tools = panel.querySelector(".graph-tools");
  if (!graph || graph.truncated) {
    const text = graph ? t("graphs.too_large", { n: graph.node_count }) : emptyText;
    const note = document.createElement("p");
    note.className = "graph-note";
    setRich(note, text);
    view.replaceChildren(note);
    if (table) table.replaceChildren();
    tools.hidden = true;
    view.graphControl = null;
    $(`caption-${name}`).textContent = graph ? t("graphs.count", { n: graph.node_count }) : "";
    return null;
  }
  tools.hidden = false;
  view.graphControl = null;
  $(`caption-${name}`).textContent = t("graphs.count", { n: graph.node_count });
  const control = drawGraph(view, graph, highlight, options);
  for (const button of tools.querySelectorAll("[data-zoom]")) {
    button.onclick = () => {
      const action = button.dataset.zoom;
      if (action === "fit") control.fit();
      else control.zoom(action === "in" ? 1.25 : 0.8);
    };
  }
  bindSearch(panel, control);
  if (table) table.replaceChildren(graphTable(graph, highlight));
  view.graphControl = control;
  return control;
}

function showGraphs(state, graphs) {
  const badIds = new Set(graphs.bad && !graphs.bad.truncated ? graphs.bad.nodes.map((n) => n.id) : []);
  const goodIds = new Set(graphs.good && !graphs.good.truncated ? graphs.good.nodes.map((n) => n.id) : []);
  const onlyBad = new Set([...badIds].filter((id) => !goodIds.has(id) && graphs.good));
  const onlyGood = new Set([...goodIds].filter((id) => !badIds.has(id)));
  $("graphs").hidden = !graphs.bad;
  setRich($("graphs-heading"), graphs.succeeded ? t("graphs.heading") : t("graphs.heading.best"));
  drawPanel("min-bad", graphs.bad, graphs.good ? onlyBad : new Set(), t("graphs.none"), {
    overlay: overlayOf(graphs, graphs.bad),
  });
  const goodText = graphs.succeeded ? t("graphs.no_min_good") : t("graphs.no_min_good.early");
  drawPanel("min-good", graphs.good, onlyGood, goodText, { overlay: overlayOf(graphs, graphs.good) });
  // the original, drawn with the min-bad inside it (when the route gave its nodes)
  const original = graphs.original;
  const drawable = Boolean(original && !original.truncated && original.nodes.length);
  $("panel-original").hidden = !drawable;
  if (drawable) drawPanel("original", original, new Set(), "", { focus: badIds, overlay: overlayOf(graphs, original) });
  renderOriginal(graphs.original, drawable);
  renderOverlayTools(graphs);
}

function renderOriginal(original, drawn) {
  const box = $("original-summary");
  box.replaceChildren();
  if (!original) return;
  const heading = document.createElement("h3");
  heading.textContent = t("original.heading", { n: original.node_count });
  const intro = document.createElement("p");
  intro.className = "muted";
  intro.textContent = drawn ? t("original.text.drawn") : t("original.text");
  const bars = document.createElement("ul");
  bars.className = "histogram";
  const entries = Object.entries(original.op_histogram);
  const most = Math.max(1, ...entries.map(([, n]) => n));
  for (const [op, count] of entries.slice(0, 24)) {
    const item = document.createElement("li");
    const label = document.createElement("span");
    label.className = "op";
    label.textContent = op;
    const bar = document.createElement("span");
    bar.className = "bar";
    bar.style.setProperty("--share", String(count / most));
    const value = document.createElement("span");
    value.className = "count";
    value.textContent = String(count);
    item.append(label, bar, value);
    bars.append(item);
  }
  box.append(heading, intro, bars);
  if (entries.length > 24) {
    const more = document.createElement("p");
    more.className = "muted";
    more.textContent = t("original.more", { k: entries.length - 24 });
    box.append(more);
  }
}

// The `${what}-job` button opens the `${what}-dialog`: its keep button closes it as "keep", its
// confirm button closes it as `what` and runs `action`. Returns the dialog.
function bindConfirmation(what, action) {
  const dialog = $(`${what}-dialog`);
  $(`${what}-job`).addEventListener("click", () => {
    if (!current || $(`${what}-job`).disabled) return;
    dialog.showModal();
    $(`${what}-keep`).focus();
  });
  $(`${what}-keep`).addEventListener("click", () => dialog.close("keep"));
  $(`${what}-confirm`).addEventListener("click", () => {
    dialog.close(what);
    action();
  });
  return dialog;
}

export function bindJob() {
  for (const button of document.querySelectorAll("[data-artifact]")) {
    button.addEventListener("click", () => download(button.dataset.artifact, button));
  }
  const dialog = bindConfirmation("cancel", cancel);
  dialog.addEventListener("close", () => $("cancel-job").focus());
  const deleting = bindConfirmation("delete", deleteJob);
  deleting.addEventListener("close", () => {
    if (deleting.returnValue !== "delete") $("delete-job").focus();
  });
  for (const button of document.querySelectorAll("[data-verdict]")) {
    button.addEventListener("click", () => answer(button.dataset.verdict));
  }
  $("error-overlay-on").addEventListener("change", () => {
    overlayChoice.on = $("error-overlay-on").checked;
    if (current) applyOverlay(current);
  });
  $("error-metric").addEventListener("change", () => {
    overlayChoice.metric = $("error-metric").value;
    if (current) applyOverlay(current);
  });
  $("verdict-download").addEventListener("click", () => {
    if (current && current.awaiting) download(`iteration-${current.awaiting.iteration}`, $("verdict-download"));
  });
}
