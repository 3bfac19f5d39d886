// The console's only way to the server: the public v1 API and the console session endpoints, same origin,
// authenticated by the session cookie. State-changing requests carry the session's CSRF token.
"use strict";

const SAFE = new Set(["GET", "HEAD"]);
let session = null;
let onSignedOut = () => {};

export class ApiError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || "HTTP " + status);
    this.status = status;
    this.problem = problem || {};
  }
  // Validation errors as {field path: message}: Litestar's `key` ("chunking.max_tokens") or ragkb's `loc`.
  fieldErrors() {
    const found = {};
    for (const item of Array.isArray(this.problem.errors) ? this.problem.errors : []) {
      const path = item.key || (Array.isArray(item.loc) ? item.loc.join(".") : "");
      if (path) found[path] = item.message || String(item.msg || "");
    }
    return found;
  }
}

export function currentSession() { return session; }
export function setSignedOutHandler(handler) { onSignedOut = handler; }
export function isAdmin() { return Boolean(session && session.role === "admin"); }
export function canWrite(kbId) {
  if (!session) return false;
  return session.role === "admin" || session.grants[kbId] === "write";
}

async function parse(response) {
  const text = await response.text();
  if (!text) return null;
  try { return JSON.parse(text); } catch (err) { return { detail: text.slice(0, 300) }; }
}

function headersFor(method, extra) {
  const headers = Object.assign({ Accept: "application/json" }, extra || {});
  if (!SAFE.has(method) && session) headers[session.csrf_header] = session.csrf_token;
  return headers;
}

export async function request(method, path, body) {
  const init = { method, credentials: "same-origin", cache: "no-store", headers: headersFor(method) };
  if (body instanceof FormData) init.body = body;
  else if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    throw new ApiError(0, { title: "Network error", detail: String(err.message || err) });
  }
  const data = await parse(response);
  if (response.status === 401 && session) {
    session = null;
    onSignedOut();
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

export const api = {
  get: (path) => request("GET", path),
  post: (path, body) => request("POST", path, body === undefined ? {} : body),
  patch: (path, body) => request("PATCH", path, body),
  del: (path) => request("DELETE", path),
};

// Uploads go through XMLHttpRequest: fetch reports no upload progress. `onProgress(loaded, total)`.
export function upload(path, form, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", path);
    xhr.withCredentials = true;
    for (const [name, value] of Object.entries(headersFor("POST"))) xhr.setRequestHeader(name, value);
    xhr.upload.addEventListener("progress", (event) => {
      if (event.lengthComputable) onProgress(event.loaded, event.total);
    });
    xhr.addEventListener("load", () => {
      let data = null;
      try { data = xhr.responseText ? JSON.parse(xhr.responseText) : null; } catch (err) { data = null; }
      if (xhr.status >= 200 && xhr.status < 300) resolve(data);
      else reject(new ApiError(xhr.status, data));
    });
    xhr.addEventListener("error", () => reject(new ApiError(0, { title: "Network error", detail: "upload failed" })));
    xhr.send(form);
  });
}

export async function loadSession() {
  try {
    session = await request("GET", "/console/session");
  } catch (err) {
    if (err.status !== 401) throw err;
    session = null;
  }
  return session;
}

export async function signIn(key) {
  session = await request("POST", "/console/session", { key });
  return session;
}

export async function signOut() {
  // The request takes the CSRF token before its first await; the session is dropped at once, so that a
  // 401 answered meanwhile to a request still in flight does not count as being signed out by the server.
  const pending = request("DELETE", "/console/session");
  session = null;
  await pending;
}

// A job's server-sent events (GET /v1/jobs/{id}/events): the cookie authenticates the stream.
export function followJob(jobId, handlers) {
  const source = new EventSource("/v1/jobs/" + encodeURIComponent(jobId) + "/events");
  const read = (event) => { try { return JSON.parse(event.data); } catch (err) { return {}; } };
  source.addEventListener("progress", (event) => handlers.progress && handlers.progress(read(event)));
  source.addEventListener("complete", (event) => { source.close(); handlers.complete && handlers.complete(read(event)); });
  source.addEventListener("error", (event) => {
    // An `error` event from the server carries data; a dropped connection does not (EventSource retries it).
    if (event.data) { source.close(); handlers.error && handlers.error(read(event)); }
  });
  return () => source.close();
}

export const paths = {
  kbs: "/v1/knowledge-bases",
  kb: (id) => "/v1/knowledge-bases/" + encodeURIComponent(id),
  kbIndex: (id) => paths.kb(id) + "/index",
  documents: (id) => paths.kb(id) + "/documents",
  document: (id, doc) => paths.documents(id) + "/" + encodeURIComponent(doc),
  jobs: (id) => paths.kb(id) + "/jobs",
  job: (jobId) => "/v1/jobs/" + encodeURIComponent(jobId),
  questionSets: (id) => paths.kb(id) + "/question-sets",
  keys: "/v1/api-keys",
  key: (id) => "/v1/api-keys/" + encodeURIComponent(id),
};
