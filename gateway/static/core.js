// Shared by the page's modules: the key, calls to /ui/api/, notices, and safe DOM building.
// Every value from the gateway goes into the page as text, never as HTML.
export const $ = (id) => document.getElementById(id);

export function apiKey() {
  return sessionStorage.getItem("gateway-api-key") || "";
}

export function headers(extra = {}) {
  const key = apiKey();
  return key ? { authorization: `Bearer ${key}`, ...extra } : { ...extra };
}

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// A JSON call to the gateway; a refusal becomes an ApiError carrying its message.
export async function api(path, { method = "GET", body } = {}) {
  const init = { method, headers: headers(body ? { "content-type": "application/json" } : {}) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = data.error;
    const message = typeof error === "string" ? error : (error && error.message) || JSON.stringify(data);
    throw new ApiError(response.status, message);
  }
  return data;
}

// A server-sent-events body, one message block (its lines, without the blank line) at a time.
export async function* sseBlocks(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      yield buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
    }
  }
}

export function notice(text, isError = false) {
  $("notice").textContent = text;
  $("notice").className = isError ? "error" : "";
}

// An element with attributes (on* as listeners) and children (strings become text).
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value == null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "className") node.className = value;
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children) node.append(child instanceof Node ? child : String(child ?? ""));
  return node;
}

export function cell(row, text, className) {
  const td = row.insertCell();
  td.textContent = text == null || text === "" ? "–" : String(text);
  if (className) td.className = className;
  return td;
}

export function num(value, digits = 1) {
  return value == null ? "–" : Number(value).toFixed(digits);
}

export function bytes(n) {
  if (!n) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

export function clock(seconds) {
  return new Date(seconds * 1000).toLocaleTimeString([], { hour12: false });
}

// One event as `key=value …`, without the fields every line has.
export function summary(event) {
  const skip = new Set(["event", "ts", "level", "request_id", "id"]);
  return Object.entries(event)
    .filter(([key, value]) => !skip.has(key) && value !== null && value !== "")
    .map(([key, value]) => `${key}=${typeof value === "object" ? JSON.stringify(value) : value}`)
    .join(" ");
}

// An event as a line of a log list: time, name, request id, fields.
export function eventItem(event, line) {
  const item = el("li", { className: event.level || "info" });
  item.dataset.event = event.event;
  item.append(
    el("span", { className: "ts" }, (event.ts || "").slice(11, 23)),
    el("span", { className: "name" }, event.event),
    el("span", { className: "rid" }, event.request_id || ""),
    el("span", { className: "fields" }, summary(event)),
  );
  item.title = line || JSON.stringify(event);
  return item;
}

// Shared state the modules read: the latest /ui/api/models answer.
// `locked`: the gateway answered 401; nothing more is asked until a key is entered.
export const view = { admin: false, key: null, models: [], locked: false };
