// Activity: one row per request, newest first, filtered; a row opens its event trail.
import { $, api, cell, clock, el, eventItem, notice, num, view } from "./core.js";

let openTrail = null;

function filters() {
  const params = new URLSearchParams({ limit: "200" });
  const add = (name, id) => $(id).value.trim() && params.set(name, $(id).value.trim());
  add("model", "f-model");
  add("key", "f-key");
  add("status", "f-status");
  add("protocol", "f-protocol");
  return params;
}

async function cancel(requestId) {
  try {
    await api(`/ui/api/requests/${requestId}/cancel`, { method: "POST" });
    notice(`cancelled ${requestId}`);
  } catch (error) {
    notice(`cancel ${requestId}: ${error.message}`, true);
  }
  refreshActivity();
}

function detail(row) {
  return Object.entries(row.detail || {}).map(([k, v]) => `${k}=${v}`).join(" ");
}

// Prefill's rate is of the tokens computed, not of those a cache served. When the cache
// served most of the prompt, a rate over the few left measures the step's overhead, not
// prefill: the cell says "cached" and how many tokens were new.
function prefillCell(tr, row) {
  const cached = row.cached_tokens || 0;
  const computed = (row.prompt_tokens || 0) - cached;
  if (cached && computed <= cached) {
    const td = cell(tr, computed ? `cached (${computed} new)` : "cached", "num");
    td.title = `${cached} of ${row.prompt_tokens} prompt tokens from the cache` + (row.prefill_tps ? `; ${num(row.prefill_tps)} tokens/s over the ${computed} new` : "");
    return;
  }
  cell(tr, num(row.prefill_tps), "num");
}

function render(rows) {
  const body = $("activity-rows").tBodies[0];
  const focused = document.activeElement && document.activeElement.dataset.rid;
  body.replaceChildren();
  for (const row of rows) {
    const tr = body.insertRow();
    tr.dataset.rid = row.request_id;
    tr.tabIndex = 0;
    tr.title = `${row.request_id}: Enter opens its events`;
    const model = row.requested && row.requested !== row.model ? `${row.requested} → ${row.model}` : row.model;
    const status = row.status == null ? "running" : row.status;
    cell(tr, clock(row.ts));
    cell(tr, row.key);
    cell(tr, row.protocol);
    cell(tr, model);
    cell(tr, status, `status s${String(status)[0]}`);
    cell(tr, row.prompt_tokens, "num");
    cell(tr, row.cached_tokens, "num");
    cell(tr, row.new_tokens, "num");
    cell(tr, row.ttft_s == null ? null : `${num(row.ttft_s * 1000, 0)} ms`, "num");
    prefillCell(tr, row);
    cell(tr, num(row.decode_tps), "num");
    cell(tr, row.duration_ms == null ? null : `${num(row.duration_ms, 0)} ms`, "num");
    cell(tr, row.finish);
    cell(tr, row.guardrail);
    cell(tr, detail(row), "small-text");
    const actions = tr.insertCell();
    actions.className = "admin-only";
    if (row.status == null && view.admin) {
      actions.append(el("button", { type: "button", className: "small danger", onclick: (e) => { e.stopPropagation(); cancel(row.request_id); } }, "cancel"));
    }
    tr.addEventListener("click", () => showTrail(row.request_id));
    tr.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        showTrail(row.request_id);
      }
    });
    if (focused === row.request_id) tr.focus();
  }
}

export async function showTrail(requestId) {
  openTrail = requestId;
  try {
    const { row, events } = await api(`/ui/api/activity/${requestId}`);
    $("trail-id").textContent = requestId;
    $("capture-box").hidden = !row.capture;
    $("capture-request").textContent = row.capture ? row.capture.request : "";
    $("capture-response").textContent = row.capture ? row.capture.response : "";
    const calls = row.capture ? row.capture.tool_calls : null;
    $("capture-tools-box").hidden = !calls;
    $("capture-tools").textContent = calls || "";
    $("trail").replaceChildren(...events.map((event) => eventItem(event)));
    $("trail-box").hidden = false;
  } catch (error) {
    notice(`events of ${requestId}: ${error.message}`, true);
  }
}

export async function refreshActivity() {
  try {
    const { rows } = await api(`/ui/api/activity?${filters()}`);
    render(rows);
    if (openTrail && rows.some((r) => r.request_id === openTrail && r.status == null)) showTrail(openTrail);
  } catch {
    /* the models' refresh says what is wrong */
  }
}

export function startActivity() {
  $("filters").addEventListener("submit", (event) => event.preventDefault());
  for (const id of ["f-model", "f-key", "f-status", "f-protocol"]) $(id).addEventListener("change", refreshActivity);
}
