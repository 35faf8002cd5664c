// Every key's batches on the overview (admin): status, progress by request_counts, and a
// cancel control for those still running (/ui/api/batches, /ui/api/batches/{id}/cancel).
import { $, api, cell, clock, el, notice, view } from "./core.js";

const CANCELLABLE = new Set(["validating", "in_progress"]);

export async function refreshBatches() {
  if (!view.admin) return;
  let page;
  try {
    page = await api("/ui/api/batches?limit=20");
  } catch {
    return; /* shown by the models' refresh */
  }
  $("batches-summary").textContent = page.data.length ? `newest ${page.data.length}${page.has_more ? " (more in /admin/batches)" : ""}` : "none";
  const body = $("batches").tBodies[0];
  const focused = document.activeElement?.closest?.("#batches tr")?.dataset.batch;
  body.replaceChildren();
  for (const { owner, batch } of page.data) {
    const row = body.insertRow();
    row.dataset.batch = batch.id;
    cell(row, batch.id);
    cell(row, owner);
    cell(row, batch.endpoint);
    cell(row, batch.status, `state ${batch.status}`);
    const counts = batch.request_counts;
    const progress = cell(row, `${counts.completed + counts.failed} / ${counts.total}`, "num");
    progress.title = `completed ${counts.completed}, failed ${counts.failed}, of ${counts.total}`;
    progress.append(el("progress", { max: counts.total || 1, value: counts.completed + counts.failed }));
    cell(row, counts.failed, "num");
    cell(row, clock(batch.created_at));
    const td = row.insertCell();
    if (CANCELLABLE.has(batch.status)) {
      const button = el("button", { type: "button", "data-action": "cancel-batch", onclick: () => cancel(batch.id) }, "Cancel");
      td.append(button);
      if (focused === batch.id) button.focus();
    }
  }
}

async function cancel(id) {
  notice(`cancelling ${id}…`);
  try {
    const batch = await api(`/ui/api/batches/${encodeURIComponent(id)}/cancel`, { method: "POST" });
    notice(`${id}: ${batch.status}`);
  } catch (error) {
    notice(`${id}: ${error.message}`, true);
  }
  refreshBatches();
}
