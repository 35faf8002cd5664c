"""The gateway's MLX engine without the gateway: its batch stepped in a plain process.

A third single-stream side between in-process `mlx_lm.stream_generate` and the gateway's
SSE: the same `MLXEngine` and `MLXBatch` (chat template, the single-sequence path,
detokenizer, output parser) that a `concurrency: 1`, `prefix_reuse: false` model runs, with
no HTTP, no event loop and no runner thread. Where the gateway trails in-process, this says
whether the engine or what surrounds it costs the difference. Same protocol as
bench/inprocess.py: one JSON line in, one JSON line of timings out.

    python3 bench/gpu/engine_worker.py MODEL_DIR PRODUCT_DIR
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    model_dir, product = sys.argv[1], sys.argv[2]
    sys.path.insert(0, product)
    import msgspec

    from engines.llm.engine import MLXEngine
    from engines.mlx.platform import detect
    from schemas.canonical import ChatRequest, Finished, TextDelta
    from schemas.config import ModelConfig

    config = {"id": "engine", "source": model_dir, "concurrency": 1, "prefix_reuse": False}
    config |= {"context": {"max": 4096}}
    engine = MLXEngine(msgspec.convert(config, ModelConfig), detect(), None)
    engine.load(None)
    batch = engine.open_batch()  # kept from request to request, as a runner keeps it
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        request = msgspec.convert(
            {
                "messages": job["messages"],
                "max_tokens": job["max_tokens"],
                "sampling": {"temperature": 0},
            },
            ChatRequest,
        )
        started = time.perf_counter()
        batch.add("r", request, lambda: False)
        first = last = None
        text, done = [], None
        while done is None:
            for _, output in batch.step():
                now = time.perf_counter()
                if isinstance(output, TextDelta):
                    first = first or now
                    last = now
                    text.append(output.text)
                elif isinstance(output, Finished):
                    done = output
        print(
            json.dumps(
                {
                    "started": started,
                    "first": first,
                    "last": last,
                    "ended": time.perf_counter(),
                    "prompt_tokens": done.prompt_tokens,
                    "new_tokens": done.new_tokens,
                    "text": "".join(text),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
