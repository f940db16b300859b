// What both pages share: calling the service with a key (in a header, never in an address) and
// a time limit, building elements from text (never from markup), and showing a request as curl.

export const $ = (selector, root = document) => root.querySelector(selector);

// An element with attributes and children (strings become text nodes: nothing is parsed as HTML).
export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

export class ApiError extends Error {
  // status 0: no answer at all (the service is down, unreachable, or too slow).
  // retryAfter: the answer's Retry-After in seconds (429, 503), or null.
  constructor(status, message, data = null, retryAfter = null) {
    super(message);
    this.status = status;
    this.data = data;
    this.retryAfter = retryAfter;
  }
}

export const NOT_ANSWERING = "The service is not answering";

// fetch with the key as X-API-Key, a JSON body, and a time limit; the answer's JSON (or text).
// `signal` lets the caller abandon the call (an AbortError is thrown, not an ApiError).
export async function call(method, path, { key, body, timeoutMs = 30000, signal } = {}) {
  const headers = { Accept: "application/json" };
  if (key) headers["X-API-Key"] = key;
  let payload;
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    payload = JSON.stringify(body);
  }
  const timer = AbortSignal.timeout(timeoutMs);
  const signals = signal ? AbortSignal.any([timer, signal]) : timer;
  let response;
  let text;
  try {
    response = await fetch(path, {
      method, headers, body: payload, signal: signals, credentials: "omit", cache: "no-store",
    });
    text = await response.text();
  } catch (error) {
    if (signal && signal.aborted) throw error;
    const why = timer.aborted ? `no answer within ${Math.round(timeoutMs / 1000)} s` : "no connection";
    throw new ApiError(0, `${NOT_ANSWERING} (${why}).`);
  }
  let data = text;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    // not JSON: keep the text
  }
  if (!response.ok) {
    const said = data && typeof data === "object" ? data.message || data.error : null;
    let message = said || `${response.status} ${response.statusText}`;
    if (response.status >= 502 && response.status <= 504 && !said) message = `${NOT_ANSWERING} (${response.status}).`;
    const retryAfter = Number(response.headers.get("retry-after")) || null;
    throw new ApiError(response.status, message, data, retryAfter);
  }
  return { data, response, text };
}

// A shell-quoted word for curl examples.
export function shellQuote(text) {
  return "'" + String(text).replaceAll("'", "'\\''") + "'";
}

// The curl command for a call, with the key as a variable: the example never shows the key.
export function curlCommand(method, path, body, keyVariable = "$SERVAL_API_KEY") {
  const lines = [`curl -sS -X ${method} ${shellQuote(location.origin + path)}`];
  lines.push(`  -H "X-API-Key: ${keyVariable}"`);
  if (body !== undefined) {
    lines.push("  -H 'Content-Type: application/json'");
    lines.push(`  -d ${shellQuote(JSON.stringify(body))}`);
  }
  return lines.join(" \\\n");
}

// "HTTP/1.1 200 OK" plus the headers worth showing and the pretty-printed body, cut short.
export function answerText(response, data, limit = 3000) {
  const lines = [`HTTP/1.1 ${response.status} ${response.statusText || ""}`.trimEnd()];
  for (const name of ["content-type", "x-model-revision", "retry-after"]) {
    const value = response.headers.get(name);
    if (value) lines.push(`${name}: ${value}`);
  }
  const body = typeof data === "string" ? data : JSON.stringify(data, null, 2);
  lines.push("", body.length > limit ? body.slice(0, limit) + "\n…" : body);
  return lines.join("\n");
}

export function bytes(count) {
  if (!count) return "0";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = count;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value >= 10 || unit === 0 ? Math.round(value) : value.toFixed(1)} ${units[unit]}`;
}

export function ago(when, now = Date.now()) {
  const seconds = Math.max(0, Math.round((now - new Date(when).getTime()) / 1000));
  if (seconds < 60) return `${seconds} s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return `${Math.floor(seconds / 86400)} d ago`;
}

export function shortTime(when) {
  return when ? new Date(when).toLocaleString() : "";
}

// Storage may be off (a private window's settings): the pages then work without remembering.
export function remembered(storage, name) {
  try {
    return storage.getItem(name) || "";
  } catch {
    return "";
  }
}

export function remember(storage, name, value) {
  try {
    if (value) storage.setItem(name, value);
    else storage.removeItem(name);
  } catch {
    // not kept: fine
  }
}
