// Server-sent events over fetch() (EventSource cannot send an Authorization header): field parsing
// per the HTML spec (event, data, id, retry; comment lines are heartbeats), one dispatch per blank
// line. `follow` reconnects by itself after a dropped connection, resuming with Last-Event-ID, with
// a growing pause, until the job ends or the caller aborts.

import { ApiError, api } from "./api.js";

const STALL_MS = 60000; // the server sends a heartbeat every 15 s by default

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}

async function readEvents(stream, body, connection, onEvent) {
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
          if (data.length) onEvent({ type: type || "message", data: data.join("\n"), id: stream.lastEventId });
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
        else if (field === "id" && !val.includes("\0")) stream.lastEventId = val;
        else if (field === "retry" && /^\d+$/.test(val)) stream.retryMs = Number(val);
      }
    }
  } finally {
    clearTimeout(watchdog);
    reader.releaseLock();
  }
}

/**
 * Follow `path` until `isOver()` or `signal` aborts.
 * hooks: onEvent({type, data, id}), onState("live" | "waiting" | "stopped", {seconds, error}),
 * onGap() (called after a dropped connection, before reconnecting; may refresh the job and return).
 */
export async function follow(path, signal, hooks) {
  const stream = { lastEventId: "", retryMs: 2000 };
  let failures = 0;
  let first = true; // a job that has already ended is read once: its events are its iterations
  while (!signal.aborted && (first || !hooks.isOver())) {
    first = false;
    const connection = new AbortController();
    const stop = () => connection.abort();
    signal.addEventListener("abort", stop, { once: true });
    try {
      const headers = { Accept: "text/event-stream" };
      if (stream.lastEventId) headers["Last-Event-ID"] = stream.lastEventId;
      const response = await api(path, { headers, signal: connection.signal });
      hooks.onState("live", {});
      failures = 0;
      await readEvents(stream, response.body, connection, hooks.onEvent);
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof ApiError && err.status >= 400 && err.status < 500 && err.status !== 429) {
        hooks.onState("stopped", { error: err });
        return;
      }
      failures += 1;
    } finally {
      signal.removeEventListener("abort", stop);
    }
    if (signal.aborted || hooks.isOver()) break;
    await hooks.onGap();
    if (signal.aborted || hooks.isOver()) break;
    const wait = Math.min(stream.retryMs * 2 ** Math.min(failures, 4), 30000);
    hooks.onState("waiting", { seconds: Math.round(wait / 1000) });
    await sleep(wait, signal);
  }
}
