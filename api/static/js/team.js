// The team page (#/team), for a team admin token: the team's tokens (GET /v1/tokens), a form that
// creates one (POST /v1/tokens; the new token is shown once, here), a revoke button per active
// token (DELETE /v1/tokens/{id}, after a confirmation), and the team's audit record (GET
// /v1/audit: tokens created and revoked, jobs deleted, by whom). Another token sees why not.

import { ApiError, api, getJson } from "./api.js";
import { formatDate, setRich, t } from "./i18n.js";
import { $, cell, onSubmit, pageHooks, setState, showError, signInHint } from "./ui.js";

const view = { active: false, tokens: null, audit: null, refused: false };

const ACTIONS = {
  "token.created": () => t("team.audit.token_created"),
  "token.revoked": () => t("team.audit.token_revoked"),
  "job.deleted": () => t("team.audit.job_deleted"),
};

const hooks = pageHooks(view, load, render, () => {
  $("team-token-new").hidden = true;
});
export const { open: openTeam, close: closeTeam, rerender: rerenderTeam } = hooks;

export function bindTeam() {
  onSubmit("team-token-form", create);
}

async function load() {
  const hint = signInHint();
  if (hint) {
    view.tokens = view.audit = null;
    view.refused = false;
    setState($("team-state"), hint);
    $("team-admin").hidden = true;
    return;
  }
  try {
    const [tokens, audit] = await Promise.all([getJson("/v1/tokens"), getJson("/v1/audit?limit=200")]);
    if (!view.active) return;
    view.tokens = tokens.items;
    view.audit = audit.items;
    view.refused = false;
  } catch (err) {
    if (!view.active) return;
    if (err instanceof ApiError && err.status === 403) {
      view.refused = true;
    } else {
      showError(err);
      return;
    }
  }
  render();
}

async function create() {
  const body = JSON.stringify({ name: $("team-token-name").value.trim(), admin: $("team-token-admin").checked });
  try {
    const response = await api("/v1/tokens", { method: "POST", body, headers: { "Content-Type": "application/json" } });
    const created = await response.json();
    $("team-token-new-value").textContent = created.token;
    $("team-token-new").hidden = false;
    $("team-token-name").value = "";
    $("team-token-admin").checked = false;
    load();
  } catch (err) {
    showError(err);
  }
}

async function revoke(token) {
  if (!window.confirm(t("team.revoke_confirm", { prefix: token.prefix }))) return;
  try {
    await api(`/v1/tokens/${encodeURIComponent(token.id)}`, { method: "DELETE" });
    load();
  } catch (err) {
    showError(err);
  }
}

function render() {
  if (view.refused) {
    setRich($("team-state"), t("team.not_admin"));
    $("team-admin").hidden = true;
    return;
  }
  if (!view.tokens) return;
  setState($("team-state"), "");
  $("team-admin").hidden = false;
  $("tokens-body").replaceChildren(...view.tokens.map(tokenRow));
  $("audit-body").replaceChildren(...view.audit.map(auditRow));
  $("audit-empty").hidden = view.audit.length > 0;
}

function tokenRow(token) {
  const row = document.createElement("tr");
  row.dataset.token = token.id;
  const prefix = document.createElement("code");
  prefix.textContent = `${token.prefix}…`;
  cell(row, prefix, t("team.col.prefix"));
  cell(row, token.name || t("team.unnamed"), t("team.col.name"));
  cell(row, token.admin ? t("team.role.admin") : t("team.role.member"), t("team.col.role"));
  cell(row, formatDate(token.created_at), t("team.col.created"));
  const revoked = token.revoked_at !== null;
  const state = revoked ? t("team.state.revoked", { when: formatDate(token.revoked_at) }) : t("team.state.active");
  cell(row, state, t("team.col.state"), revoked ? "revoked" : "");
  const action = cell(row, "", "");
  if (!revoked) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "danger";
    button.dataset.revoke = token.id;
    button.textContent = t("team.revoke");
    button.addEventListener("click", () => revoke(token));
    action.replaceChildren(button);
  }
  return row;
}

function auditRow(event) {
  const row = document.createElement("tr");
  row.dataset.action = event.action;
  cell(row, formatDate(event.created_at), t("team.col.when"));
  cell(row, (ACTIONS[event.action] || (() => event.action))(), t("team.col.action"));
  cell(row, event.actor, t("team.col.actor"));
  const target = document.createElement("code");
  target.textContent = event.target;
  cell(row, target, t("team.col.target"));
  return row;
}
