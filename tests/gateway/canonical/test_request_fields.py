"""Every field each protocol's request schema defines is honoured or refused by name.

The walk: for each request struct, every field must be listed here as honoured (with the
test that proves its effect, which must exist), refused (a request setting it is a 400
whose message names it), or informational (it labels the request and changes no output:
accepted). A field added to a schema without a line here fails this test, so no field a
client sends can be dropped unnoticed.
"""

from __future__ import annotations

import re

import httpx
import msgspec
import pytest
from conftest import REPO, serving

from schemas import anthropic, ollama, openai, openai_completions, openai_responses

# The proofs are named by their path under tests/, wherever this file itself sits.
TESTS = REPO / "tests"
HI = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
SCRIPTED = "gateway/http/test_http_scripted.py"
CONTROLS = "gateway/canonical/test_output_controls.py"
LIMITS = "engines/policy/test_request_limits.py"

SAMPLING = (LIMITS, "sampling_merges_request_over_model")
REASONING = ("engines/policy/test_policies.py", "reasoning_is_split")
PENALTIES = ("e2e/test_decoding_e2e.py", "penalties_break_a_greedy_loop")


def honoured(sample, file: str, test: str):
    return ("honoured", sample, (file, test))


def refused(sample):
    return ("refused", sample, None)


def informational(sample):
    return ("informational", sample, None)


# llama.cpp's `lora` (`[]`: the model as named; the adapters' proof runs on SmolLM2).
LORA = honoured([], "e2e/test_adapters_e2e.py", "lora_field_selects_an_adapter")
CHAT = {
    "model": honoured("echo", SCRIPTED, "routes_by_id_alias_and_fallback"),
    "messages": honoured(HI, SCRIPTED, "usage_equals_the_generated_event"),
    "stream": honoured(True, SCRIPTED, "streamed_text_and_usage_match"),
    "stream_options": honoured({"include_usage": True}, SCRIPTED, "streamed_text_and_usage"),
    "max_tokens": honoured(5, SCRIPTED, "stop_strings_and_max_tokens"),
    "max_completion_tokens": honoured(5, LIMITS, "bad_numbers_are_400s"),
    "temperature": honoured(0.3, *SAMPLING),
    "top_p": honoured(0.9, *SAMPLING),
    "top_k": honoured(5, *SAMPLING),
    "min_p": honoured(0.1, *SAMPLING),
    "stop": honoured(["x"], SCRIPTED, "stop_strings_and_max_tokens"),
    "seed": honoured(7, *SAMPLING),
    "n": honoured(2, CONTROLS, "n_choices_come_from_one_request"),
    "logprobs": honoured(True, CONTROLS, "openai_logprobs_plain_and_streamed"),
    "top_logprobs": honoured(0, CONTROLS, "openai_logprobs_plain_and_streamed"),
    "reasoning_effort": honoured("low", *REASONING),
    "tools": honoured([TOOL], "gateway/openai/test_openai_tools.py", "tool_call_comes_back"),
    "tool_choice": honoured("auto", CONTROLS, "forced_call_is_constrained"),
    "parallel_tool_calls": honoured(True, CONTROLS, "parallel_tool_calls_off"),
    "response_format": honoured({"type": "text"}, CONTROLS, "json_format_holds"),
    "presence_penalty": honoured(0.5, *PENALTIES),
    "frequency_penalty": honoured(0.5, *PENALTIES),
    "logit_bias": honoured({"50": 1.0}, "engines/mlx/test_penalties.py", "logit_bias_adds"),
    "lora": LORA,
    "prediction": refused({"type": "content", "content": "x"}),
    "modalities": refused(["text", "audio"]),
    "audio": refused({"voice": "alloy", "format": "mp3"}),
    "web_search_options": refused({}),
    "functions": refused([TOOL["function"]]),
    "function_call": refused("auto"),
    "store": refused(True),
    "service_tier": refused("flex"),
    "verbosity": refused("low"),
    "user": informational("someone"),
    "metadata": informational({"k": "v"}),
    "safety_identifier": informational("someone"),
    "prompt_cache_key": informational("k"),
}
COMPLETIONS_FILE = "gateway/openai/test_completions.py"
COMPLETIONS = {
    "model": honoured("echo", COMPLETIONS_FILE, "prompt_is_continued"),
    "prompt": honoured("hi", COMPLETIONS_FILE, "a_list_of_prompts"),
    "stream": honoured(True, COMPLETIONS_FILE, "streamed_text_and_usage"),
    "stream_options": honoured({"include_usage": True}, COMPLETIONS_FILE, "streamed"),
    "max_tokens": honoured(5, COMPLETIONS_FILE, "stop_strings_and_max_tokens"),
    "temperature": honoured(0.3, *SAMPLING),
    "top_p": honoured(0.9, *SAMPLING),
    "top_k": honoured(5, *SAMPLING),
    "min_p": honoured(0.1, *SAMPLING),
    "stop": honoured("x", COMPLETIONS_FILE, "stop_strings_and_max_tokens"),
    "seed": honoured(7, *SAMPLING),
    "echo": honoured(True, CONTROLS, "completions_echo_returns"),
    "suffix": refused("tail"),
    "logprobs": honoured(2, CONTROLS, "completions_echo_returns"),
    "n": honoured(2, CONTROLS, "n_choices_come_from_one_request"),
    "best_of": refused(3),
    "presence_penalty": honoured(0.5, *PENALTIES),
    "frequency_penalty": honoured(0.5, *PENALTIES),
    "logit_bias": honoured({"50": 1.0}, "engines/mlx/test_penalties.py", "logit_bias_adds"),
    "user": informational("someone"),
    "lora": LORA,
}
RESPONSES_FILE = "gateway/openai/test_responses.py"
RESPONSES = {
    "model": honoured("echo", RESPONSES_FILE, "plain_response_object"),
    "input": honoured("hi", RESPONSES_FILE, "instructions_and_message_items"),
    "instructions": honoured("be brief", RESPONSES_FILE, "instructions_and_message_items"),
    "max_output_tokens": honoured(5, RESPONSES_FILE, "max_output_tokens_makes"),
    "temperature": honoured(0.3, *SAMPLING),
    "top_p": honoured(0.9, *SAMPLING),
    "tools": honoured(
        [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        RESPONSES_FILE,
        "tool_call_comes_back",
    ),
    "tool_choice": honoured("none", RESPONSES_FILE, "tool_choice_none_hides"),
    "parallel_tool_calls": honoured(True, CONTROLS, "parallel_tool_calls_off"),
    "stream": honoured(True, RESPONSES_FILE, "raw_event_stream_in_order"),
    "store": honoured(
        False, "gateway/openai/test_responses_store.py", "previous_response_id_continues"
    ),
    # An unknown id: refused by name (404 is the store's answer; this walk wants the name).
    "previous_response_id": ("found", "resp_1", None),
    "conversation": refused("conv_1"),
    "background": honoured(
        True, "gateway/openai/test_background_responses.py", "background_is_queued_then_polled"
    ),
    "prompt": refused({"id": "pmpt_1"}),
    "text": honoured({"format": {"type": "text"}}, CONTROLS, "json_format_holds"),
    "reasoning": honoured({"effort": "low"}, *REASONING),
    "top_logprobs": honoured(0, CONTROLS, "responses_and_ollama_logprobs"),
    "include": honoured(
        ["message.output_text.logprobs"], CONTROLS, "responses_and_ollama_logprobs"
    ),
    "n": refused(2),
    "truncation": refused("auto"),
    "max_tool_calls": refused(3),
    "service_tier": refused("flex"),
    "stream_options": refused({"include_obfuscation": False}),
    "metadata": informational({"k": "v"}),
    "user": informational("someone"),
    "safety_identifier": informational("someone"),
    "prompt_cache_key": informational("k"),
}
ANTHROPIC_FILE = "gateway/anthropic/test_anthropic.py"
MESSAGES = {
    "model": honoured("echo", ANTHROPIC_FILE, "plain_message_and_usage"),
    "messages": honoured(HI, ANTHROPIC_FILE, "plain_message_and_usage"),
    "system": honoured("be brief", ANTHROPIC_FILE, "system_as_string_and_as_blocks"),
    "tools": honoured(
        [{"name": "f", "input_schema": {"type": "object"}}], ANTHROPIC_FILE, "tool_use_block"
    ),
    "tool_choice": honoured({"type": "auto"}, CONTROLS, "forced_call_is_constrained"),
    "thinking": honoured({"type": "disabled"}, *REASONING),
    "output_config": honoured(
        {"format": {"type": "json_schema", "schema": {"type": "object"}}},
        CONTROLS,
        "json_format_holds",
    ),
    "max_tokens": honoured(5, ANTHROPIC_FILE, "max_tokens_stops_with_max_tokens"),
    "stream": honoured(True, ANTHROPIC_FILE, "raw_stream_is_anthropics"),
    "stop_sequences": honoured(["x"], ANTHROPIC_FILE, "stop_sequences_cut_the_text"),
    "temperature": honoured(0.3, *SAMPLING),
    "top_p": honoured(0.9, *SAMPLING),
    "top_k": honoured(5, *SAMPLING),
    "container": refused("container_1"),
    "mcp_servers": refused([{"type": "url", "url": "https://x", "name": "x"}]),
    "context_management": refused({"edits": [{"type": "clear_tool_uses_20250919"}]}),
    "service_tier": refused("priority"),
    "metadata": informational({"user_id": "u"}),
}
OLLAMA_FILE = "gateway/ollama/test_ollama.py"
OLLAMA_CHAT = {
    "model": honoured("echo", OLLAMA_FILE, "chat_streamed_equals_plain"),
    "messages": honoured(HI, OLLAMA_FILE, "chat_streamed_equals_plain"),
    "tools": honoured([TOOL], OLLAMA_FILE, "tool_calls_round_trip"),
    "stream": honoured(False, OLLAMA_FILE, "chat_streamed_equals_plain"),
    "format": honoured("", CONTROLS, "json_format_holds"),
    "options": honoured({"temperature": 0.3}, OLLAMA_FILE, "options_map_to_the_canonical"),
    "keep_alive": honoured("5m", OLLAMA_FILE, "ps_lists_what_is_loaded"),
    "think": honoured(False, *REASONING),
    "logprobs": honoured(True, CONTROLS, "responses_and_ollama_logprobs"),
    "top_logprobs": honoured(0, CONTROLS, "responses_and_ollama_logprobs"),
}
OLLAMA_GENERATE = {
    "model": honoured("echo", OLLAMA_FILE, "generate_streamed_equals_plain"),
    "prompt": honoured("hi", OLLAMA_FILE, "generate_streamed_equals_plain"),
    "suffix": refused("tail"),
    "system": honoured("be brief", OLLAMA_FILE, "generate_streamed_equals_plain_with_system"),
    "template": refused("{{ .Prompt }}"),
    "context": informational([1, 2]),  # Ollama's deprecated token context; ignored
    "raw": honoured(True, OLLAMA_FILE, "generate_streamed_equals_plain_with_system_and_raw"),
    "images": refused(["aGk="]),
    "stream": honoured(False, OLLAMA_FILE, "generate_streamed_equals_plain"),
    "format": honoured("json", CONTROLS, "json_format_holds"),
    "options": honoured({"temperature": 0.3}, OLLAMA_FILE, "options_map_to_the_canonical"),
    "keep_alive": honoured("5m", OLLAMA_FILE, "ps_lists_what_is_loaded"),
    "think": honoured(False, *REASONING),
    "logprobs": honoured(True, CONTROLS, "responses_and_ollama_logprobs"),
    "top_logprobs": honoured(0, CONTROLS, "responses_and_ollama_logprobs"),
}
OLLAMA_OPTIONS = {
    name: honoured(sample, OLLAMA_FILE, "options_map_to_the_canonical")
    for name, sample in {
        "num_predict": 5,
        "temperature": 0.3,
        "top_p": 0.9,
        "top_k": 5,
        "min_p": 0.1,
        "stop": ["x"],
        "seed": 7,
    }.items()
} | {
    "num_ctx": honoured(
        2048, "gateway/ollama/test_ollama_options.py", "num_ctx_is_the_requests_own"
    )
}
OLLAMA_OPTIONS |= {
    name: honoured(sample, *PENALTIES)
    for name, sample in {
        "repeat_penalty": 1.1,
        "repeat_last_n": 32,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.5,
    }.items()
}
# Ollama's options nothing here implements: each refused by name when set (but for the
# samplers' "off" values: gateway/ollama/test_ollama_options.py).
OLLAMA_OPTIONS |= {
    name: refused(sample)
    for name, sample in {
        "num_keep": 1,
        "typical_p": 0.5,
        "penalize_newline": True,
        "mirostat": 1,
        "tfs_z": 0.5,
    }.items()
}
# Mirostat's settings change nothing while it is off (unset here), so they are accepted, as
# are the hardware hints of Ollama's runner: they change how it computes, not the output.
OLLAMA_OPTIONS |= {
    name: informational(sample)
    for name, sample in {
        "mirostat_tau": 5.0,
        "mirostat_eta": 0.1,
        "num_batch": 512,
        "num_gpu": 99,
        "main_gpu": 0,
        "low_vram": False,
        "use_mmap": True,
        "use_mlock": False,
        "num_thread": 8,
        "numa": False,
    }.items()
}

SCHEMAS = {
    "chat": (openai.ChatCompletionRequest, "/v1/chat/completions", {"messages": HI}, CHAT),
    "completions": (
        openai_completions.CompletionRequest,
        "/v1/completions",
        {"prompt": "hi"},
        COMPLETIONS,
    ),
    "responses": (openai_responses.ResponseRequest, "/v1/responses", {"input": "hi"}, RESPONSES),
    "messages": (
        anthropic.MessagesRequest,
        "/v1/messages",
        {"messages": HI, "max_tokens": 20},
        MESSAGES,
    ),
    "ollama chat": (
        ollama.ChatRequest,
        "/api/chat",
        {"messages": HI, "stream": False},
        OLLAMA_CHAT,
    ),
    "ollama generate": (
        ollama.GenerateRequest,
        "/api/generate",
        {"prompt": "hi", "stream": False},
        OLLAMA_GENERATE,
    ),
    "ollama options": (
        ollama.Options,
        "/api/generate",
        {"prompt": "hi", "stream": False},
        OLLAMA_OPTIONS,
    ),
}
CASES = [
    (schema, field)
    for schema, (struct, *_rest) in SCHEMAS.items()
    for field in (f.encode_name for f in msgspec.structs.fields(struct))
]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    # A JSON reply, so the JSON formats' samples are satisfied (and so shown honoured).
    config = "models:\n  - id: echo\n    engine: scripted\n    script: {reply: '{\"a\": 1}'}\n"
    with serving(tmp_path_factory.mktemp("fields"), config) as process:
        yield process


@pytest.mark.parametrize("schema", SCHEMAS)
def test_every_field_of_the_schema_is_classified(schema):
    struct, _, _, table = SCHEMAS[schema]
    fields = {f.encode_name for f in msgspec.structs.fields(struct)}
    assert fields - set(table) == set(), f"{struct.__name__}: fields nobody classified"
    assert set(table) - fields == set(), f"{struct.__name__}: classified fields it lacks"


@pytest.mark.parametrize(("schema", "field"), CASES)
def test_each_field_is_honoured_or_refused_by_name(gateway, schema, field):
    _, path, base, table = SCHEMAS[schema]
    verdict, sample, proof = table[field]
    if schema == "ollama options":
        body = {"model": "echo", **base, "options": {field: sample}}
    else:
        body = {"model": "echo", **base, field: sample}
    response = httpx.post(gateway.url + path, json=body, timeout=30)
    if verdict == "found":  # a reference to stored state that does not exist: named in a 404
        assert response.status_code == 404 and field.split("_")[0] in response.text
        return
    if verdict == "refused":
        assert response.status_code == 400, response.text
        assert re.search(rf"\b{re.escape(field)}\b", response.text), response.text
        return
    assert response.status_code == 200, response.text
    if verdict == "honoured":
        file, test = proof
        source = (TESTS / file).read_text()
        assert re.search(rf"def test_\w*{re.escape(test)}", source), f"no proof {file}::{test}"
