// The ops page: models from /ui/state (polled), the live log from /ui/events (SSE read
// through fetch, so the API key can travel as a header), and the reload button.
// Every value from the gateway goes into the page as text, never as HTML.
"use strict";

const MAX_EVENTS = 300;
const $ = (id) => document.getElementById(id);
let feedAbort = null;
let feedRetry = null;
// Lines already shown: a reconnecting feed replays its recent lines, shown once only.
const shown = new Set();

function headers(key) {
  return key ? { authorization: `Bearer ${key}` } : {};
}

function apiKey() {
  return sessionStorage.getItem("gateway-api-key") || "";
}

function notice(text, isError = false) {
  $("notice").textContent = text;
  $("notice").className = isError ? "error" : "";
}

function cell(row, text, className) {
  const td = row.insertCell();
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

// An hf: model downloading: the file arriving now, as a bar with its bytes and rate.
function downloadBar(download) {
  const box = document.createElement("div");
  box.className = "download";
  const bar = document.createElement("progress");
  bar.max = download.total || 1;
  bar.value = download.total ? download.done : 0;
  const mb = (n) => (n / 1e6).toFixed(1);
  const label = document.createElement("span");
  const total = download.total ? `/${mb(download.total)}` : "";
  label.textContent = `${download.file} ${mb(download.done)}${total} MB · ${mb(download.rate)} MB/s`;
  box.append(bar, label);
  return box;
}

function renderModels(models) {
  const body = $("models").tBodies[0];
  body.replaceChildren();
  for (const model of models) {
    const row = body.insertRow();
    row.dataset.model = model.id;
    cell(row, model.id);
    const state = cell(row, model.state, `state ${model.state}`);
    if (model.error) state.title = model.error;
    if (model.download) state.append(downloadBar(model.download));
    const aliases = row.insertCell();
    for (const alias of model.aliases) {
      const tag = document.createElement("span");
      tag.className = "alias";
      tag.textContent = alias;
      aliases.append(tag);
    }
    cell(row, String(model.queue_depth), "num");
    cell(row, String(model.running), "num");
    cell(row, model.tokens_per_s == null ? "–" : model.tokens_per_s.toFixed(1), "num");
  }
}

async function refreshState() {
  const status = $("status");
  try {
    const response = await fetch("/ui/state", { headers: headers(apiKey()) });
    if (response.status === 401) {
      status.textContent = "needs a key";
      status.className = "pill down";
      notice("This gateway needs an API key: enter it above.", true);
      return;
    }
    if (response.status === 403) {
      status.textContent = "needs the admin key";
      status.className = "pill down";
      notice("This page shows every model and every client's events: enter the admin key.", true);
      return;
    }
    const state = await response.json();
    renderModels(state.models);
    status.textContent = state.draining ? "draining" : "serving";
    status.className = `pill ${state.draining ? "draining" : "ok"}`;
  } catch (error) {
    status.textContent = "unreachable";
    status.className = "pill down";
  }
}

function summary(event) {
  const skip = new Set(["event", "ts", "level", "request_id"]);
  return Object.entries(event)
    .filter(([key, value]) => !skip.has(key) && value !== null && value !== "")
    .map(([key, value]) => `${key}=${typeof value === "object" ? JSON.stringify(value) : value}`)
    .join(" ");
}

// Request ids of the page's own polling (paths under /ui), hidden when the box is ticked.
const ownRequests = new Set();

function isOwn(event) {
  const rid = event.request_id;
  if (!rid) return false;
  if (event.event === "request_started" && String(event.path || "").startsWith("/ui")) ownRequests.add(rid);
  const own = ownRequests.has(rid);
  if (event.event === "request_finished") ownRequests.delete(rid);
  return own && $("hide-own").checked;
}

function addEvent(line) {
  let event;
  try {
    event = JSON.parse(line);
  } catch {
    return;
  }
  if (shown.has(line) || isOwn(event)) return;
  shown.add(line);
  const item = document.createElement("li");
  item.className = event.level || "info";
  item.dataset.event = event.event;
  const parts = [
    ["ts", (event.ts || "").slice(11, 23)],
    ["name", event.event],
    ["rid", event.request_id || ""],
    ["fields", summary(event)],
  ];
  for (const [className, text] of parts) {
    const span = document.createElement("span");
    span.className = className;
    span.textContent = text;
    item.append(span);
  }
  item.title = line;
  const list = $("events");
  list.prepend(item);
  while (list.children.length > MAX_EVENTS) {
    shown.delete(list.lastElementChild.title);
    list.lastElementChild.remove();
  }
}

function handleMessage(block) {
  let kind = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) kind = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
  }
  if (!data.length) return;
  if (kind === "dropped") $("feed-state").textContent = `(${data.join("")} lines missed: the page fell behind)`;
  else addEvent(data.join("\n"));
}

async function followEvents() {
  clearTimeout(feedRetry);
  if (feedAbort) feedAbort.abort();
  const abort = new AbortController();
  feedAbort = abort;
  try {
    const response = await fetch("/ui/events", { headers: headers(apiKey()), signal: abort.signal });
    if (!response.ok) throw new Error(`feed answered ${response.status}`);
    $("feed-state").textContent = "(live)";
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value.replace(/\r\n/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        handleMessage(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
      }
    }
  } catch (error) {
    if (abort.signal.aborted) return;
  }
  if (feedAbort === abort) {
    $("feed-state").textContent = "(reconnecting…)";
    feedRetry = setTimeout(followEvents, 2000);
  }
}

async function reload(submitEvent) {
  submitEvent.preventDefault();
  const key = $("admin-key").value;
  notice("Reloading…");
  try {
    const response = await fetch("/admin/reload", { method: "POST", headers: headers(key) });
    const body = await response.json();
    if (response.ok) {
      const changes = ["added", "removed", "changed", "unchanged"]
        .map((kind) => `${kind}: ${body[kind].join(", ") || "none"}`)
        .join(" · ");
      notice(`Reloaded. ${changes}`);
      refreshState();
    } else {
      const message = body.error && body.error.message ? body.error.message : JSON.stringify(body);
      notice(`Reload refused (${response.status}): ${message}`, true);
    }
  } catch (error) {
    notice(`Reload failed: ${error}`, true);
  }
}

$("api-key").value = apiKey();
$("key-form").addEventListener("submit", (event) => event.preventDefault());
$("api-key").addEventListener("change", (event) => {
  sessionStorage.setItem("gateway-api-key", event.target.value);
  notice("");
  refreshState();
  followEvents();
});
$("reload-form").addEventListener("submit", reload);
refreshState();
setInterval(refreshState, 2000);
followEvents();
