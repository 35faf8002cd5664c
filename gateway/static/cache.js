// The KV cache's disk tier on the overview (admin): where, how full, and per model the
// hits and reused tokens by tier since the gateway started (/ui/api/cache).
import { $, api, bytes, cell, view } from "./core.js";

export async function refreshCache() {
  if (!view.admin) return;
  let cache;
  try {
    cache = await api("/ui/api/cache");
  } catch {
    return; /* shown by the models' refresh */
  }
  $("kv-summary").textContent = cache.dir
    ? `${cache.dir} · ${bytes(cache.disk_bytes)} of ${bytes(cache.max_bytes)} · ${cache.blocks} blocks · ` +
      `evicted ${cache.evicted_blocks} blocks (${bytes(cache.evicted_bytes)})`
    : "off (server.cache)";
  const body = $("kv-cache").tBodies[0];
  body.replaceChildren();
  for (const [model, row] of Object.entries(cache.models)) {
    const tr = body.insertRow();
    tr.dataset.kvModel = model;
    cell(tr, model);
    for (const value of [row.hits.ram, row.hits.disk, row.misses, row.reused_tokens.ram, row.reused_tokens.disk]) {
      cell(tr, value, "num");
    }
    cell(tr, bytes(row.saved_bytes), "num");
    cell(tr, row.corrupt_blocks, "num");
  }
}
