// Talking to the public /v1 API: every request carries the team token as `Authorization: Bearer`
// (never in a URL); errors are RFC 9457 problem documents, kept whole so that the page can show
// each message next to the form field it names (the problem's `errors: [{field, message}]`).

const TOKEN_KEY = "onnx-reducer.token";

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.title = problem.title || `HTTP ${status}`;
    this.detail = problem.detail || "";
    this.problem = problem;
  }

  /** [{field, message}] from the problem's `errors` member (its `loc` form for request validation). */
  fieldErrors() {
    const errors = Array.isArray(this.problem.errors) ? this.problem.errors : [];
    return errors
      .map((e) => ({
        field: e.field ?? (Array.isArray(e.loc) ? String(e.loc[e.loc.length - 1]) : ""),
        message: e.message ?? e.msg ?? this.detail,
      }))
      .filter((e) => e.field);
  }
}

export class NoTokenError extends Error {}

export const getToken = () => localStorage.getItem(TOKEN_KEY) || "";
export const storeToken = (token) => localStorage.setItem(TOKEN_KEY, token);
export const forgetToken = () => localStorage.removeItem(TOKEN_KEY);

function problemFromText(status, statusText, contentType, text) {
  if (contentType.includes("json")) {
    try {
      const body = JSON.parse(text);
      if (body && typeof body === "object") {
        if (typeof body.detail !== "string" && body.detail !== undefined) body.detail = JSON.stringify(body.detail);
        return body;
      }
    } catch {
      // not JSON after all: fall through
    }
  }
  return { title: `HTTP ${status}`, detail: text.trim().slice(0, 500) || statusText || "" };
}

export async function problemOf(response) {
  let text = "";
  try {
    text = await response.text();
  } catch {
    // keep the status line
  }
  const type = response.headers.get("content-type") || "";
  return new ApiError(response.status, problemFromText(response.status, response.statusText, type, text));
}

/** fetch() with the token; throws NoTokenError without one, ApiError on any non-2xx answer. */
export async function api(path, options = {}, token = getToken()) {
  if (!token) throw new NoTokenError();
  const headers = new Headers(options.headers || {});
  headers.set("Authorization", `Bearer ${token}`);
  const response = await fetch(path, { ...options, headers, cache: "no-store", credentials: "omit" });
  if (!response.ok) throw await problemOf(response);
  return response;
}

export const getJson = async (path, options = {}, token = getToken()) => (await api(path, options, token)).json();

/** POST a FormData with XMLHttpRequest, for its upload progress events. Resolves with the parsed
 * JSON body of a 2xx answer; rejects with ApiError (or a TypeError for a network failure). */
export function upload(path, body, headers, onProgress, onSent) {
  const token = getToken();
  if (!token) return Promise.reject(new NoTokenError());
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", path);
    xhr.setRequestHeader("Authorization", `Bearer ${token}`);
    for (const [name, value] of Object.entries(headers)) xhr.setRequestHeader(name, value);
    xhr.upload.addEventListener("progress", (event) => {
      if (event.lengthComputable) onProgress(event.loaded, event.total);
    });
    xhr.upload.addEventListener("load", () => onSent());
    xhr.addEventListener("load", () => {
      const type = xhr.getResponseHeader("content-type") || "";
      if (xhr.status >= 200 && xhr.status < 300) {
        try {
          resolve(JSON.parse(xhr.responseText));
        } catch (err) {
          reject(err);
        }
        return;
      }
      reject(new ApiError(xhr.status, problemFromText(xhr.status, xhr.statusText, type, xhr.responseText)));
    });
    xhr.addEventListener("error", () => reject(new TypeError("network error")));
    xhr.addEventListener("abort", () => reject(new DOMException("aborted", "AbortError")));
    xhr.send(body);
  });
}

/** Save a response body as a file: the name from Content-Disposition, or `fallbackName`. */
export async function saveResponse(response, fallbackName) {
  const blob = await response.blob();
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = filenameOf(response.headers.get("content-disposition")) || fallbackName;
  link.hidden = true;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 60000);
}

export function filenameOf(disposition) {
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

export function randomKey() {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes); // works outside secure contexts, unlike crypto.randomUUID
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
