// The ops page: tabs, the key, the models with their controls, the config reload. The other
// views live in their own modules; everything comes from /ui/api/ (see docs/ops-page.md).
import { $, ApiError, api, bytes, cell, el, notice, num, view } from "./core.js";
import { followEvents } from "./feed.js";
import { refreshActivity, startActivity } from "./activity.js";
import { refreshPlots, startPlots } from "./plots.js";
import { startPlayground } from "./playground.js";
import { refreshBenchmarks, refreshLogs, startBenchmark } from "./bench.js";
import { refreshCache } from "./cache.js";
import { refreshBatches } from "./batches.js";
import { refreshMcp } from "./mcp.js";

const TABS = [...document.querySelectorAll("[role=tab]")];
let current = "overview";

function show(tab) {
  for (const other of TABS) {
    const on = other === tab;
    other.setAttribute("aria-selected", String(on));
    other.tabIndex = on ? 0 : -1;
    $(other.getAttribute("aria-controls")).hidden = !on;
  }
  current = tab.getAttribute("aria-controls");
  refreshCurrent();
}

// Arrow keys move between tabs (the WAI-ARIA tabs pattern); Tab leaves the tab list.
function tabKeys(event) {
  const visible = TABS.filter((tab) => !tab.hidden);
  const at = visible.indexOf(event.target);
  const next = { ArrowRight: at + 1, ArrowLeft: at - 1, Home: 0, End: visible.length - 1 }[event.key];
  if (next === undefined) return;
  event.preventDefault();
  const tab = visible[(next + visible.length) % visible.length];
  tab.focus();
  show(tab);
}

function refreshCurrent() {
  if (current === "activity") refreshActivity();
  if (current === "overview") {
    refreshPlots();
    refreshCache();
    refreshBatches();
    refreshMcp();
  }
  if (current === "benchmark") refreshBenchmarks();
  if (current === "logs") refreshLogs();
}

async function control(model, action) {
  notice(`${action} ${model}…`);
  try {
    const answer = await api(`/ui/api/models/${encodeURIComponent(model)}/${action}`, { method: "POST" });
    notice(`${action} ${model}: ${answer.state || "done"}`);
  } catch (error) {
    notice(`${action} ${model} refused (${error.status}): ${error.message}`, true);
  }
  refreshModels();
}

async function showSettings(model) {
  try {
    const settings = await api(`/ui/api/models/${encodeURIComponent(model)}/settings`);
    $("settings-model").textContent = model;
    $("settings").textContent = JSON.stringify(settings, null, 2);
    $("settings-box").hidden = false;
  } catch (error) {
    notice(`settings of ${model}: ${error.message}`, true);
  }
}

function controls(model) {
  const box = el("div", { className: "controls" });
  const button = (label, action, title) =>
    el("button", { type: "button", className: "small", title, "data-action": action, onclick: () => control(model.id, action) }, label);
  if (model.state === "loaded") box.append(button("unload", "unload", "unload now (refused while busy)"));
  else box.append(button("load", "load", "load now"));
  if (model.residency !== "pinned") {
    box.append(model.pinned_now ? button("unpin", "unpin", "back to idle_ttl") : button("pin", "pin", "keep loaded, no idle unload"));
  }
  box.append(el("button", { type: "button", className: "small ghost", "data-action": "settings", onclick: () => showSettings(model.id) }, "settings"));
  return box;
}

// An hf: model downloading: the file arriving now, as a bar with its bytes and rate.
function downloadBar(download) {
  const mb = (n) => (n / 1e6).toFixed(1);
  const bar = el("progress", { max: download.total || 1, value: download.total ? download.done : 0 });
  const total = download.total ? `/${mb(download.total)}` : "";
  const label = el("span", {}, `${download.file} ${mb(download.done)}${total} MB · ${mb(download.rate)} MB/s`);
  return el("div", { className: "download" }, bar, label);
}

// What a model holds, and of it the weights and the KV cache reserved for its window.
function memoryCell(row, model) {
  const td = cell(row, bytes(model.memory_bytes), "num memory");
  if (model.experts) {
    // `experts:`: the experts resident per layer, and the share of routed ones found resident.
    const hits = model.experts.hit_rate == null ? "–" : `${(model.experts.hit_rate * 100).toFixed(1)} % hits`;
    td.append(el("span", { className: "alias" }, `experts ${model.experts.resident}/${model.experts.experts}, ${hits}`));
  }
  if (!model.weights_bytes || !model.memory_bytes) return;
  const kv = Math.max(0, model.memory_bytes - model.weights_bytes);
  const split = `weights ${bytes(model.weights_bytes)} · KV ${kv ? bytes(kv) : "0 B"}`;
  td.append(el("span", { className: "split" }, split));
  td.title = `${split} reserved for ${model.context} tokens`;
}

// `steering:`: each steered model id of this load (the model's own, its adapters'), its
// vector's file, hash and layers: a model whose tokens are edited says so.
function steeringTags(td, model) {
  for (const [id, s] of Object.entries(model.steering || {})) {
    const file = s.file.split("/").pop();
    const who = id === model.id ? "steered" : `${id} steered`;
    const tag = el("span", { className: "alias steering" }, `${who}: ${file} ×${s.scale}`);
    tag.title = `${s.format} ${s.file}\nsha256 ${s.sha256}\nlayers ${s.layers.join(", ")}`;
    td.append(tag);
  }
}

function renderModels(models) {
  const body = $("models").tBodies[0];
  // The table is drawn again every 2 s: a keyboard user's focus on a control stays put.
  const focused = body.contains(document.activeElement) ? document.activeElement : null;
  const refocus = focused && [focused.closest("tr").dataset.model, focused.dataset.action];
  body.replaceChildren();
  for (const model of models) {
    const row = body.insertRow();
    row.dataset.model = model.id;
    const id = cell(row, model.id);
    steeringTags(id, model);
    const state = cell(row, model.state, `state ${model.state}`);
    if (model.error) state.title = model.error;
    if (model.pinned_now) state.append(el("span", { className: "alias" }, "pinned"));
    if (model.download) state.append(downloadBar(model.download));
    const aliases = row.insertCell();
    for (const alias of model.aliases) aliases.append(el("span", { className: "alias" }, alias));
    cell(row, model.queue_depth, "num");
    cell(row, model.running, "num");
    memoryCell(row, model);
    const td = row.insertCell();
    td.className = "admin-only";
    if (view.admin) td.append(controls(model)); // not only hidden: never built for a key
    cell(row, model.tokens_per_s == null ? "–" : num(model.tokens_per_s), "num");
  }
  if (refocus) {
    const [model, action] = refocus;
    const again = body.querySelector(`tr[data-model="${CSS.escape(model)}"] [data-action="${action}"]`);
    (again || body.querySelector(`tr[data-model="${CSS.escape(model)}"] button`))?.focus();
  }
}

// Every model and alias into the pickers (kept when the list has not changed).
function fillPickers(models) {
  const names = JSON.stringify(models.map((m) => [m.id, m.aliases, m.task]));
  if (names === fillPickers.last) return;
  fillPickers.last = names;
  const pick = (id, items, keepFirst) => {
    const select = $(id);
    const chosen = select.value;
    select.replaceChildren(...(keepFirst ? [select.options[0]] : []));
    for (const [value, label, data] of items) select.append(el("option", { value, "data-task": data }, label));
    if ([...select.options].some((o) => o.value === chosen)) select.value = chosen;
  };
  const ids = models.map((m) => [m.id, m.id, m.task]);
  const all = models.flatMap((m) => [[m.id, m.id, m.task], ...m.aliases.map((a) => [a, `${a} → ${m.id}`, m.task])]);
  pick("p-model", all);
  pick("b-model", ids.filter(([, , task]) => task === "chat"));
  pick("l-model", ids);
  pick("f-model", ids, true);
  $("p-model").dispatchEvent(new Event("change"));
}

export async function refreshModels() {
  const status = $("status");
  try {
    const state = await api("/ui/api/models");
    Object.assign(view, { admin: state.viewer.admin, key: state.viewer.key, models: state.models, locked: false });
    document.body.classList.toggle("admin", view.admin);
    for (const tab of TABS) tab.hidden = tab.classList.contains("admin-only") && !view.admin;
    $("viewer").textContent = view.admin ? "admin" : `key ${view.key || "(open gateway)"}: your requests only`;
    renderModels(state.models);
    fillPickers(state.models);
    const used = state.models.reduce((sum, m) => sum + (m.memory_bytes || 0), 0);
    $("budget").textContent = `memory ${bytes(used)} of ${bytes(state.memory_budget_bytes)} budget`;
    status.textContent = state.draining ? "draining" : "serving";
    status.className = `pill ${state.draining ? "draining" : "ok"}`;
  } catch (error) {
    status.className = "pill down";
    if (error instanceof ApiError && error.status === 401) {
      view.locked = true;
      status.textContent = "needs a key";
      notice("This gateway needs an API key: enter it above.", true);
    } else {
      status.textContent = "unreachable";
    }
  }
}

async function refreshReload() {
  if (!view.admin) return;
  try {
    const { last } = await api("/ui/api/reload");
    if (!last) return;
    const parts =
      last.event === "config_rejected"
        ? [`rejected (${last.trigger}): ${last.errors.join("; ")}`]
        : ["added", "removed", "changed", "restarted", "drained_first"].map((k) => `${k}: ${(last[k] || []).join(", ") || "none"}`);
    const failed = Object.entries(last.failed || {}).map(([m, why]) => `${m} failed: ${why}`);
    $("last-reload").textContent = `${last.ts.slice(0, 19).replace("T", " ")} · ${[...parts, ...failed].join(" · ")}`;
  } catch {
    /* shown by the models' refresh */
  }
}

async function reload() {
  notice("Reloading…");
  try {
    await api("/ui/api/reload", { method: "POST" });
    notice("Reloaded.");
  } catch (error) {
    notice(`Reload refused (${error.status}): ${error.message}`, true);
  }
  setTimeout(refreshReload, 300);
  refreshModels();
}

function setTheme(theme) {
  document.documentElement.dataset.theme = theme;
  localStorage.setItem("gateway-theme", theme);
  refreshPlots(true);
}

function start() {
  $("api-key").value = sessionStorage.getItem("gateway-api-key") || "";
  $("key-form").addEventListener("submit", (event) => event.preventDefault());
  $("api-key").addEventListener("change", (event) => {
    sessionStorage.setItem("gateway-api-key", event.target.value);
    notice("");
    refreshModels().then(() => {
      if (view.locked) return;
      refreshCurrent();
      refreshReload();
      if (view.admin) followEvents();
    });
  });
  const saved = localStorage.getItem("gateway-theme");
  if (saved) document.documentElement.dataset.theme = saved;
  $("theme").addEventListener("click", () => {
    const dark = getComputedStyle(document.documentElement).getPropertyValue("--scheme").trim() === "dark";
    setTheme(dark ? "light" : "dark");
  });
  for (const tab of TABS) {
    tab.addEventListener("click", () => show(tab));
    tab.addEventListener("keydown", tabKeys);
  }
  $("reload").addEventListener("click", reload);
  startActivity();
  startPlots();
  startPlayground();
  startBenchmark();
  refreshModels().then(() => {
    if (view.locked) return;
    refreshReload();
    refreshCurrent();
    if (view.admin) followEvents();
  });
  setInterval(() => {
    if (view.locked) return; // a 401 every 2 s helps no one: the key's change event resumes
    refreshModels();
    refreshCurrent();
  }, 2000);
}

start();
