// The live event feed (admin): /ui/events read through fetch as SSE, so the key can travel
// as a header. A reconnecting feed replays its recent lines; each is shown once.
import { $, eventItem, headers, sseBlocks } from "./core.js";

const MAX_EVENTS = 300;
const shown = new Set();
const ownRequests = new Set(); // request ids of the page's own calls
let feedAbort = null;
let feedRetry = null;

function isOwn(event) {
  const rid = event.request_id;
  if (!rid) return false;
  const path = String(event.path || "");
  // The page's polling and controls, not its playground's chats (those are real requests).
  if (event.event === "request_started" && path.startsWith("/ui") && !path.startsWith("/ui/api/playground/")) ownRequests.add(rid);
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
  const list = $("events");
  list.prepend(eventItem(event, line));
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

export async function followEvents() {
  clearTimeout(feedRetry);
  if (feedAbort) feedAbort.abort();
  const abort = new AbortController();
  feedAbort = abort;
  try {
    const response = await fetch("/ui/events", { headers: headers(), signal: abort.signal });
    if (!response.ok) throw new Error(`feed answered ${response.status}`);
    $("feed-state").textContent = "(live)";
    for await (const block of sseBlocks(response)) handleMessage(block);
  } catch {
    if (abort.signal.aborted) return;
  }
  if (feedAbort === abort) {
    $("feed-state").textContent = "(reconnecting…)";
    feedRetry = setTimeout(followEvents, 2000);
  }
}
