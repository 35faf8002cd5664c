// Playground: a streaming chat (or embeddings) with any model or alias, through the gateway's
// OpenAI handlers (under /ui/api/playground/, where the admin key works too) with the page's key; TTFT, tokens/s and the request's events beside it.
import { $, api, eventItem, headers, notice, num, sseBlocks, view } from "./core.js";

function chosenModel() {
  const name = $("p-model").value;
  return view.models.find((m) => m.id === name || m.aliases.includes(name));
}

// The sampling fields: sent only when set; empty, the model's own values apply (shown as
// the fields' placeholders, from /ui/api/models).
const SAMPLING = { temperature: "p-temperature", top_p: "p-top-p", max_tokens: "p-max-tokens" };

function adapt() {
  const model = chosenModel();
  const embed = model && model.task === "embed";
  for (const [field, id] of Object.entries(SAMPLING)) {
    const value = model && model.sampling ? model.sampling[field] : null;
    $(id).placeholder = value == null ? "" : `model: ${value}`;
  }
  for (const node of document.querySelectorAll(".chat-only")) node.hidden = embed;
  for (const node of document.querySelectorAll(".vision-only")) node.hidden = !(model && model.images);
  $("p-input-label").textContent = embed ? "text to embed" : "message";
}

function readImage() {
  const file = $("p-image").files[0];
  if (!file || $("p-image").closest("label").hidden) return Promise.resolve(null);
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

async function chatBody() {
  const text = $("p-message").value;
  const image = await readImage();
  const messages = [];
  if ($("p-system").value.trim()) messages.push({ role: "system", content: $("p-system").value });
  const content = image ? [{ type: "text", text }, { type: "image_url", image_url: { url: image } }] : text;
  messages.push({ role: "user", content });
  const body = {
    model: $("p-model").value,
    messages,
    stream: true,
    stream_options: { include_usage: true },
  };
  for (const [field, id] of Object.entries(SAMPLING)) {
    if ($(id).value.trim() !== "") body[field] = Number($(id).value);
  }
  const schema = $("p-schema").value.trim();
  if (schema) body.response_format = { type: "json_schema", json_schema: { name: "playground", schema: JSON.parse(schema) } };
  return body;
}

// The request's events, once its `request_finished` is in the Activity store.
async function showEvents(requestId) {
  for (let attempt = 0; attempt < 20 && requestId; attempt += 1) {
    try {
      const { events } = await api(`/ui/api/activity/${requestId}`);
      $("p-events").replaceChildren(...events.map((event) => eventItem(event)));
      if (events.some((e) => e.event === "request_finished")) return;
    } catch {
      /* not written yet */
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

async function embed() {
  const started = performance.now();
  const answer = await fetch("/ui/api/playground/embeddings", {
    method: "POST",
    headers: headers({ "content-type": "application/json" }),
    body: JSON.stringify({ model: $("p-model").value, input: $("p-message").value }),
  });
  const data = await answer.json();
  if (!answer.ok) throw new Error(data.error ? data.error.message : JSON.stringify(data));
  const vector = data.data[0].embedding;
  $("p-answer").textContent = `${vector.length} dimensions: [${vector.slice(0, 8).map((v) => v.toFixed(4)).join(", ")}, …]`;
  $("p-stats").textContent = `${num(performance.now() - started, 0)} ms · ${data.usage.prompt_tokens} tokens`;
  showEvents(answer.headers.get("x-request-id"));
}

async function chat() {
  const started = performance.now();
  const response = await fetch("/ui/api/playground/chat/completions", {
    method: "POST",
    headers: headers({ "content-type": "application/json" }),
    body: JSON.stringify(await chatBody()),
  });
  const requestId = response.headers.get("x-request-id");
  if (!response.ok) {
    const data = await response.json().catch(() => ({}));
    throw new Error(data.error ? data.error.message : `HTTP ${response.status}`);
  }
  let first = null;
  let usage = null;
  for await (const raw of sseBlocks(response)) {
    const block = raw.trim();
    if (!block.startsWith("data:") || block === "data: [DONE]") continue;
    const chunk = JSON.parse(block.slice(5));
    if (chunk.usage) usage = chunk.usage;
    if (chunk.error) throw new Error(chunk.error.message || JSON.stringify(chunk.error));
    const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
    const text = delta ? (delta.content || "") + (delta.reasoning_content || "") : "";
    if (text) {
      first = first || performance.now();
      $("p-answer").textContent += text;
      $("p-stats").textContent = `TTFT ${num(first - started, 0)} ms · streaming…`;
    }
  }
  const ended = performance.now();
  const tokens = usage ? usage.completion_tokens : null;
  const rate = tokens && first && ended > first ? tokens / ((ended - first) / 1000) : null;
  $("p-stats").textContent = `TTFT ${first ? num(first - started, 0) : "–"} ms · ${tokens ?? "–"} tokens · ${num(rate)} tokens/s · ${requestId}`;
  showEvents(requestId);
}

async function send(event) {
  event.preventDefault();
  $("p-answer").textContent = "";
  $("p-events").replaceChildren();
  $("p-stats").textContent = "sending…";
  $("p-send").disabled = true;
  try {
    const model = chosenModel();
    await (model && model.task === "embed" ? embed() : chat());
  } catch (error) {
    $("p-stats").textContent = "";
    notice(`Playground: ${error.message}`, true);
  } finally {
    $("p-send").disabled = false;
  }
}

export function startPlayground() {
  $("p-model").addEventListener("change", adapt);
  $("chat-form").addEventListener("submit", send);
  // Ctrl+Enter (⌘+Enter) sends from the message box.
  $("p-message").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) $("chat-form").requestSubmit();
  });
}
