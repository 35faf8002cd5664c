"""Build a GGUF model's tokenizer.json and tokenizer_config.json from its metadata.

A byte-level BPE (`tokenizer.ggml.model` "gpt2") rebuilt with `tokenizers`: the vocabulary
and merges, the pre-tokenizer its `tokenizer.ggml.pre` names, special and user-defined
tokens, and the BOS template; the config carries the chat template and special tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

from engines.errors import SourceError


def write_tokenizer(model_id: str, path: str, hm: dict, meta: dict, tokens: list, out: Path):
    """Write tokenizer.json and tokenizer_config.json into `out` from the GGUF metadata."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
    types = (
        meta["tokenizer.ggml.token_type"].tolist() if "tokenizer.ggml.token_type" in meta else []
    )
    ids = {k: hm.get(f"tokenizer.ggml.{k}_token_id") for k in ("bos", "eos", "padding", "unknown")}
    names = {k: tokens[i] for k, i in ids.items() if isinstance(i, int) and 0 <= i < len(tokens)}
    add_bos = bool(hm.get("tokenizer.ggml.add_bos_token", False)) and "bos" in names
    try:
        tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
        space = bool(hm.get("tokenizer.ggml.add_space_prefix", False))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=space, use_regex=True)
        if hm.get("tokenizer.ggml.pre") == "smollm":
            # SmolLM's own tokenizer splits every digit before the GPT-2 byte-level regex.
            digits = pre_tokenizers.Digits(individual_digits=True)
            tok.pre_tokenizer = pre_tokenizers.Sequence([digits, tok.pre_tokenizer])
        tok.decoder = decoders.ByteLevel()
        if add_bos:
            bos = names["bos"]
            tok.post_processor = processors.TemplateProcessing(
                single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, ids["bos"])]
            )
        # Token type 3 is "control" (special), 4 is "user defined" (kept whole, not special).
        added: dict[int, list] = {3: [], 4: []}
        for i, t in enumerate(types):
            if t in added:
                added[t].append(AddedToken(tokens[i], special=t == 3, normalized=False))
        tok.add_special_tokens(added[3])
        tok.add_tokens(added[4])
        tok.save(str(out / "tokenizer.json"))
    except Exception as e:  # tokenizers raises plain Exceptions on a bad vocab or merges
        raise SourceError(model_id, path, f"cannot build the tokenizer: {e}") from None
    tok_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": names.get("bos"),
        "eos_token": names.get("eos"),
        "pad_token": names.get("padding"),
        "unk_token": names.get("unknown"),
        "add_bos_token": add_bos,
        "add_eos_token": bool(hm.get("tokenizer.ggml.add_eos_token", False)),
        "chat_template": hm.get("tokenizer.chat_template"),
        "model_max_length": int(hm.get("llama.context_length", 2048)),
        "clean_up_tokenization_spaces": False,
    }
    tok_config = {k: v for k, v in tok_config.items() if v is not None}
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2))
