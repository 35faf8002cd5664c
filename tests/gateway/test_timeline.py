"""GATEWAY_TIMELINE: the marks bench/timeline.py reads are written at exit: a request passing
the server, its handler, the queue and the model thread's admission once, then each token
passing the model thread's step, the hand-over, the loop and the frame's write in turn."""

from __future__ import annotations

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
    points = [point for _, point, _, _ in sorted(marks)]
    assert set(points) == set(ADMISSION + ORDER)
    assert [points.count(p) for p in ADMISSION[1:]] == [1, 1, 1, 1]
    # The request's way to the model, in order, ending before the first step.
    at = {point: t for t, point, _, _ in sorted(marks) if point in ADMISSION[1:]}
    at["request"] = max(t for t, point, _, _ in marks if point == "request" and t < at["submit"])
    at["step"] = min(t for t, point, _, _ in marks if point == "step")
    assert [at[p] for p in [*ADMISSION, "step"]] == sorted(at[p] for p in [*ADMISSION, "step"])
    # Every chunk the client read was a frame written, and each step with outputs was handed
    # over and taken by the loop.
    assert points.count("written") == points.count("frame") == len(chunks)
    assert points.count("handed") == points.count("loop") >= len(WORDS.split())
    # The model thread's marks and the loop's come from two threads.
    threads = {point: thread for _, point, _, thread in marks}
    assert threads["step"] == threads["handed"] != threads["loop"] == threads["written"]
    # The first word's way, in order.
    first = next(t for t, point, _, _ in sorted(marks) if point == "step")
    times = {}
    for t, point, _, _ in sorted(marks):
        if t >= first and point not in times:
            times[point] = t
    assert [times[p] for p in ORDER] == sorted(times[p] for p in ORDER)
