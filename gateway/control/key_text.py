"""What each model key means, in the words of the config reference (docs/config.md).

Data only: `gateway.control.key_docs` renders it with `MODEL_KEYS` as the reference's table of
model keys, one row per entry, in `MODEL_KEYS`' order. Every key of `MODEL_KEYS` has its rows
here (a test holds the two to each other). A row's `default` is read from `ModelConfig`'s own
defaults unless it says otherwise in words ("required", "inferred", ...). Longer than our
modules usually are because it is prose: one row of the reference per entry.
"""

from __future__ import annotations

from typing import NamedTuple


class KeyRow(NamedTuple):
    """One row of the table: the key or dotted sub-key (several joined by ", "), what it
    does, and its default in words where the struct's own default would not say it."""

    keys: str
    text: str
    default: str | None = None


# `id` is no entry of MODEL_KEYS (it names the model rather than setting it): the first row.
ID_ROW = KeyRow("id", "the model's name; letters, digits and `. _ : / -`", default="required")

KEY_TEXT: dict[str, tuple[KeyRow, ...]] = {
    "engine": (
        KeyRow(
            "engine",
            "`mlx` (mlx-lm), `scripted` (deterministic, no weights), `upstream` (OpenAI-protocol "
            "servers elsewhere) or `process` (a server program the gateway runs): see [Remote "
            "models](sources.md#remote-models-engine-upstream-and-engine-process)",
        ),
    ),
    "source": (
        KeyRow(
            "source",
            "a directory in MLX/Hugging Face layout, a `.gguf` file (converted once to MLX and "
            "cached under `$GATEWAY_CACHE_DIR` or `~/.cache/mlx-gateway`, keyed by the file's "
            "SHA-256; an entry is checked at every load against the sizes and sampled SHA-256 "
            "checksums (size, first and last 64 KiB, 16 blocks between) recorded when it was "
            "written, and rebuilt once when damaged, with a `cache_rebuilt` event; the temp "
            "directories of conversions killed midway are removed at the next load, and a load "
            "error names both the source and the cache entry), `package:MODULE/RESOURCE` for a "
            "file inside an installed Python package, or `hf:ORG/REPO[@REVISION]` / "
            "`hf:ORG/REPO/FILE.gguf[@REVISION]` on the Hugging Face Hub (see [Model "
            "sources](sources.md#model-sources)); relative paths are relative to the config file",
            default="required for `mlx`",
        ),
    ),
    "aliases": (KeyRow("aliases", "other names clients may use; unique across the file"),),
    "residency": (
        KeyRow(
            "residency",
            "`pinned` loads at startup and stays; `{on_demand: true, idle_ttl: 10m}` loads at "
            "the first request (which waits in the model's queue meanwhile; concurrent first "
            "requests share one load) and unloads after `idle_ttl` without requests. Before a "
            "load the memory budget makes room by unloading the least recently used idle "
            "on-demand model, or waits for busy on-demand ones to end their burst ([swap-aware "
            "admission](#swap-aware-admission)); when nothing can be freed (the room is pinned "
            "models') the request gets a 503 saying why. A model that failed to load is tried "
            "again by the first request after a back-off (1 s, doubling per failure in a row, at "
            "most 60 s; meanwhile 503 with `Retry-After`)",
        ),
    ),
    "context": (
        KeyRow(
            "context.max",
            "the context window in tokens; `auto` is the trained context, or less when the "
            "memory left after the weights cannot hold its KV cache; a fixed window that cannot "
            "fit is refused at load with the numbers; one past the trained context loads with a "
            "`context_beyond_training` warning",
        ),
        KeyRow(
            "context.overflow",
            "`reject`: a prompt that does not fit is a 400 naming its token count and the "
            "window, and, when the request declares tools or a system prompt, how many tokens "
            "the tools' definitions, the system prompt and the messages each take (Claude Code's "
            "tools alone are ~25k tokens), before any stream byte in every protocol; Anthropic "
            "clients get Anthropic's own wording first (`prompt is too long: N tokens > W "
            "maximum; ...`), which Claude Code recognises. `truncate`: the oldest turns are "
            "dropped (whole turns, from a user message on; the system prompt and the latest "
            "message always stay) until the rendered prompt leaves room for `min(max_tokens, "
            "64)` new tokens; `generated` says `truncated_messages`. A raw prompt "
            "(`/v1/completions`, Ollama `raw`) has no turns to drop and is refused",
        ),
    ),
    "concurrency": (
        KeyRow(
            "concurrency",
            "requests decoded together: continuous batching through mlx-lm's `BatchGenerator` — "
            "admission into the batch stays FIFO, a request that leaves is dropped from the "
            "batch at once, each keeps its own sampling, budget and stop strings. A request "
            "alone decodes on mlx-lm's single-sequence loop and moves into the batch when "
            "another arrives; requests arriving together (each within 2 ms of the last, for at "
            "most 100 ms) join the batch as one group and are prefilled in one pass, so a "
            "request reaching an idle model waits 2 ms for company before it starts while other "
            "requests are still being read and routed (a lone request with none on its way "
            "starts at once; a request's `n` answers or several prompts start as one group); a "
            "burst of 8 or more reaching an idle model is gathered until none comes for 25 ms "
            "and none is on its way, for at most 250 ms, so that it starts whole (on CUDA a "
            "batch that grew by joins decoded 0.63x as fast as one started at once, and a burst "
            "split at a pause had its late part's first tokens 100-300 ms after the rest). `1` "
            "is strictly serial. The KV cache of `concurrency` full windows counts against the "
            "memory budget",
        ),
    ),
    "prefix_reuse": (
        KeyRow(
            "prefix_reuse",
            "a request whose prompt starts like a conversation seen before continues from its KV "
            "cache instead of prefilling again (`generated` says `reused_prefix_tokens`); at "
            "temperature 0 the answer is the same with and without. A shared prefix shorter than "
            "32 tokens (16 on the CPU, where a prefill token costs far more than copying its KV, "
            "so a shared system prompt and template header are reused; 256 on CUDA, where such a "
            "prefill costs a few decode steps and a batch mixing reused and fresh caches decodes "
            "slower) or than half the prompt is prefilled again: copying a cache for it costs "
            "more than it saves",
        ),
    ),
    "session_slots": (
        KeyRow(
            "session_slots",
            "finished conversations whose KV caches are parked for reuse, least recently used "
            "evicted first (`generated` says `session_evicted`); `0` turns reuse off. Together "
            "they hold at most `min(session_slots, concurrency)` windows of KV cache in bytes "
            "(an older one is evicted to stay under), and that much counts against the memory "
            "budget and the `auto` window; `model_attached` says the limit",
        ),
    ),
    "kv_bits": (
        KeyRow(
            "kv_bits",
            "`4` or `8`: quantized KV cache (a quarter/half of the float32 cache's memory, "
            "counted in the window sizing). mlx-lm's batch generator has no quantized cache, so "
            "such a model decodes one request at a time",
        ),
    ),
    "disk_cache": (
        KeyRow(
            "disk_cache",
            "park this model's KV caches in the disk tier too (`server.cache`, see [KV cache on "
            "disk](kv-cache.md#kv-cache-on-disk)); `false` keeps them in RAM only. Used on the "
            "continuous-batching path, by a model with `kv_bits` (single stream: its quantized "
            "cache is read at the start of a request and saved at its end) and by vision models "
            "(under mlx-vlm's block cache, keyed by the pictures); a model with both `draft` and "
            "`kv_bits` (mlx-lm's single-stream speculative loop) does not use it yet, and "
            "`model_attached`'s `disk_cache` detail says so",
        ),
    ),
    "weights": (
        KeyRow(
            "weights",
            "how a quantized model's weights are held: `auto` as the platform runs them fastest "
            "(expanded to float32 on the CPU; to bfloat16 on CUDA, where MLX's 4-bit kernels do "
            "not batch, when the memory left holds the copy at the same context window; as "
            "stored on Metal), `stored` as the file holds them (least memory). "
            "`model_attached`'s `weights` says which was taken, and why not where the bfloat16 "
            "copy would have shrunk the context",
        ),
    ),
    "isolation": (
        KeyRow(
            "isolation",
            "`process` runs an MLX text model's engine in a child process of its own (its "
            "weights, caches and batch live there; requests (each rendered and tokenized there "
            "as it arrives, so a burst's prompts are ready when it joins the batch), "
            "cancellations and each step's outputs cross two pipes, its events — the disk tier's "
            "`cache_*` — a third, and the gateway logs and counts them as its own), so its batch "
            "steps on a GIL of its own instead of sharing the gateway's with HTTP: on a fast GPU "
            "a small model's step is Python-bound, and a second thread running Python cut a 1B "
            "batch to 0.25x its speed on an H200 (bench/RESULTS.md, run 8). `model_attached` "
            "says `isolation: process PID`; greedy answers equal the in-process engine's; "
            "unloading ends the process. A process that dies (`model_failed` with its exit code) "
            "fails what it was generating, and requests that meet it dead get a 503 with "
            "`Retry-After`; the next request starts it again (`model_attached` with the new pid) "
            "— at once the first time, after 1 s, 2 s, … up to 60 s while it keeps dying within "
            "a minute of its start. Vision and embedding models refuse it at load, a scripted or "
            "remote model in the config. `none`: a thread of the gateway's process",
        ),
    ),
    "draft": (
        KeyRow(
            "draft",
            "`{model: other-id, tokens: 3}`: speculative decoding with another model of the file "
            "as the draft (same vocabulary, loaded beside it); greedy answers are identical to "
            "plain decoding. On the continuous-batching path, alone and inside batches (see "
            "[Draft model](#draft-model-draft)); beside `kv_bits`, single-stream through "
            "mlx-lm's `stream_generate`",
        ),
    ),
    "speculation": (
        KeyRow(
            "speculation",
            "`{kind: prompt_lookup, tokens: 6, ngram: 3}`: speculative decoding without a draft "
            "model, alone and inside batches (see [Speculation](#speculation-speculation)); "
            "`tokens` 1-16, `ngram` 1-8. MLX text models only; refused beside `draft` or "
            "`kv_bits` and on embedding models (config errors), on a vision model or an "
            "architecture whose KV cache cannot drop tokens (at load)",
        ),
    ),
    "system": (
        KeyRow(
            "system",
            "system prompt used when a request has no system or developer message (every "
            "protocol: OpenAI `system`/`developer` messages, Responses `instructions`, Anthropic "
            "`system`, Ollama `system` messages and `/api/generate`'s `system`)",
        ),
    ),
    "guardrails": (
        KeyRow(
            "guardrails.max_output_tokens",
            "caps the tokens any request may generate: a larger ask is served with the cap, "
            "silently (Claude Code and others ask for 32k as a matter of course); the `length` "
            "stop reason says when it was reached",
        ),
        KeyRow(
            "guardrails.max_n",
            "the most answers one request may ask for with `n` (see [Output "
            "controls](http.md#output-controls))",
        ),
        KeyRow(
            "guardrails.tool_calls",
            "how the tool calls a model emits are checked — the name against the request's "
            "tools, the arguments against that tool's JSON Schema (see "
            "[Policies](http.md#policies)): `repair` fixes what it can and re-asks the model "
            "once, `strict` refuses any defect (502), `off` passes calls as they come (defects "
            "are still reported)",
        ),
    ),
    "sampling": (
        KeyRow(
            "sampling",
            "`temperature`, `top_p`, `top_k`, `min_p`, `max_tokens`, `seed`, `repeat_penalty`, "
            "`repeat_last_n`, `presence_penalty`, `frequency_penalty` used when a request does "
            "not say; request > model > `defaults` (key by key). A `seed` fixes that request's "
            "samples alone (it draws from its own random key): its batch-mates, the requests "
            "after it and other models are not affected. The penalties (none by default: greedy "
            "answers are plain decoding's) count the answer's own last `repeat_last_n` tokens "
            "(default `64`, `-1` the whole window, `0` none; the prompt is not counted, as "
            "OpenAI counts): `repeat_penalty` (Ollama's, `>0`, `1` none) divides a used token's "
            "positive logit and multiplies a negative one, `presence_penalty` (-2 to 2) is "
            "subtracted once, `frequency_penalty` (-2 to 2) once per use; a request's "
            "`logit_bias` (OpenAI's: token id → -100 to 100; an id past the vocabulary is a 400) "
            "is added every step. Each sequence of a batch keeps its own. A vision model refuses "
            "any of them by name (400); an upstream model passes them on (`repetition_penalty` "
            "for `repeat_penalty`; the replica counts over its own look-back)",
            default="",
        ),
    ),
    "reasoning": (
        KeyRow(
            "reasoning",
            "the reasoning effort when a request does not ask: `off`, `low`, `medium`, `high` (a "
            "bare YAML `off` reads as false, which means `off`; `true` means `medium`). Passed "
            "to the chat template as `enable_thinking` and `reasoning_effort`; the thinking is "
            "shown only when the effort is not `off` (see [Policies](http.md#policies))",
        ),
    ),
    "tool_parser": (
        KeyRow(
            "tool_parser",
            "an mlx-lm tool parser name (`json_tools`, `pythonic`, `qwen3_coder`, …) for models "
            "whose tokenizer declares none; without either, tools are described in a system "
            "prompt and calls read as `<tool_call>{json}</tool_call>` (`json_tools`)",
            default="from the tokenizer",
        ),
    ),
    "rate": (
        KeyRow(
            "rate.max_tokens_per_sec",
            "caps the tokens per second the model produces (all its requests together)",
        ),
    ),
    "stream_interval": (
        KeyRow(
            "stream_interval",
            "while the model decodes two or more streams at once, each stream's new tokens are "
            "sent at most this often, several to a frame (their text joined; vLLM's "
            "`stream_interval`, in time): the event loop's Python per frame runs on the same GIL "
            "as the model's step and, on a host with few cores, on the same cores. A stream's "
            "first token, its end, tool calls, log-probabilities and a lone stream's tokens are "
            "never held. `0ms`: every token in its own frame. Measured (bench/RESULTS.md, "
            '"stream_interval"): `20ms` took 128 clients from 0.88 to 0.93 of raw '
            "`BatchGenerator` on a 2-core CPU, and made no difference beyond the noise on an "
            "H200. MLX and scripted models; a reload changes it between two steps",
        ),
    ),
    "task": (
        KeyRow(
            "task",
            "`chat` or `embed`; inferred from the model's architecture (BertModel → embed) when "
            "absent. An embedding model asked to chat, or a chat model asked for embeddings, is "
            "a 400",
            default="inferred",
        ),
    ),
    "queue": (
        KeyRow("queue.max_depth", "requests allowed to wait; past it, 429 at once"),
        KeyRow("queue.max_wait", "a request still waiting after this gets 503"),
        KeyRow(
            "queue.aging",
            "waiting this long counts as one level of priority (`x-gateway-priority`): a request "
            "is never overtaken by one that arrived more than (its priority − this one's) × "
            "`aging` after it",
        ),
    ),
    "capture": (
        KeyRow(
            "capture",
            "keep each request's and answer's body (the first 64 KiB of each, redacted as the "
            "log is) in the ops page's Activity history, shown under the request's events; off, "
            "no body is ever stored. Any engine; a reload changes it in place",
        ),
    ),
    "script": (
        KeyRow(
            "script",
            "the scripted engine's reply (streamed word by word, `token_delay` seconds apart), "
            "parsed like a real model's output (tool calls, `<think>` reasoning, stops); "
            "`replies: [a, b]` answers request after request with each in turn (a broken tool "
            "call then a good one exercises the re-ask); `context.max` sets its window; for "
            "tests, `fail_after: N` raises an engine fault after N words (a mid-stream failure), "
            "`fail_step: N` makes the engine's Nth batch step raise (as a failed forward pass "
            "would), `memory: 600MiB` makes it claim that much of the memory budget and "
            "`load_delay: 0.5` makes each load take that many seconds (swaps measurable without "
            "weights)",
            default='`{reply: "hello from echo", token_delay: 0}`',
        ),
    ),
    "hf_token": (
        KeyRow(
            "hf_token",
            "the Hugging Face token for a gated or private `hf:` repository, usually `hf_token: "
            "${HF_TOKEN}` (in `defaults:` for every model); absent, huggingface_hub's own "
            "(`HF_TOKEN`, or the one `hf auth login` stored). Never logged: every event and "
            "error is redacted of it",
        ),
    ),
    "vision": (
        KeyRow(
            "vision.max_pixels, vision.min_pixels",
            "a vision model's pixel budget: each image is resized (aspect kept) to hold between "
            "the two before encoding. Defaults come from the checkpoint's preprocessor config "
            "(`max_pixels`/`min_pixels`, or `size.longest_edge`² and one `max_image_size` tile "
            "for SmolVLM-style tiling). At load `max_pixels` is clamped to what the memory "
            "budget affords next to the weights and KV cache; when not even `min_pixels` fits, "
            "vision is disabled and text keeps working (see "
            "[Images](vision.md#images-vision-models))",
            default="from the checkpoint",
        ),
    ),
    "upstream": (
        KeyRow(
            "upstream",
            "`{urls: [...], api_key, model, max_in_flight, timeout, check_interval, cooldown}`: "
            "replicas of one model on OpenAI-protocol servers (other gateways, vLLM, SGLang, "
            "llama.cpp's server, mlx-lm's server, Ollama's `/v1`), for `engine: upstream` — see "
            "[Remote models](sources.md#remote-models-engine-upstream-and-engine-process)",
        ),
    ),
    "process": (
        KeyRow(
            "process",
            "`{command, health, env, cwd, memory, model, max_in_flight, timeout, "
            "startup_timeout, stop_grace}`: a model server program the gateway runs itself (as "
            "llama-swap's `cmd`), then serves as an upstream of one replica on a loopback port, "
            "for `engine: process` — see [Remote "
            "models](sources.md#remote-models-engine-upstream-and-engine-process)",
        ),
    ),
    "distributed": (
        KeyRow(
            "distributed",
            "`{ranks: N, hosts: [...], backend: ring, mode: pipeline}`: the model sharded over N "
            "processes with MLX's own collectives, each holding part of the weights — see "
            "[Sharded models](sharding.md#sharded-models-distributed)",
        ),
    ),
}
