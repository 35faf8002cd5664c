// Plots over 5 min, 1 h or 24 h from /ui/api/history, drawn with uPlot (vendored: uplot.min.js,
// MIT, see uplot.LICENSE). A chart is rebuilt only when its series change; else new data.
import { $, api, bytes, view } from "./core.js";

const PALETTE = ["#3558d6", "#1f8a4c", "#c0392b", "#b7791f", "#8e44ad", "#16a085", "#d35400", "#7f8c8d"];
const charts = new Map(); // name -> { plot, signature }

function windowChosen() {
  return document.querySelector("input[name=window]:checked").value;
}

function colors() {
  const style = getComputedStyle(document.documentElement);
  return { ink: style.getPropertyValue("--muted").trim() || "#888", grid: style.getPropertyValue("--line").trim() || "#ddd" };
}

// Axis labels with as many decimals as the ticks' step needs: 0, 0.001 and 0.002 s read as
// such, not as three "0.00". A `format` of its own (bytes) labels the ticks as it likes.
function tickLabels(format, exact) {
  if (exact) return (_, ticks) => ticks.map(format);
  return (_, ticks, _axis, _space, step) => {
    const digits = step > 0 ? Math.min(6, Math.max(0, Math.ceil(-Math.log10(step) - 1e-9))) : 2;
    return ticks.map((t) => (Math.abs(t) >= 100 ? t.toFixed(0) : t.toFixed(digits)));
  };
}

function draw(name, title, times, series, { format = (v) => v, fills = false, references = 0, exact = false, whole = false, fromZero = false } = {}) {
  const box = $("plots");
  let holder = box.querySelector(`[data-chart="${name}"]`);
  if (!holder) {
    holder = document.createElement("figure");
    holder.dataset.chart = name;
    holder.setAttribute("aria-label", title);
    box.append(holder);
  }
  // What the tests (and a screen reader's label) read: the sum of every point drawn.
  const total = series.reduce((sum, s) => sum + s.values.reduce((a, v) => a + (v || 0), 0), 0);
  holder.dataset.total = String(total);
  holder.dataset.series = String(series.length);
  holder.title = `${title}: ${series.map((s) => s.label).join(", ") || "no data yet"}`;
  const data = [times, ...series.map((s) => s.values)];
  const signature = JSON.stringify([series.map((s) => s.label), document.documentElement.dataset.theme, box.clientWidth]);
  const known = charts.get(name);
  if (known && known.signature === signature) {
    known.plot.setData(data);
    return;
  }
  if (known) known.plot.destroy();
  const { ink, grid } = colors();
  const axis = { stroke: ink, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid } };
  const width = Math.max(240, holder.clientWidth);
  const plot = new uPlot(
    {
      title,
      width,
      height: 170,
      series: [
        {},
        ...series.map((s, i) => {
          const color = s.color || PALETTE[i % PALETTE.length];
          const last = i >= series.length - references; // dashed reference lines, unfilled
          return { label: s.label, stroke: color, width: 1.5, fill: fills && !last ? `${color}55` : undefined, dash: last ? [6, 4] : undefined, value: (_, v) => (v == null ? "–" : format(v)), spanGaps: false };
        }),
      ],
      axes: [
        { ...axis, space: 70, values: (_, ticks) => ticks.map((t) => new Date(t * 1000).toTimeString().slice(0, 5)) },
        // `whole`: counts (a queue's depth) step by whole numbers, never 0.2.
        { ...axis, size: 64, values: tickLabels(format, exact), ...(whole ? { incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000] } : {}) },
      ],
      // The y axis's labels as drawn (on the canvas), for a reader of the page's DOM (tests).
      hooks: { draw: [(u) => (holder.dataset.yLabels = JSON.stringify(u.axes[1]._values || []))] },
      // `fromZero`: a stacked amount (memory held) is read against its zero.
      ...(fromZero ? { scales: { y: { range: (_, _min, max) => [0, max > 0 ? max * 1.05 : 1] } } } : {}),
      legend: { live: true },
      cursor: { drag: { x: false, y: false } },
    },
    data,
    holder,
  );
  charts.set(name, { plot, signature });
}

// A series per model with something to show; `zeros`: a sampled 0 (an empty queue) is
// something, so the plot draws its line instead of an empty frame.
function perModel(history, field, scale = 1, zeros = false) {
  return Object.entries(history.models)
    .filter(([, s]) => s[field].some((v) => v != null && (zeros || v !== 0)))
    .map(([model, s]) => ({ label: model, values: s[field].map((v) => (v == null ? null : v * scale)) }));
}

// Memory held per model, stacked (each series is the sum of those below it), and the budget.
function memory(history) {
  const models = Object.entries(history.models).filter(([, s]) => s.memory_bytes.some((v) => v));
  let running = history.t.map(() => 0);
  const stacked = models.map(([model, s]) => {
    running = running.map((sum, i) => sum + (s.memory_bytes[i] || 0));
    return { label: model, values: running };
  });
  stacked.reverse(); // the tallest drawn first, so each lower band shows over it
  stacked.push({ label: "device", values: history.t.map(() => history.device_memory_bytes), color: "#b7791f" });
  stacked.push({ label: "memory_budget", values: history.t.map(() => history.memory_budget_bytes), color: "#888888" });
  return stacked;
}

let refreshing = false;

export async function refreshPlots(rebuild = false) {
  if (refreshing || $("overview").hidden || !window.uPlot) return;
  refreshing = true;
  try {
    if (rebuild) {
      for (const { plot } of charts.values()) plot.destroy();
      charts.clear();
    }
    const history = await api(`/ui/api/history?window=${windowChosen()}`);
    const t = history.t;
    const two = (v) => (Math.abs(v) >= 100 ? v.toFixed(0) : v.toFixed(2));
    draw("tokens", "tokens/s", t, perModel(history, "tokens_per_s"), { format: two });
    draw("requests", "requests/s", t, perModel(history, "requests_per_s"), { format: two });
    const ttft = [
      ...perModel(history, "ttft_p50_s", 1000).map((s) => ({ ...s, label: `${s.label} p50` })),
      ...perModel(history, "ttft_p95_s", 1000).map((s) => ({ ...s, label: `${s.label} p95` })),
    ];
    draw("ttft", "TTFT (ms)", t, ttft, { format: (v) => v.toFixed(0) });
    const errors = Object.entries(history.errors).map(([kind, values]) => ({ label: `HTTP ${kind}`, values }));
    draw("errors", "errors (requests)", t, errors, { format: two });
    if (view.admin) {
      const depth = perModel(history, "queue_depth", 1, true);
      draw("queue", "queue depth", t, depth, { format: (v) => v.toFixed(0), exact: true, whole: true });
      draw("wait", "queue wait (s, max)", t, perModel(history, "queue_wait_s", 1, true), { format: two });
      const held = (v) => (v ? bytes(v) : "0 B"); // bytes(0) is the tables' "–"
      draw("memory", "memory (stacked) vs budget and device", t, memory(history), { format: held, exact: true, fromZero: true, fills: true, references: 2 });
    }
  } catch {
    /* the models' refresh says what is wrong */
  } finally {
    refreshing = false;
  }
}

export function startPlots() {
  for (const radio of document.querySelectorAll("input[name=window]")) radio.addEventListener("change", () => refreshPlots(true));
  window.addEventListener("resize", () => refreshPlots(true));
}
