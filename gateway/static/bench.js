// Benchmark (admin): run one, list the runs kept. Model logs (admin): a model's own events.
import { $, api, cell, clock, eventItem, notice, num } from "./core.js";

function renderRuns(runs) {
  const body = $("bench-rows").tBodies[0];
  body.replaceChildren();
  for (const run of runs) {
    for (const result of run.results.runs) {
      const row = body.insertRow();
      row.dataset.benchmark = String(run.id);
      cell(row, clock(run.ts));
      cell(row, run.model);
      cell(row, result.prompt_tokens, "num");
      cell(row, run.settings.max_tokens, "num");
      cell(row, result.streams, "num");
      cell(row, num(result.prefill_tps), "num");
      cell(row, num(result.decode_tps), "num");
      cell(row, num(result.aggregate_tps), "num");
      cell(row, `${num(result.wall_s, 2)} s`, "num");
    }
  }
}

export async function refreshBenchmarks() {
  try {
    renderRuns((await api("/ui/api/benchmarks")).runs);
  } catch {
    /* the models' refresh says what is wrong */
  }
}

async function run(event) {
  event.preventDefault();
  const body = {
    model: $("b-model").value,
    prompt_tokens: Number($("b-prompt").value),
    max_tokens: Number($("b-max").value),
    streams: Number($("b-streams").value),
    force: $("b-force").checked,
  };
  $("b-run").disabled = true;
  notice(`benchmarking ${body.model}…`);
  try {
    await api("/ui/api/benchmark", { method: "POST", body });
    notice(`benchmark of ${body.model} done`);
  } catch (error) {
    notice(`benchmark refused (${error.status}): ${error.message}`, true);
  } finally {
    $("b-run").disabled = false;
  }
  refreshBenchmarks();
}

// The model's events past the last one shown; a new model starts the list again.
let logModel = null;
let lastId = 0;

export async function refreshLogs() {
  const model = $("l-model").value;
  if (!model) return;
  if (model !== logModel) {
    logModel = model;
    lastId = 0;
    $("model-log").replaceChildren();
  }
  try {
    const { events } = await api(`/ui/api/models/${encodeURIComponent(model)}/events?after=${lastId}`);
    if (model !== logModel) return;
    for (const event of events) {
      lastId = Math.max(lastId, event.id);
      $("model-log").prepend(eventItem(event));
    }
  } catch {
    /* the models' refresh says what is wrong */
  }
}

export function startBenchmark() {
  $("bench-form").addEventListener("submit", run);
  $("l-model").addEventListener("change", refreshLogs);
}
