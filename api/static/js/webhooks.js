// The webhooks page (#/webhooks): the team's endpoints (GET/POST/DELETE /v1/webhooks), each with
// its delivery log (GET /v1/webhooks/{id}/deliveries: status, attempts, last error), refreshed
// while the page is open, and a "send test event" button. A new endpoint's secret is shown once.

import { api, getJson } from "./api.js";
import { formatDate, t } from "./i18n.js";
import { $, cell, onSubmit, pageHooks, setState, showError, signInHint } from "./ui.js";

const REFRESH_MS = 3000;
const view = { active: false, timer: null, hooks: null, logs: new Map() };

const hooks = pageHooks(view, load, render, () => {
  $("webhook-secret").hidden = true;
});
export const { open: openWebhooks, close: closeWebhooks, rerender: rerenderWebhooks } = hooks;

export function bindWebhooks() {
  onSubmit("webhook-form", create);
}

async function load() {
  clearTimeout(view.timer);
  const hint = signInHint();
  if (hint) {
    view.hooks = null;
    setState($("webhooks-state"), hint);
    $("webhooks-list").replaceChildren();
    return;
  }
  try {
    const hooks = (await getJson("/v1/webhooks")).items;
    const logs = await Promise.all(hooks.map((hook) => getJson(`/v1/webhooks/${encodeURIComponent(hook.id)}/deliveries`)));
    if (!view.active) return;
    view.hooks = hooks;
    view.logs = new Map(hooks.map((hook, i) => [hook.id, logs[i].items]));
    render();
  } catch (err) {
    if (view.active) showError(err);
  }
  if (view.active) view.timer = setTimeout(load, REFRESH_MS);
}

async function create() {
  const events = [...document.querySelectorAll('input[name="webhook-event"]:checked')].map((box) => box.value);
  const body = JSON.stringify({ url: $("webhook-url").value.trim(), events });
  try {
    const response = await api("/v1/webhooks", { method: "POST", body, headers: { "Content-Type": "application/json" } });
    const created = await response.json();
    $("webhook-secret-value").textContent = created.secret;
    $("webhook-secret").hidden = false;
    $("webhook-url").value = "";
    load();
  } catch (err) {
    showError(err);
  }
}

async function act(path, method) {
  try {
    await api(path, { method });
    load();
  } catch (err) {
    showError(err);
  }
}

function render() {
  if (!view.hooks) return;
  setState($("webhooks-state"), view.hooks.length ? "" : t("webhooks.none"));
  $("webhooks-list").replaceChildren(...view.hooks.map(item));
}

function item(hook) {
  const li = document.createElement("li");
  li.className = "webhook";
  li.dataset.webhook = hook.id;
  const title = document.createElement("p");
  const url = document.createElement("strong");
  url.textContent = hook.url;
  title.append(url, document.createElement("br"), t("webhooks.subscribed", { events: hook.events.join(", ") }));
  if (hook.disabled_at) {
    const disabled = document.createElement("strong");
    disabled.className = "webhook-disabled";
    disabled.textContent = t("webhooks.disabled", { time: formatDate(hook.disabled_at) });
    title.append(document.createElement("br"), disabled);
  }
  const test = button(t("webhooks.test"), "secondary", () => act(`/v1/webhooks/${encodeURIComponent(hook.id)}/test`, "POST"));
  const remove = button(t("webhooks.delete"), "danger", () => act(`/v1/webhooks/${encodeURIComponent(hook.id)}`, "DELETE"));
  const actions = document.createElement("div");
  actions.className = "actions";
  actions.append(test, remove);
  li.append(title, actions, log(view.logs.get(hook.id) || []));
  return li;
}

function button(text, className, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = className;
  b.textContent = text;
  b.addEventListener("click", onClick);
  return b;
}

function log(deliveries) {
  if (!deliveries.length) {
    const empty = document.createElement("p");
    empty.className = "muted";
    empty.textContent = t("webhooks.log.none");
    return empty;
  }
  const table = document.createElement("table");
  table.className = "deliveries stack";
  const caption = table.createCaption();
  caption.textContent = t("webhooks.log.caption");
  const head = table.createTHead().insertRow();
  const columns = [t("webhooks.col.time"), t("webhooks.col.event"), t("webhooks.col.status"), t("webhooks.col.attempts"), t("webhooks.col.answer")];
  for (const text of columns) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = text;
    head.append(th);
  }
  const body = table.createTBody();
  for (const d of deliveries) {
    const tr = body.insertRow();
    tr.dataset.delivery = d.id;
    tr.title = d.id;
    cell(tr, formatDate(d.created_at), t("webhooks.col.time"));
    cell(tr, d.event_type, t("webhooks.col.event"));
    const status = cell(tr, statusText(d.status), t("webhooks.col.status"));
    status.dataset.status = d.status;
    cell(tr, String(d.attempts), t("webhooks.col.attempts"), "num");
    cell(tr, answer(d), t("webhooks.col.answer"));
  }
  return table;
}

function statusText(status) {
  const texts = {
    pending: t("webhooks.status.pending"),
    delivering: t("webhooks.status.delivering"),
    succeeded: t("webhooks.status.succeeded"),
    failed: t("webhooks.status.failed"),
    dropped: t("webhooks.status.dropped"),
  };
  return texts[status] || status;
}

function answer(d) {
  const parts = [];
  if (d.last_status_code) parts.push(`HTTP ${d.last_status_code}`);
  if (d.last_error) parts.push(d.last_error);
  if (d.next_attempt_at && d.status === "pending" && d.attempts) parts.push(t("webhooks.next", { time: formatDate(d.next_attempt_at) }));
  return parts.join(" · ") || "–";
}
