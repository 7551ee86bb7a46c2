// onnx-reducer web UI: vanilla JS, no build step, no framework.
// Every request carries the team token as `Authorization: Bearer`; the token never goes into a URL.
// Job events are read with fetch() and a small server-sent-events parser (EventSource cannot send
// headers), resuming with `Last-Event-ID` after a dropped connection.
"use strict";

(() => {
  const TOKEN_KEY = "onnx-reducer.token";
  const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
  const PAGE_SIZE = 20;
  const STALL_MS = 60000; // the server sends a heartbeat every 15 s by default
  const $ = (id) => document.getElementById(id);

  // -- requests and errors ----------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, title, detail) {
      super(detail);
      this.status = status;
      this.title = title;
      this.detail = detail;
    }
  }

  const getToken = () => localStorage.getItem(TOKEN_KEY) || "";

  async function problemOf(response) {
    let title = `HTTP ${response.status}`;
    let detail = response.statusText || "The request failed.";
    const type = response.headers.get("content-type") || "";
    try {
      if (type.includes("json")) {
        const body = await response.json();
        title = body.title || title;
        detail = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail ?? body);
      } else {
        const text = (await response.text()).trim();
        if (text) detail = text.slice(0, 500);
      }
    } catch {
      // keep the status line
    }
    if (response.status === 401) detail += " Enter a valid API token above.";
    return new ApiError(response.status, title, detail);
  }

  async function api(path, options = {}) {
    const token = getToken();
    if (!token) throw new ApiError(401, "No API token", "Enter your team's API token above.");
    const headers = new Headers(options.headers || {});
    headers.set("Authorization", `Bearer ${token}`);
    const response = await fetch(path, { ...options, headers, cache: "no-store", credentials: "omit" });
    if (!response.ok) throw await problemOf(response);
    return response;
  }

  function showError(err) {
    if (err && err.name === "AbortError") return;
    const isApi = err instanceof ApiError;
    $("error-title").textContent = isApi ? `${err.title}:` : "Network error:";
    $("error-detail").textContent = isApi ? err.detail : String((err && err.message) || err);
    $("error").hidden = false;
  }

  function clearError() {
    $("error").hidden = true;
    $("error-title").textContent = "";
    $("error-detail").textContent = "";
  }

  // -- small helpers ------------------------------------------------------------------------------

  function cell(row, text, className) {
    const td = document.createElement("td");
    td.textContent = text ?? "–";
    if (className) td.className = className;
    row.append(td);
    return td;
  }

  function badge(element, status) {
    element.textContent = status;
    element.className = `badge ${status}`;
  }

  const fmtTime = (iso) => (iso ? new Date(iso).toLocaleString() : "–");

  function fmtBytes(n) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) {
      n /= 1024;
      i += 1;
    }
    return `${i ? n.toFixed(1) : n} ${units[i]}`;
  }

  function fmtSeconds(s) {
    if (s === null || s === undefined) return "–";
    if (s < 60) return `${Math.round(s)} s`;
    const m = Math.floor(s / 60);
    return m < 60 ? `${m} min ${Math.round(s % 60)} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
  }

  function randomKey() {
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes); // works outside secure contexts, unlike crypto.randomUUID
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  function sleep(ms, signal) {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
    });
  }

  // -- token --------------------------------------------------------------------------------------

  function renderToken() {
    const token = getToken();
    $("token").value = token;
    $("token-state").textContent = token ? "Token saved in this browser." : "No token yet.";
  }

  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = $("token").value.trim();
    if (token) localStorage.setItem(TOKEN_KEY, token);
    else localStorage.removeItem(TOKEN_KEY);
    renderToken();
    clearError();
    route();
  });

  $("token-forget").addEventListener("click", () => {
    localStorage.removeItem(TOKEN_KEY);
    renderToken();
    $("token").focus();
  });

  $("error-close").addEventListener("click", clearError);

  // -- routing ------------------------------------------------------------------------------------

  const views = { new: $("view-new"), jobs: $("view-jobs"), job: $("view-job") };

  function show(name) {
    for (const [key, section] of Object.entries(views)) section.hidden = key !== name;
    for (const [key, link] of [["new", $("nav-new")], ["jobs", $("nav-jobs")]]) {
      if (key === name) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
  }

  function route() {
    closeJob();
    const hash = location.hash || "#/jobs";
    const match = hash.match(/^#\/jobs\/([A-Za-z0-9_-]{1,100})$/);
    if (hash === "#/new") {
      show("new");
      document.title = "New job · onnx-reducer";
    } else if (match) {
      show("job");
      openJob(match[1]);
    } else {
      show("jobs");
      document.title = "Jobs · onnx-reducer";
      loadJobs(jobsState.pages[jobsState.index]);
    }
  }

  window.addEventListener("hashchange", () => {
    clearError();
    route();
    $("main").focus({ preventScroll: true });
  });

  // -- submit -------------------------------------------------------------------------------------

  $("submit-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    clearError();
    const file = $("model").files[0];
    if (!file) {
      showError(new ApiError(400, "No model", "Choose an .onnx file or a .zip/.tar bundle."));
      return;
    }
    const body = new FormData();
    body.append("check_spec", $("check-spec").value);
    body.append("mode", $("mode").value);
    const modelPath = $("model-path").value.trim();
    if (modelPath) body.append("model_path", modelPath);
    body.append("model", file, file.name); // last: the small fields are read before the uploads
    const golden = $("golden").files[0];
    if (golden) body.append("golden", golden, golden.name);
    const button = $("submit-job");
    button.disabled = true;
    $("submit-state").textContent = `Uploading ${file.name} (${fmtBytes(file.size)})…`;
    try {
      const response = await api("/v1/jobs", {
        method: "POST",
        body,
        headers: { "Idempotency-Key": randomKey() },
      });
      const created = await response.json();
      $("submit-state").textContent = "";
      location.hash = `#/jobs/${created.id}`;
    } catch (err) {
      $("submit-state").textContent = "";
      showError(err);
    } finally {
      button.disabled = false;
    }
  });

  // -- jobs list ----------------------------------------------------------------------------------

  const jobsState = { pages: [null], index: 0, next: null };

  async function loadJobs(cursor) {
    const params = new URLSearchParams({ limit: String(PAGE_SIZE) });
    const status = $("status-filter").value;
    if (status) params.set("status", status);
    if (cursor) params.set("cursor", cursor);
    try {
      const page = await (await api(`/v1/jobs?${params}`)).json();
      renderJobs(page);
    } catch (err) {
      renderJobs({ items: [], next_cursor: null });
      showError(err);
    }
  }

  function renderJobs(page) {
    const tbody = $("jobs-body");
    tbody.replaceChildren();
    for (const job of page.items) {
      const row = document.createElement("tr");
      const link = document.createElement("a");
      link.href = `#/jobs/${job.id}`;
      link.textContent = job.id;
      const idCell = document.createElement("td");
      const code = document.createElement("code");
      code.append(link);
      idCell.append(code);
      row.append(idCell);
      cell(row, job.model.filename);
      const statusCell = cell(row, "");
      const span = document.createElement("span");
      badge(span, job.status);
      statusCell.append(span);
      cell(row, `${job.nodes_before ?? "?"} → ${job.nodes_after ?? "?"}`, "num");
      cell(row, String(job.progress.checks_run), "num");
      cell(row, fmtTime(job.created_at));
      tbody.append(row);
    }
    $("jobs-empty").hidden = page.items.length > 0;
    jobsState.next = page.next_cursor;
    $("jobs-next").disabled = !page.next_cursor;
    $("jobs-prev").disabled = jobsState.index === 0;
    $("jobs-first").disabled = jobsState.index === 0;
  }

  function resetPages() {
    jobsState.pages = [null];
    jobsState.index = 0;
  }

  $("jobs-filter").addEventListener("submit", (event) => {
    event.preventDefault();
    clearError();
    resetPages();
    loadJobs(null);
  });
  $("status-filter").addEventListener("change", () => {
    resetPages();
    loadJobs(null);
  });
  $("jobs-next").addEventListener("click", () => {
    if (!jobsState.next) return;
    jobsState.pages = jobsState.pages.slice(0, jobsState.index + 1);
    jobsState.pages.push(jobsState.next);
    jobsState.index += 1;
    loadJobs(jobsState.next);
  });
  $("jobs-prev").addEventListener("click", () => {
    if (jobsState.index === 0) return;
    jobsState.index -= 1;
    loadJobs(jobsState.pages[jobsState.index]);
  });
  $("jobs-first").addEventListener("click", () => {
    resetPages();
    loadJobs(null);
  });

  // -- one job ------------------------------------------------------------------------------------

  let current = null; // { id, controller, lastEventId, retryMs, ended, nodesBefore, rows }

  function closeJob() {
    if (current) current.controller.abort();
    current = null;
  }

  function openJob(id) {
    const state = {
      id,
      controller: new AbortController(),
      lastEventId: "",
      retryMs: 2000,
      ended: false,
      nodesBefore: null,
      rows: new Map(),
    };
    current = state;
    document.title = `Job ${id} · onnx-reducer`;
    $("job-id").textContent = id;
    for (const field of ["job-model", "job-mode", "job-check", "job-eta"]) $(field).textContent = "–";
    $("job-nodes-before").textContent = "–";
    $("job-nodes-after").textContent = "–";
    $("job-checks").textContent = "0";
    badge($("job-status"), "loading");
    $("job-error").hidden = true;
    $("iterations-body").replaceChildren();
    setProgress(state, null, 0);
    setStream("");
    setButtons("queued");
    refreshJob(state).then((ok) => {
      if (ok) follow(state);
    });
  }

  const jobPath = (state, rest = "") => `/v1/jobs/${encodeURIComponent(state.id)}${rest}`;

  async function refreshJob(state) {
    try {
      const job = await (await api(jobPath(state), { signal: state.controller.signal })).json();
      if (current === state) renderJob(state, job);
      return true;
    } catch (err) {
      if (current === state) {
        showError(err);
        badge($("job-status"), "unknown");
      }
      return false;
    }
  }

  function renderJob(state, job) {
    badge($("job-status"), job.status);
    $("job-model").textContent = `${job.model.filename} (${fmtBytes(job.model.size)})`;
    $("job-mode").textContent = job.mode;
    $("job-check").textContent = job.check_kind;
    state.nodesBefore = job.nodes_before;
    $("job-nodes-before").textContent = job.nodes_before ?? "–";
    $("job-nodes-after").textContent = job.nodes_after ?? "–";
    $("job-checks").textContent = String(job.progress.checks_run);
    $("job-eta").textContent = job.status === "running" ? fmtSeconds(job.progress.eta_s) : "–";
    if (job.error) {
      $("job-error").textContent = `${job.error.code}${job.error.message ? `: ${job.error.message}` : ""}`;
      $("job-error").hidden = false;
    } else {
      $("job-error").hidden = true;
    }
    if (job.status === "succeeded") setProgress(state, job.nodes_after, job.progress.checks_run, true);
    else setProgress(state, job.progress.best_size, job.progress.checks_run);
    setButtons(job.status);
  }

  function setButtons(status) {
    const done = status === "succeeded";
    $("download-min-bad").disabled = !done;
    $("download-min-good").disabled = !done;
    $("download-original").disabled = false;
    $("cancel-job").disabled = TERMINAL.has(status);
  }

  function setProgress(state, best, checks, finished = false) {
    const bar = $("job-progress");
    const before = state.nodesBefore;
    let value = 0;
    if (finished) value = 100;
    else if (before && best !== null && best !== undefined && before > 1) value = (100 * (before - best)) / (before - 1);
    bar.value = Math.max(0, Math.min(100, value));
    const parts = [];
    if (best !== null && best !== undefined) {
      const label = finished ? "smallest failing model" : "smallest failing model so far";
      parts.push(`${label}: ${best}${before ? ` of ${before}` : ""} nodes`);
    }
    parts.push(`${checks} check${checks === 1 ? "" : "s"} run`);
    if (finished) parts.push("done");
    $("job-progress-text").textContent = parts.join(" · ");
  }

  function setStream(text) {
    $("stream-state").textContent = text;
  }

  function addIteration(state, data) {
    const row = document.createElement("tr");
    row.dataset.number = String(data.number);
    cell(row, String(data.number), "num");
    cell(row, data.phase);
    cell(row, String(data.nodes), "num");
    cell(row, data.verdict);
    cell(row, data.reproduces === null || data.reproduces === undefined ? "–" : data.reproduces ? "yes" : "no");
    cell(row, data.best_size === undefined ? "–" : String(data.best_size), "num");
    cell(row, data.duration_s === null || data.duration_s === undefined ? "–" : data.duration_s.toFixed(3), "num");
    const old = state.rows.get(data.number);
    if (old) old.replaceWith(row);
    else $("iterations-body").append(row);
    state.rows.set(data.number, row);
  }

  function onEvent(state, event) {
    if (current !== state) return;
    let data;
    try {
      data = JSON.parse(event.data);
    } catch {
      return;
    }
    switch (event.type) {
      case "job.queued":
        badge($("job-status"), "queued");
        setButtons("queued");
        break;
      case "job.started":
        badge($("job-status"), "running");
        setButtons("running");
        if (data.nodes_before) {
          state.nodesBefore = data.nodes_before;
          $("job-nodes-before").textContent = String(data.nodes_before);
        }
        break;
      case "iteration":
        addIteration(state, data);
        $("job-checks").textContent = String(data.number);
        setProgress(state, data.best_size, data.number);
        break;
      case "job.succeeded":
      case "job.failed":
      case "job.cancelled":
        state.ended = true;
        badge($("job-status"), event.type.slice(4));
        refreshJob(state); // final sizes, error message
        break;
      default:
        break;
    }
  }

  // A server-sent-events reader on top of fetch(): field parsing per the HTML spec (event, data,
  // id, retry; comments are heartbeats), one dispatch per blank line.
  async function readEvents(state, body, connection) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let type = "";
    let data = [];
    let watchdog = setTimeout(() => connection.abort(), STALL_MS);
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        clearTimeout(watchdog);
        watchdog = setTimeout(() => connection.abort(), STALL_MS);
        buffer += value;
        const lines = buffer.split("\n");
        buffer = lines.pop();
        for (const raw of lines) {
          const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
          if (line === "") {
            if (data.length) onEvent(state, { type: type || "message", data: data.join("\n"), id: state.lastEventId });
            type = "";
            data = [];
            continue;
          }
          if (line.startsWith(":")) continue;
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          let val = colon < 0 ? "" : line.slice(colon + 1);
          if (val.startsWith(" ")) val = val.slice(1);
          if (field === "event") type = val;
          else if (field === "data") data.push(val);
          else if (field === "id" && !val.includes("\0")) state.lastEventId = val;
          else if (field === "retry" && /^\d+$/.test(val)) state.retryMs = Number(val);
        }
      }
    } finally {
      clearTimeout(watchdog);
      reader.releaseLock();
    }
  }

  async function follow(state) {
    const signal = state.controller.signal;
    let failures = 0;
    while (!signal.aborted && !state.ended) {
      const connection = new AbortController();
      const stop = () => connection.abort();
      signal.addEventListener("abort", stop, { once: true });
      try {
        const headers = { Accept: "text/event-stream" };
        if (state.lastEventId) headers["Last-Event-ID"] = state.lastEventId;
        const response = await api(jobPath(state, "/events"), { headers, signal: connection.signal });
        setStream("Following live events.");
        failures = 0;
        await readEvents(state, response.body, connection);
      } catch (err) {
        if (signal.aborted) return;
        if (err instanceof ApiError && err.status >= 400 && err.status < 500 && err.status !== 429) {
          showError(err);
          setStream("Live events stopped.");
          return;
        }
        failures += 1;
      } finally {
        signal.removeEventListener("abort", stop);
      }
      if (signal.aborted || state.ended) break;
      // The stream closed without a final event (its maximum lifetime, a restart, a network error):
      // check the job, then resume after the last event seen.
      await refreshJob(state);
      if (TERMINAL.has($("job-status").textContent)) break;
      const wait = Math.min(state.retryMs * 2 ** Math.min(failures, 4), 30000);
      setStream(`Connection closed; reconnecting in ${Math.round(wait / 1000)} s…`);
      await sleep(wait, signal);
    }
    if (current === state) setStream(state.ended ? "The job has ended." : "");
  }

  async function download(name) {
    if (!current) return;
    const state = current;
    const button = $(`download-${name}`);
    const wasDisabled = button.disabled;
    button.disabled = true;
    clearError();
    try {
      const response = await api(jobPath(state, `/artifacts/${name}`));
      const blob = await response.blob();
      const link = document.createElement("a");
      link.href = URL.createObjectURL(blob);
      link.download = filenameOf(response.headers.get("content-disposition")) || `${state.id}-${name}.onnx`;
      link.hidden = true;
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(link.href), 60000);
    } catch (err) {
      showError(err);
    } finally {
      button.disabled = wasDisabled;
    }
  }

  function filenameOf(disposition) {
    if (!disposition) return "";
    const star = disposition.match(/filename\*\s*=\s*[^']*'[^']*'([^;]+)/i);
    if (star) {
      try {
        return decodeURIComponent(star[1].trim());
      } catch {
        // fall through to the plain form
      }
    }
    const plain = disposition.match(/filename\s*=\s*"?([^";]+)"?/i);
    return plain ? plain[1].trim() : "";
  }

  for (const button of document.querySelectorAll("[data-artifact]")) {
    button.addEventListener("click", () => download(button.dataset.artifact));
  }

  $("cancel-job").addEventListener("click", async () => {
    if (!current) return;
    const state = current;
    clearError();
    $("cancel-job").disabled = true;
    try {
      const job = await (await api(jobPath(state, "/cancel"), { method: "POST" })).json();
      if (current === state) renderJob(state, job);
    } catch (err) {
      showError(err);
      $("cancel-job").disabled = false;
    }
  });

  // -- start --------------------------------------------------------------------------------------

  renderToken();
  route();
})();
