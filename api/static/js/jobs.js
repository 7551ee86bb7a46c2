// The jobs list: the team's jobs, newest first, filtered by status and label (server side) and by
// model name (this page), each with the repository and branch it came from when it has them; refreshed every few seconds while one of them is still queued or running.

import { getJson } from "./api.js";
import { formatDate, t } from "./i18n.js";
import {
  $, TERMINAL, badge, cell, clearError, formatSeconds, pageHooks, secondsBetween, session, setState, showError,
  signInHint,
} from "./ui.js";

const PAGE_SIZE = 20;
const REFRESH_MS = 4000;
const list = { pages: [null], index: 0, next: null, items: [], timer: null, active: false };

const hooks = pageHooks(list, load, () => render(signInHint()));
export const { open: openJobs, close: closeJobs, rerender: rerenderJobs } = hooks;

async function load() {
  clearTimeout(list.timer);
  const hint = signInHint();
  if (hint) {
    list.items = [];
    render(hint);
    return;
  }
  const params = new URLSearchParams({ limit: String(PAGE_SIZE) });
  const status = $("status-filter").value;
  if (status) params.set("status", status);
  for (const label of labelFilters()) params.append("label", label);
  const cursor = list.pages[list.index];
  if (cursor) params.set("cursor", cursor);
  try {
    const page = await getJson(`/v1/jobs?${params}`);
    if (!list.active) return;
    list.items = page.items;
    list.next = page.next_cursor;
    render("");
    if (page.items.some((job) => !TERMINAL.has(job.status))) list.timer = setTimeout(load, REFRESH_MS);
  } catch (err) {
    list.items = [];
    render("");
    showError(err);
  }
}

// the label filter: key=value pairs separated by spaces, every one must match (server side)
function labelFilters() {
  return $("label-filter").value.trim().split(/\s+/).filter(Boolean);
}

function render(hint) {
  const text = $("model-filter").value.trim().toLowerCase();
  const shown = list.items.filter((job) => !text || job.model.filename.toLowerCase().includes(text));
  const tbody = $("jobs-body");
  tbody.replaceChildren(...shown.map(row));
  $("jobs-table").hidden = shown.length === 0;
  let state = hint;
  if (!state && !list.items.length && labelFilters().length) {
    state = t("jobs.state.no_label", { label: labelFilters().join(" ") });
  } else if (!state && !list.items.length) {
    const status = $("status-filter").value;
    state = status ? t("jobs.state.none_status", { status: t(`status.${status}`) }) : t("jobs.state.empty");
  } else if (!state && !shown.length) {
    state = t("jobs.state.no_match", { text: $("model-filter").value.trim() });
  }
  setState($("jobs-state"), state);
  const signedIn = session.state === "ok";
  $("jobs-next").disabled = !signedIn || !list.next;
  $("jobs-prev").disabled = !signedIn || list.index === 0;
  $("jobs-first").disabled = !signedIn || list.index === 0;
}

function row(job) {
  const tr = document.createElement("tr");
  tr.dataset.id = job.id;
  const status = document.createElement("span");
  badge(status, job.status);
  cell(tr, status, t("col.status"));
  const link = document.createElement("a");
  link.href = `#/jobs/${job.id}`;
  link.textContent = job.model.filename;
  const id = document.createElement("span");
  id.className = "job-id muted";
  id.textContent = job.id.slice(0, 8);
  const model = document.createDocumentFragment();
  model.append(link, " ", id);
  const labels = job.labels || {};
  if (labels.repo) {
    const origin = document.createElement("span");
    origin.className = "job-origin muted";
    origin.textContent = labels.branch ? `${labels.repo} · ${labels.branch}` : labels.repo;
    model.append(document.createElement("br"), origin);
  }
  cell(tr, model, t("col.model"), "model");
  // "after" is the finished job's size; a running job's best so far is said as such, and only once
  // it is smaller than the model (a fresh job's best is the whole model: "100 → 100" read as done).
  let nodes = `${job.nodes_before ?? "–"} → ${job.nodes_after ?? "–"}`;
  const best = job.progress.best_size;
  if (job.nodes_after === null && job.status === "running" && best !== null && best < (job.nodes_before ?? Infinity)) {
    nodes += ` ${t("jobs.best_so_far", { n: best })}`;
  }
  cell(tr, nodes, t("col.nodes"), "num");
  cell(tr, String(job.progress.checks_run), t("col.checks"), "num");
  cell(tr, formatDate(job.started_at), t("col.started"));
  cell(tr, formatSeconds(secondsBetween(job.started_at, job.finished_at)), t("col.duration"), "num");
  return tr;
}

function resetPages() {
  list.pages = [null];
  list.index = 0;
}

export function bindJobs() {
  $("jobs-filter").addEventListener("submit", (event) => {
    event.preventDefault();
    clearError();
    load();
  });
  $("status-filter").addEventListener("change", () => {
    resetPages();
    load();
  });
  $("model-filter").addEventListener("input", () => render(signInHint()));
  $("label-filter").addEventListener("change", () => {
    resetPages();
    load();
  });
  $("jobs-next").addEventListener("click", () => {
    if (!list.next) return;
    list.pages = list.pages.slice(0, list.index + 1);
    list.pages.push(list.next);
    list.index += 1;
    load();
  });
  $("jobs-prev").addEventListener("click", () => {
    if (list.index === 0) return;
    list.index -= 1;
    load();
  });
  $("jobs-first").addEventListener("click", () => {
    resetPages();
    load();
  });
}
