// The workers page (#/workers): GET /v1/workers as a table (queues, GPUs, runtime versions, the
// current job and check, last heartbeat, jobs done, busy share), refreshed every few seconds while
// the page is open. Another team's job shows only as "another team's job".

import { getJson } from "./api.js";
import { formatDate, formatNumber, t } from "./i18n.js";
import { $, cell, formatSeconds, pageHooks, secondsBetween, setState, showError, signInHint } from "./ui.js";

const REFRESH_MS = 3000;
const view = { active: false, timer: null, data: null, updated: null };

export const { open: openWorkers, close: closeWorkers, rerender: rerenderWorkers } = pageHooks(view, load, render);

async function load() {
  clearTimeout(view.timer);
  const hint = signInHint();
  if (hint) {
    view.data = null;
    setState($("workers-state"), hint);
    $("workers-table").hidden = true;
    $("workers-summary").textContent = "";
    return;
  }
  try {
    const data = await getJson("/v1/workers");
    if (!view.active) return;
    view.data = data;
    view.updated = new Date().toISOString();
    render();
  } catch (err) {
    if (view.active) showError(err);
  }
  if (view.active) view.timer = setTimeout(load, REFRESH_MS);
}

function render() {
  const data = view.data;
  if (!data) return;
  setState($("workers-state"), data.items.length ? "" : t("workers.none"));
  $("workers-table").hidden = data.items.length === 0;
  $("workers-summary").textContent = t("workers.summary", {
    online: data.online, busy: data.busy, time: formatDate(view.updated),
  });
  $("workers-body").replaceChildren(...data.items.map(row));
}

// onnxruntime's providers by their short names (CUDA, CPU); the full names in the tooltip
const shortProvider = (name) => name.replace(/ExecutionProvider$/, "") || name;

function runtimes(worker) {
  const parts = [];
  const r = worker.runtimes;
  if (r.onnxruntime) parts.push(`onnxruntime ${r.onnxruntime}${r.providers.length ? ` (${r.providers.map(shortProvider).join(", ")})` : ""}`);
  if (r.tensorrt) parts.push(`TensorRT ${r.tensorrt}`);
  const text = document.createElement("span");
  text.textContent = parts.join(" · ") || "–";
  if (r.providers.length) text.title = r.providers.join(", ");
  return text;
}

function currentJob(worker) {
  if (worker.state !== "busy") return "–";
  if (!worker.job) return t("workers.other_job");
  const box = document.createElement("span");
  const link = document.createElement("a");
  link.href = `#/jobs/${encodeURIComponent(worker.job.id)}`;
  link.textContent = worker.job.id;
  box.append(link);
  const check = worker.job.check;
  if (check) {
    // the layerwise run has no iteration number or candidate: it runs the whole model once
    const text =
      check.phase === "layerwise"
        ? t("workers.check.layerwise")
        : t("workers.check", { number: check.iteration, phase: check.phase, nodes: check.nodes });
    box.append(document.createElement("br"), text);
  }
  return box;
}

function row(worker) {
  const tr = document.createElement("tr");
  tr.dataset.worker = worker.name;
  const name = document.createElement("span");
  const strong = document.createElement("strong");
  strong.textContent = worker.name;
  name.append(strong, document.createElement("br"), worker.host);
  cell(tr, name, t("workers.col.name"));
  const state = document.createElement("span");
  state.className = `badge worker-${worker.state}`;
  state.textContent = t(`workers.state.${worker.state}`);
  state.dataset.state = worker.state;
  cell(tr, state, t("workers.col.state"));
  cell(tr, worker.queues.join(", "), t("workers.col.queues"));
  cell(tr, worker.gpus.length ? worker.gpus.join(", ") : t("workers.no_gpu"), t("workers.col.gpus"));
  cell(tr, runtimes(worker), t("workers.col.runtimes"), "runtimes");
  cell(tr, currentJob(worker), t("workers.col.job"));
  const ago = formatSeconds(secondsBetween(worker.last_heartbeat, null));
  const heartbeat = cell(tr, t("workers.ago", { time: ago }), t("workers.col.heartbeat"));
  heartbeat.title = formatDate(worker.last_heartbeat);
  cell(tr, String(worker.jobs_done), t("workers.col.done"), "num");
  cell(tr, t("workers.utilisation", { percent: formatNumber(worker.utilisation * 100, 1) }), t("workers.col.busy"), "num");
  return tr;
}
