"""The vision engine in process, on the demo checkpoint: the batched path and the
single-stream path (used where mlx-vlm has no batch generator) answer alike, and the
single-stream path's parked conversations are reused only for the same picture.

The engine runs in a child process started with OpenBLAS preloaded, as `gateway serve`
starts itself (MLX's own CPU BLAS would make this minutes instead of seconds).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from engines.platform import find_openblas

SCRIPT = textwrap.dedent(
    """
    import io, json
    import numpy as np
    from PIL import Image
    from engines.platform import PlatformPath
    from engines.vision.demo import build_demo_vlm
    from engines.vision.engine import VisionEngine
    from schemas.canonical import ChatRequest, Finished, ImagePart, Message, Sampling, TextPart
    from schemas.config import ModelConfig

    def ask(seed):
        pixels = np.random.default_rng(seed).integers(0, 255, (40, 60, 3), dtype=np.uint8)
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, "PNG")
        parts = [TextPart(text="Describe this picture."), ImagePart(data=out.getvalue())]
        message = Message(role="user", content="Describe this picture.", parts=parts)
        return ChatRequest(messages=[message], max_tokens=4, sampling=Sampling(temperature=0.0))

    def single(request):
        outputs = list(engine.generate(request, lambda: False))
        return "".join(getattr(o, "text", "") for o in outputs[:-1]), outputs[-1]

    def batched(request):
        batch, text = engine.open_batch(), ""
        batch.add("k", request, lambda: False)
        while batch.active:
            for _, output in batch.step():
                if isinstance(output, Finished):
                    return text, output
                text += getattr(output, "text", "")

    cpu = PlatformPath(device="cpu", blas="openblas", weights="float32", why="test")
    engine = VisionEngine(ModelConfig(id="vlm", source=str(build_demo_vlm())), cpu, None)
    engine.load(None)
    runs = [single(ask(1)), batched(ask(1)), single(ask(1)), single(ask(2))]
    print(json.dumps([
        {"text": t, "prompt": f.prompt_tokens, "reused": f.reused_prefix_tokens,
         "images": f.images, "image_tokens": f.image_tokens}
        for t, f in runs
    ]))
    """
)


@pytest.fixture(scope="module")
def runs():
    env = dict(os.environ)
    if blas := find_openblas():
        env["LD_PRELOAD"] = blas
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_both_paths_answer_alike_and_count_the_image(runs):
    single, batched = runs[0], runs[1]
    assert single["text"] and single["text"] == batched["text"]
    assert single["prompt"] == batched["prompt"]
    assert single["images"] == 1 and single["image_tokens"] > 0


def test_single_stream_reuses_a_conversation_only_for_the_same_picture(runs):
    again, other = runs[2], runs[3]
    assert again["reused"] == again["prompt"] - 1 and again["text"] == runs[0]["text"]
    assert other["reused"] == 0


def test_penalties_are_refused_by_name_on_mlx_vlm():
    from engines.errors import BadRequest
    from engines.platform import PlatformPath
    from engines.vision.engine import VisionEngine
    from schemas.canonical import ChatRequest, Message, Sampling
    from schemas.config import ModelConfig

    cpu = PlatformPath(device="cpu", blas="openblas", weights="float32", why="test")
    engine = VisionEngine(ModelConfig(id="vlm", source="unused"), cpu, None)
    hi = [Message(role="user", content="hi")]
    for sampling in (Sampling(repeat_penalty=1.1), Sampling(logit_bias={1: 2.0})):
        with pytest.raises(BadRequest, match="repeat_penalty, presence_penalty"):
            engine.prepare(ChatRequest(messages=hi, max_tokens=4, sampling=sampling))
