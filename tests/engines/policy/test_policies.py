"""Declared policies on a real gateway with scripted models, the same across every protocol:
tool-call guardrails (repair, re-ask, strict, off), context overflow (reject, truncate),
tools that alone overflow (drop_unused) and reasoning (split from the answer, shown each protocol's way, hidden when off)."""

from __future__ import annotations

import json
import re
import time

import anthropic
import httpx
import openai
import pytest
from conftest import serving

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "metric": {"type": "boolean"}},
    "required": ["city"],
    "additionalProperties": False,
}


def call_text(body: str) -> str:
    return f"<tool_call>{body}</tool_call>"


GOOD = call_text('{"name": "get_weather", "arguments": {"city": "Paris"}}')
WRONG_KEY = call_text('{"name": "get_weather", "arguments": {"town": "Paris"}}')
SINGLE_QUOTED = call_text("{'name': 'get_weather', 'arguments': {'city': 'Paris'}}")
# Each defect a small model makes, as the model would write it (kind -> reply).
DEFECTS = {
    "trailing-text": call_text(
        '{"name": "get_weather", "arguments": {"city": "Paris"}} hope that helps'
    ),
    "single-quotes": SINGLE_QUOTED,
    "unquoted-keys": call_text('{name: "get_weather", arguments: {city: "Paris"}}'),
    "missing-brace": call_text('{"name": "get_weather", "arguments": {"city": "Paris"}'),
    "string-in-string": call_text(
        json.dumps({"name": "get_weather", "arguments": json.dumps(json.dumps({"city": "Paris"}))})
    ),
    "python-literals": call_text(
        '{"name": "get_weather", "arguments": {"city": "Paris", "metric": True}}'
    ),
    "name-spelling": call_text('{"name": "Get-Weather", "arguments": {"city": "Paris"}}'),
}
FIXES = {
    "trailing-text": "trailing text",
    "single-quotes": "single-quoted",
    "unquoted-keys": "unquoted keys",
    "missing-brace": "missing closing brace",
    "string-in-string": "JSON string inside a string",
    "python-literals": "Python literals",
    "name-spelling": "'Get-Weather' is 'get_weather'",
}


def model(model_id: str, reply: str | list[str], **settings: str) -> str:
    script = {"replies": reply} if isinstance(reply, list) else {"reply": reply}
    lines = [f"  - id: {model_id}", "    engine: scripted", f"    script: {json.dumps(script)}"]
    lines += [f"    {key}: {value}" for key, value in settings.items()]
    return "\n".join(lines)


CONFIG = "models:\n" + "\n".join(
    [
        *(model(f"fix-{kind}", reply) for kind, reply in DEFECTS.items()),
        model("fixer", "Checking. " + SINGLE_QUOTED),
        model("retry", [WRONG_KEY, GOOD]),
        model("stubborn", WRONG_KEY),
        model("cutoff", GOOD + " " + call_text('{"name": "get_weather", "arguments": {}}')),
        model("nameless", call_text('{"arguments": {"city": "Paris"}}')),
        model("unforceable", "It is sunny."),
        model("strict", "Checking. " + SINGLE_QUOTED, guardrails="{tool_calls: strict}"),
        model("strict-bare", SINGLE_QUOTED, guardrails="{tool_calls: strict}"),
        model("lax", WRONG_KEY, guardrails="{tool_calls: 'off'}"),
        model("thinker", "<think>hmm, the user greets</think>Hello!"),
        model("deep", "<think>hmm, the user greets</think>Hello!", reasoning="high"),
        model("tight", "hello from echo", context="{max: 300}"),
        model("trimmer", "hello from echo", context="{max: 300, overflow: truncate}"),
        model("toolbox", "hello from echo", context="{max: 1200, tools_overflow: drop_unused}"),
    ]
)

OPENAI_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}}
]
ANTHROPIC_TOOLS = [{"name": "get_weather", "input_schema": WEATHER_SCHEMA}]
RESPONSES_TOOLS = [{"type": "function", "name": "get_weather", "parameters": WEATHER_SCHEMA}]
ASK = [{"role": "user", "content": "Weather in Paris?"}]
PROTOCOLS = ["openai", "responses", "anthropic", "ollama"]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("policies"), CONFIG) as process:
        yield process


def ask(gateway, protocol: str, model_id: str, *, stream=False, tools=True, messages=ASK, **extra):
    """One request in `protocol`'s own shape: (status, tool calls, text, reasoning, request id).

    Streams are read to the end and folded, so a streamed and a plain answer compare equal.
    """
    url, body = {
        "openai": ("/v1/chat/completions", {"messages": messages}),
        "responses": ("/v1/responses", {"input": messages}),
        "anthropic": ("/v1/messages", {"messages": messages, "max_tokens": 200}),
        "ollama": ("/api/chat", {"messages": messages}),
    }[protocol]
    if tools:
        body["tools"] = {
            "openai": OPENAI_TOOLS,
            "responses": RESPONSES_TOOLS,
            "anthropic": ANTHROPIC_TOOLS,
            "ollama": OPENAI_TOOLS,
        }[protocol]
    body |= {"model": model_id, "stream": stream, **extra}
    response = httpx.post(gateway.url + url, json=body, timeout=30)
    rid = response.headers.get("x-request-id")
    if response.status_code != 200:
        return response.status_code, response.json(), None, None, rid
    if not stream:
        return (200, *FOLD[protocol]([response.json()]), rid)
    if protocol == "ollama":
        items = [json.loads(line) for line in response.text.splitlines() if line]
    else:
        items = [
            json.loads(line[6:])
            for line in response.text.splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"
        ]
    return (200, *FOLD[protocol](items), rid)


def _openai(items):
    calls, text, thought = [], "", ""
    for item in items:
        if "error" in item:
            return item, None, None
        for choice in item.get("choices") or []:
            part = choice.get("message") or choice.get("delta") or {}
            text += part.get("content") or ""
            thought += part.get("reasoning_content") or ""
            calls += [
                (c["function"]["name"], c["function"]["arguments"])
                for c in part.get("tool_calls") or []
            ]
    return [(n, json.loads(a)) for n, a in calls], text, thought


def _responses(items):
    for item in items:
        if item.get("type") == "error":
            return item, None, None
    final = items[-1].get("response", items[-1])
    calls = [
        (o["name"], json.loads(o["arguments"]))
        for o in final["output"]
        if o["type"] == "function_call"
    ]
    text = "".join(
        c["text"] for o in final["output"] if o["type"] == "message" for c in o["content"]
    )
    thought = "".join(
        c["text"] for o in final["output"] if o["type"] == "reasoning" for c in o["content"]
    )
    return calls, text, thought


def _anthropic(items):
    if len(items) == 1:  # a whole message
        blocks = items[0]["content"]
    else:
        blocks = []
        for event in items:
            if event["type"] == "error":
                return event, None, None
            if event["type"] == "content_block_start":
                blocks.append(dict(event["content_block"]))
            elif event["type"] == "content_block_delta":
                delta, block = event["delta"], blocks[event["index"]]
                if delta["type"] == "text_delta":
                    block["text"] += delta["text"]
                elif delta["type"] == "thinking_delta":
                    block["thinking"] += delta["thinking"]
                elif delta["type"] == "input_json_delta":
                    block["input"] = json.loads(delta["partial_json"])
    calls = [(b["name"], b["input"]) for b in blocks if b["type"] == "tool_use"]
    text = "".join(b["text"] for b in blocks if b["type"] == "text")
    thought = "".join(b["thinking"] for b in blocks if b["type"] == "thinking")
    return calls, text, thought


def _ollama(items):
    calls, text, thought = [], "", ""
    for item in items:
        if "error" in item:
            return item, None, None
        message = item["message"]
        text += message.get("content", "")
        thought += message.get("thinking", "")
        calls += [
            (c["function"]["name"], c["function"]["arguments"])
            for c in message.get("tool_calls") or []
        ]
    return calls, text, thought


FOLD = {"openai": _openai, "responses": _responses, "anthropic": _anthropic, "ollama": _ollama}
PARIS = [("get_weather", {"city": "Paris"})]


def generated(gateway, rid: str, count: int) -> list[dict]:
    """The request's `generated` events, once `count` have been written (or 10 s passed)."""
    deadline = time.monotonic() + 10
    while len(gateway.events("generated", request_id=rid)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return gateway.events("generated", request_id=rid)


@pytest.mark.parametrize("kind", DEFECTS)
def test_each_kind_of_malformed_call_is_repaired_and_reported(gateway, kind):
    status, calls, _, _, rid = ask(gateway, "openai", f"fix-{kind}")
    assert status == 200
    ((name, arguments),) = calls
    assert name == "get_weather" and arguments["city"] == "Paris"
    event = gateway.wait_event("guardrail", request_id=rid)
    assert event["action"] == "repaired" and event["tool"] == "get_weather"
    assert FIXES[kind] in event["problem"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_repaired_call_is_the_same_in_every_protocol(gateway, protocol, stream):
    status, calls, text, _, rid = ask(gateway, protocol, "fixer", stream=stream)
    assert status == 200 and calls == PARIS
    assert text == "Checking. "
    assert gateway.wait_event("guardrail", request_id=rid)["action"] == "repaired"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_call_repair_cannot_mend_is_re_asked_once(gateway, protocol, stream):
    status, calls, _, _, rid = ask(gateway, protocol, "retry", stream=stream)
    assert status == 200 and calls == PARIS
    event = gateway.wait_event("guardrail", request_id=rid)
    assert event["action"] == "reasked" and "'city' is a required property" in event["problem"]
    # The re-ask is real work: its own job in the queue, its own generated event.
    first, second = generated(gateway, rid, 2)
    assert second["prompt_tokens"] > first["prompt_tokens"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_call_still_wrong_after_the_re_ask_is_a_502_naming_the_tool(gateway, protocol):
    status, body, _, _, rid = ask(gateway, protocol, "stubborn")
    assert status == 502
    message = json.dumps(body)
    assert "get_weather" in message and "after one re-ask" in message
    assert "'city' is a required property" in message
    assert gateway.wait_event("guardrail", request_id=rid, action="refused")
    assert len(generated(gateway, rid, 2)) == 2  # the refused re-ask was real work too


# The first call and the first word of the second: the token limit cuts the second call.
CUT_AT = len(GOOD) + len(' <tool_call>{"name":')


def test_a_call_cut_by_the_token_limit_after_complete_ones_is_dropped_not_re_asked(gateway):
    # It was a MalformedToolCall: re-asked, cut again, and a 502 after two generations.
    openai_reply = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "cutoff", "messages": ASK, "tools": OPENAI_TOOLS, "max_tokens": CUT_AT},
        timeout=30,
    )
    assert openai_reply.status_code == 200
    choice = openai_reply.json()["choices"][0]
    assert choice["finish_reason"] == "length"
    (call,) = choice["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    anthropic_reply = httpx.post(
        f"{gateway.url}/v1/messages",
        json={"model": "cutoff", "messages": ASK, "tools": ANTHROPIC_TOOLS, "max_tokens": CUT_AT},
        timeout=30,
    )
    assert anthropic_reply.status_code == 200 and anthropic_reply.json()["stop_reason"] == (
        "max_tokens"
    )
    blocks = anthropic_reply.json()["content"]
    assert [b["input"] for b in blocks if b["type"] == "tool_use"] == [{"city": "Paris"}]
    for reply in (openai_reply, anthropic_reply):
        rid = reply.headers["x-request-id"]
        assert len(generated(gateway, rid, 1)) == 1
        assert not gateway.events("guardrail", request_id=rid)


def test_a_refused_call_that_named_no_tool_says_so(gateway):
    status, body, _, _, _ = ask(gateway, "openai", "nameless")
    assert status == 502
    message = body["error"]["message"]
    assert "None" not in message and "naming no tool" in message


@pytest.mark.parametrize(
    "protocol, choice", [("openai", "required"), ("anthropic", {"type": "any"})]
)
def test_a_scripted_reply_its_constraint_forbids_gives_way_to_a_valid_call(
    gateway, protocol, choice
):
    # A real model is masked into a call; a script answers with the grammar's short one,
    # which passes the guardrails as it is (scripts with no instance that fits: 400s, see
    # tests/engines/test_scripted_under_constraints.py).
    status, calls, _, _, rid = ask(gateway, protocol, "unforceable", tool_choice=choice)
    assert status == 200 and calls == [("get_weather", {"city": ""})]
    assert not gateway.events("guardrail", request_id=rid, action="repaired")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_strict_refuses_what_repair_would_fix(gateway, protocol):
    status, body, _, _, rid = ask(gateway, protocol, "strict-bare", stream=True)
    assert status == 502  # the call was the first output: refused before the stream began
    assert "guardrails.tool_calls: strict" in json.dumps(body)
    event = gateway.wait_event("guardrail", request_id=rid)
    assert event["action"] == "refused" and "did not parse" in event["problem"]
    status, body, _, _, _ = ask(gateway, protocol, "strict")
    assert status == 502


def test_the_sdks_do_not_retry_a_refused_tool_call(gateway):
    # Both SDKs retry a 5xx twice by default; `x-should-retry: false` stops them, so one
    # client call stays one request and one generation.
    before = len(gateway.events("generated", model="strict-bare"))
    sdk = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=2)
    with pytest.raises(openai.APIStatusError) as refused:
        sdk.chat.completions.create(model="strict-bare", messages=ASK, tools=OPENAI_TOOLS)
    assert refused.value.status_code == 502
    assert refused.value.response.headers["x-should-retry"] == "false"
    with pytest.raises(anthropic.APIStatusError) as refused:
        anthropic.Anthropic(base_url=gateway.url, api_key="unused", max_retries=2).messages.create(
            model="strict-bare", max_tokens=50, messages=ASK, tools=ANTHROPIC_TOOLS
        )
    assert refused.value.status_code == 502
    time.sleep(0.5)  # a retry, had there been one, would have logged by now
    assert len(gateway.events("generated", model="strict-bare")) == before + 2


def test_a_bad_request_says_not_to_retry_and_a_full_queue_does_not(gateway):
    response = httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": "nope"})
    assert response.status_code == 400 and response.headers["x-should-retry"] == "false"
    assert "x-should-retry" not in httpx.get(f"{gateway.url}/health").headers


def test_strict_after_text_was_streamed_ends_the_stream_with_the_protocols_error(gateway):
    client = gateway.openai()
    stream = client.chat.completions.create(
        model="strict", messages=ASK, tools=OPENAI_TOOLS, stream=True
    )
    with pytest.raises(openai.APIError, match="get_weather"):
        for _ in stream:
            pass
    for protocol in ("responses", "anthropic", "ollama"):
        status, error, _, _, _ = ask(gateway, protocol, "strict", stream=True)
        assert status == 200 and "get_weather" in json.dumps(error)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_off_passes_a_bad_call_through_and_still_reports_it(gateway, protocol):
    status, calls, _, _, rid = ask(gateway, protocol, "lax")
    assert status == 200 and calls == [("get_weather", {"town": "Paris"})]
    assert gateway.wait_event("guardrail", request_id=rid)["action"] == "passed"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_tool_schema_that_is_not_json_schema_is_a_400_naming_the_tool(gateway, protocol):
    broken = {"type": "object", "properties": {"city": {"type": "text"}}}
    tools = {
        "openai": [{"type": "function", "function": {"name": "get_weather", "parameters": broken}}],
        "responses": [{"type": "function", "name": "get_weather", "parameters": broken}],
        "anthropic": [{"name": "get_weather", "input_schema": broken}],
        "ollama": [{"type": "function", "function": {"name": "get_weather", "parameters": broken}}],
    }[protocol]
    url = {
        "openai": "/v1/chat/completions",
        "responses": "/v1/responses",
        "anthropic": "/v1/messages",
        "ollama": "/api/chat",
    }[protocol]
    payload = {"model": "fixer", "tools": tools, "max_tokens": 50}
    payload |= {"input": ASK} if protocol == "responses" else {"messages": ASK}
    response = httpx.post(gateway.url + url, json=payload)
    assert response.status_code == 400
    assert "tool 'get_weather'" in response.text and "not a valid JSON Schema" in response.text


LONG = [{"role": "user", "content": "tell me " + "very " * 80 + "much"}]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_reject_answers_400_with_the_counts_before_any_stream_byte(gateway, protocol, stream):
    status, body, _, _, rid = ask(
        gateway, protocol, "tight", tools=False, messages=LONG, stream=stream
    )
    assert status == 400
    text = json.dumps(body)
    assert "the context window is 300" in text and "tokens" in text
    assert not gateway.events("generated", request_id=rid)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_overflow_message_says_what_the_tools_and_the_system_prompt_take(gateway, protocol):
    # Twelve tools with long descriptions and a long system prompt: the conversation is short.
    tools = [
        {**tool, "name": f"tool_{i}", "description": "does things " * 8}
        for i, tool in enumerate([ANTHROPIC_TOOLS[0]] * 12)
    ]
    shaped = {
        "openai": [
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t["description"],
                    "parameters": t["input_schema"],
                },
            }
            for t in tools
        ],
        "responses": [
            {
                "type": "function",
                "name": t["name"],
                "description": t["description"],
                "parameters": t["input_schema"],
            }
            for t in tools
        ],
        "anthropic": tools,
        "ollama": [
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t["description"],
                    "parameters": t["input_schema"],
                },
            }
            for t in tools
        ],
    }[protocol]
    system = "Be brief. " * 40
    url, body = {
        "openai": (
            "/v1/chat/completions",
            {"messages": [{"role": "system", "content": system}, *ASK]},
        ),
        "responses": ("/v1/responses", {"input": ASK, "instructions": system}),
        "anthropic": ("/v1/messages", {"messages": ASK, "system": system, "max_tokens": 50}),
        "ollama": ("/api/chat", {"messages": [{"role": "system", "content": system}, *ASK]}),
    }[protocol]
    response = httpx.post(gateway.url + url, json={**body, "model": "tight", "tools": shaped})
    status, body = response.status_code, response.json()
    assert status == 400
    message = body["error"] if protocol == "ollama" else body["error"]["message"]
    found = re.search(
        r"the prompt has (\d+) tokens .* the 12 tools' definitions take (\d+) tokens, "
        r"the system prompt (\d+), the messages (\d+); declare fewer tools",
        message,
    )
    assert found, message
    total, tools_take, system_takes, rest = map(int, found.groups())
    assert tools_take > system_takes > rest > 0 and tools_take + system_takes + rest == total
    if protocol == "anthropic":  # Anthropic's own wording first: Claude Code keys on it
        assert message.startswith(f"prompt is too long: {total} tokens > 300 maximum; ")


TURNS = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "first question " + "q" * 120},
    {"role": "assistant", "content": "first answer " + "a" * 120},
    {"role": "user", "content": "and now?"},
]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_truncate_drops_the_oldest_turns_and_says_so(gateway, protocol):
    messages = TURNS
    extra = {}
    if protocol == "anthropic":
        messages, extra = TURNS[1:], {"system": "Be brief."}
    elif protocol == "responses":
        messages, extra = TURNS[1:], {"instructions": "Be brief."}
    status, _, text, _, rid = ask(
        gateway, protocol, "trimmer", tools=False, messages=messages, **extra
    )
    assert status == 200 and text == "hello from echo"
    generated = gateway.wait_event("generated", request_id=rid)
    assert generated["truncated_messages"] == 2
    assert generated["prompt_tokens"] < 300


def wire_tools(protocol: str, tools: list[dict]) -> list[dict]:
    """Anthropic-shaped tools (name, description, input_schema) in `protocol`'s shape."""
    if protocol == "anthropic":
        return tools
    if protocol == "responses":
        return [
            {
                "type": "function",
                "name": t["name"],
                "description": t["description"],
                "parameters": t["input_schema"],
            }
            for t in tools
        ]
    return [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t["description"],
                "parameters": t["input_schema"],
            },
        }
        for t in tools
    ]


# Twelve tools of ~250 tokens each on a window of 1,200: the tools alone overflow it.
BOX = [
    {**ANTHROPIC_TOOLS[0], "name": f"tool_{i}", "description": "does things " * 4}
    for i in range(12)
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_drop_unused_keeps_the_tools_that_fit_and_names_the_rest(gateway, protocol, stream):
    url, body = {
        "openai": ("/v1/chat/completions", {"messages": ASK}),
        "responses": ("/v1/responses", {"input": ASK}),
        "anthropic": ("/v1/messages", {"messages": ASK, "max_tokens": 50}),
        "ollama": ("/api/chat", {"messages": ASK}),
    }[protocol]
    body |= {"model": "toolbox", "tools": wire_tools(protocol, BOX), "stream": stream}
    response = httpx.post(gateway.url + url, json=body, timeout=30)
    assert response.status_code == 200, response.text
    assert "hello" in response.text
    header = response.headers["x-gateway-dropped-tools"].split(",")
    event = gateway.wait_event("tools_dropped", request_id=response.headers["x-request-id"])
    assert event["dropped"] == header
    assert event["kept"] > 0 and event["kept"] + len(header) == 12
    assert header == [f"tool_{i}" for i in range(event["kept"], 12)]  # the last declared go
    assert event["window"] == 1200 and event["prompt_tokens"] > 1200
    generated = gateway.wait_event("generated", request_id=response.headers["x-request-id"])
    assert generated["prompt_tokens"] + 16 <= 1200


def test_a_dropped_tools_odd_name_cannot_break_the_header(gateway):
    odd = [
        {**BOX[0], "name": "first"},
        *({**t} for t in BOX[1:11]),
        {**BOX[11], "name": "a,b\r\nX-Evil: 1 é"},
    ]
    # OpenAI's chat schema refuses such a name; Anthropic's route takes it as it comes.
    body = {"model": "toolbox", "messages": ASK, "tools": odd, "max_tokens": 50}
    response = httpx.post(gateway.url + "/v1/messages", json=body, timeout=30)
    assert response.status_code == 200, response.text
    assert "x-evil" not in response.headers
    assert response.headers["x-gateway-dropped-tools"].endswith(",a%2Cb%0D%0AX-Evil:%201%20%C3%A9")


def test_drop_unused_keeps_a_tool_the_conversation_called(gateway):
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="none", max_retries=0)
    called = {"id": "c1", "type": "function"}
    called["function"] = {"name": "tool_11", "arguments": '{"city": "Paris"}'}
    messages = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [called]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "user", "content": "and tomorrow?"},
    ]
    raw = client.chat.completions.with_raw_response.create(
        model="toolbox", messages=messages, tools=wire_tools("openai", BOX)
    )
    assert raw.parse().choices[0].message.content == "hello from echo"
    dropped = raw.headers["x-gateway-dropped-tools"].split(",")
    assert "tool_11" not in dropped and "tool_10" in dropped


REASONING_ON = {
    "openai": {"reasoning_effort": "low"},
    "responses": {"reasoning": {"effort": "low"}},
    "anthropic": {"thinking": {"type": "enabled", "budget_tokens": 1024}},
    "ollama": {"think": True},
}
REASONING_OFF = {
    "openai": {"reasoning_effort": "none"},
    "responses": {"reasoning": {"effort": "none"}},
    "anthropic": {"thinking": {"type": "disabled"}},
    "ollama": {"think": False},
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_reasoning_is_split_from_the_answer_and_shown_when_asked(gateway, protocol, stream):
    asked = REASONING_ON[protocol]
    status, _, text, thought, _ = ask(
        gateway, protocol, "thinker", tools=False, stream=stream, **asked
    )
    assert (status, text, thought) == (200, "Hello!", "hmm, the user greets")
    # Not asked, the model's default (off) hides it; a model whose default thinks shows it,
    # unless the request turns it off.
    assert ask(gateway, protocol, "thinker", tools=False, stream=stream)[2:4] == ("Hello!", "")
    assert ask(gateway, protocol, "deep", tools=False, stream=stream)[3] == "hmm, the user greets"
    off = REASONING_OFF[protocol]
    assert ask(gateway, protocol, "deep", tools=False, stream=stream, **off)[2:4] == ("Hello!", "")


def test_the_sdks_read_the_reasoning_fields(gateway):
    reply = gateway.openai().chat.completions.create(model="deep", messages=ASK)
    assert reply.choices[0].message.model_extra["reasoning_content"] == "hmm, the user greets"
    response = gateway.openai().responses.create(model="deep", input="hi")
    reasoning = [item for item in response.output if item.type == "reasoning"]
    assert reasoning[0].content[0].text == "hmm, the user greets"
    assert response.output_text == "Hello!"
    with gateway.anthropic().messages.stream(model="deep", max_tokens=100, messages=ASK) as stream:
        message = stream.get_final_message()
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == "hmm, the user greets"
    assert message.content[0].signature == ""
    chat = gateway.ollama().chat(model="deep", messages=ASK, think=True)
    assert chat.message.thinking == "hmm, the user greets" and chat.message.content == "Hello!"


def test_stop_strings_do_not_match_inside_the_reasoning(gateway):
    status, _, text, thought, _ = ask(
        gateway, "openai", "deep", tools=False, stop=["greets"], reasoning_effort="high"
    )
    assert (text, thought) == ("Hello!", "hmm, the user greets")
