// onnx-reducer web page: plain ES modules, no build step, no framework, nothing loaded from
// elsewhere. It talks only to the public /v1 API with the team token (`Authorization: Bearer`).
// Views: #/jobs (the list), #/new (start a job), #/jobs/ID (one job, live), #/workers (the farm).

import { ApiError, forgetToken, getToken, getJson, storeToken } from "./api.js";
import { detectLanguage, setLanguage, setRich, t } from "./i18n.js";
import { bindJob, closeJob, openJob, rerenderJob } from "./job.js";
import { bindJobs, closeJobs, openJobs, rerenderJobs } from "./jobs.js";
import { bindNew, openNew } from "./newjob.js";
import { $, clearError, session } from "./ui.js";
import { bindWebhooks, closeWebhooks, openWebhooks, rerenderWebhooks } from "./webhooks.js";
import { bindTeam, closeTeam, openTeam, rerenderTeam } from "./team.js";
import { closeWorkers, openWorkers, rerenderWorkers } from "./workers.js";

const JOB_ROUTE = /^#\/jobs\/([A-Za-z0-9_-]{1,100})$/;
// The pages other than one job's, by their address; any other address shows the jobs list.
const PAGES = new Map([
  ["#/team", { name: "team", heading: () => t("team.heading"), open: openTeam, rerender: rerenderTeam }],
  ["#/webhooks", { name: "webhooks", heading: () => t("webhooks.heading"), open: openWebhooks, rerender: rerenderWebhooks }],
  ["#/workers", { name: "workers", heading: () => t("workers.heading"), open: openWorkers, rerender: rerenderWorkers }],
  ["#/new", { name: "new", heading: () => t("new.heading"), open: openNew, rerender: openNew }],
  ["#/jobs", { name: "jobs", heading: () => t("jobs.heading"), open: openJobs, rerender: rerenderJobs }],
]);

function pageAt(hash) {
  return PAGES.get(hash) || PAGES.get("#/jobs");
}

// -- signing in ----------------------------------------------------------------------------------

function renderSession() {
  const box = $("token-state");
  const ok = session.state === "ok";
  document.body.classList.toggle("signed-in", ok);
  const texts = {
    none: t("token.state.none"),
    checking: t("token.state.checking"),
    ok: t("token.state.ok", { team: session.team }),
    refused: t("token.state.refused"),
    offline: t("token.state.offline"),
  };
  setRich(box, texts[session.state]);
  box.dataset.state = session.state;
  $("token-forget").hidden = !ok;
  $("token").hidden = ok;
  $("token-save").hidden = ok;
  document.querySelector('label[for="token"]').hidden = ok;
}

/** Ask the server who `token` belongs to; sets the session's state. */
async function checkToken(token) {
  session.state = "checking";
  renderSession();
  try {
    const me = await getJson("/v1/me", {}, token);
    Object.assign(session, { state: "ok", team: me.team, server: me.server });
    return true;
  } catch (err) {
    const refused = err instanceof ApiError && err.status === 401;
    Object.assign(session, { state: refused ? "refused" : "offline", team: "", server: null });
    return false;
  } finally {
    renderSession();
  }
}

function bindSignIn() {
  $("token-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    clearError();
    const token = $("token").value.trim();
    if (!token) {
      session.state = "none";
      renderSession();
      $("token").focus();
      return;
    }
    if (await checkToken(token)) {
      storeToken(token);
      $("token").value = "";
    } else {
      $("token").focus();
    }
    route();
  });
  $("token-forget").addEventListener("click", () => {
    forgetToken();
    Object.assign(session, { state: "none", team: "", server: null });
    renderSession();
    route();
    $("token").focus();
  });
  $("error-close").addEventListener("click", clearError);
}

// -- routing -------------------------------------------------------------------------------------

const views = {
  jobs: "view-jobs",
  new: "view-new",
  job: "view-job",
  workers: "view-workers",
  webhooks: "view-webhooks",
  team: "view-team",
};

function show(name) {
  for (const [key, id] of Object.entries(views)) $(id).hidden = key !== name;
  for (const [key, link] of [["new", $("nav-new")], ["jobs", $("nav-jobs")], ["workers", $("nav-workers")], ["webhooks", $("nav-webhooks")], ["team", $("nav-team")]]) {
    if (key === name) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

function route() {
  closeJob();
  closeJobs();
  closeWorkers();
  closeWebhooks();
  closeTeam();
  const hash = location.hash || "#/jobs";
  const match = hash.match(JOB_ROUTE);
  if (match) {
    show("job");
    openJob(match[1]);
    return;
  }
  const page = pageAt(hash);
  show(page.name);
  document.title = `${page.heading()} · onnx-reducer`;
  page.open();
}

// -- language ------------------------------------------------------------------------------------

async function changeLanguage(lang) {
  await setLanguage(lang, true);
  renderSession();
  const hash = location.hash || "#/jobs";
  if (JOB_ROUTE.test(hash)) rerenderJob();
  else pageAt(hash).rerender();
}

// -- start ---------------------------------------------------------------------------------------

async function start() {
  const lang = detectLanguage();
  await setLanguage(lang);
  $("lang").value = lang;
  $("lang").addEventListener("change", () => changeLanguage($("lang").value));
  bindSignIn();
  bindJobs();
  bindNew();
  bindJob();
  bindWebhooks();
  bindTeam();
  window.addEventListener("hashchange", () => {
    clearError();
    route();
    $("main").focus({ preventScroll: true });
  });
  const token = getToken();
  if (token) {
    await checkToken(token);
    if (session.state === "refused") forgetToken();
  } else {
    renderSession();
  }
  route();
  document.body.dataset.ready = "true";
}

start();
