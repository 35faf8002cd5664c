// The declared MCP servers on the overview (admin): how each is reached, its state (idle,
// running, failed, stopped), how many tools it listed, its last error (/ui/api/mcp).
import { $, api, cell, view } from "./core.js";

export async function refreshMcp() {
  if (!view.admin) return;
  let found;
  try {
    found = await api("/ui/api/mcp");
  } catch {
    return; /* shown by the models' refresh */
  }
  $("mcp-box").hidden = found.servers.length === 0;
  const body = $("mcp-servers").tBodies[0];
  body.replaceChildren();
  for (const server of found.servers) {
    const tr = body.insertRow();
    tr.dataset.mcpServer = server.name;
    cell(tr, server.name);
    cell(tr, server.transport);
    cell(tr, server.state);
    cell(tr, server.tools === null ? "–" : server.tools, "num");
    cell(tr, server.timeout);
    cell(tr, server.error || "");
  }
}
