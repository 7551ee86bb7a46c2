// Small shared pieces of the page: element lookup, the error banner, badges, formatting, and the
// signed-in session (the team behind the token and what the server allows).

import { ApiError, NoTokenError } from "./api.js";
import { formatNumber, setRich, t } from "./i18n.js";

export const $ = (id) => document.getElementById(id);
export const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);

/** state: "none" | "checking" | "ok" | "refused" | "offline"; team and server once "ok". */
export const session = { state: "none", team: "", server: null };

// What app.js calls on a page whose state is `view` (`view.active` while it is shown, `view.timer`
// its refresh): open marks it shown, runs `onOpen` and loads it; close stops its refresh;
// rerender redraws it (a new language) while it is shown.
export function pageHooks(view, load, render, onOpen = () => {}) {
  return {
    open() {
      view.active = true;
      onOpen();
      load();
    },
    close() {
      view.active = false;
      clearTimeout(view.timer);
    },
    rerender() {
      if (view.active) render();
    },
  };
}

// Submitting the form `id` runs `action` instead of loading a page.
export function onSubmit(id, action) {
  $(id).addEventListener("submit", (event) => {
    event.preventDefault();
    action();
  });
}

export function showError(err) {
  if (!err || err.name === "AbortError") return;
  if (err instanceof NoTokenError) {
    setRich($("error-detail"), t("token.state.none"));
    $("error-title").textContent = "";
  } else if (err instanceof ApiError) {
    $("error-title").textContent = `${err.title}:`;
    $("error-detail").textContent = err.detail;
  } else {
    $("error-title").textContent = t("error.network");
    $("error-detail").textContent = String((err && err.message) || err);
  }
  $("error").hidden = false;
}

export function clearError() {
  $("error").hidden = true;
  $("error-title").textContent = "";
  $("error-detail").textContent = "";
}

export function badge(element, status) {
  element.textContent = t(`status.${status}`);
  element.className = `badge ${status}`;
  element.dataset.status = status;
}

export function cell(row, text, label, className) {
  const td = document.createElement("td");
  if (text instanceof Node) td.append(text);
  else td.textContent = text ?? "–";
  if (label) td.dataset.label = label;
  if (className) td.className = className;
  row.append(td);
  return td;
}

export function formatBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${formatNumber(n, i ? 1 : 0)} ${units[i]}`;
}

export function formatSeconds(s) {
  if (s === null || s === undefined || Number.isNaN(s)) return "–";
  if (s < 10) return t("time.s", { s: formatNumber(s, 1) });
  if (s < 60) return t("time.s", { s: formatNumber(Math.round(s)) });
  const m = Math.floor(s / 60);
  if (m < 60) return t("time.min_s", { m, s: Math.round(s % 60) });
  return t("time.h_min", { h: Math.floor(m / 60), m: m % 60 });
}

/** The seconds between two ISO times (the second defaulting to now), or null. */
export function secondsBetween(start, end) {
  if (!start) return null;
  return Math.max(0, ((end ? Date.parse(end) : Date.now()) - Date.parse(start)) / 1000);
}

/** The "what to do next" text when the page has no usable token, or "" when signed in. Why a token
 * was refused (or could not be checked) is said once, beside the token field; the views only point
 * there. */
export function signInHint() {
  return session.state === "ok" ? "" : t("jobs.state.signin");
}

export function setState(element, text) {
  setRich(element, text);
  element.hidden = !text;
}
