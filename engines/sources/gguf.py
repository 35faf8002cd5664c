"""GGUF → MLX: check the file in pure Python, load it with MLX, write an mlx-lm directory.

MLX reads GGUF through gguflib, which trusts every length and offset in the file: a
truncated or corrupt file crashes the process instead of raising. So `read_gguf_header`
walks the whole header with bounded reads first, and only a file that passes reaches MLX.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

from engines.errors import GGUFFormatError, SourceError
from engines.log import emit
from engines.sources.gguf_header import BITS, GGUFHeader, read_gguf_header
from schemas.events import CacheRebuilt

# Bump when the converted layout changes, so stale cache entries are rebuilt.
CONVERTER_VERSION = 2  # 2: the marker records sampled content checksums
MARKER = "mlx-gateway.json"
# What every entry holds; checked (present, not empty) for entries published before the
# marker recorded file sizes.
ENTRY_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
# A converter holds an exclusive lock on this file in its temp dir while it works; a temp
# dir whose lock nobody holds was left by a converter that died, and is removed.
LOCK = ".converting"
# A temp dir without its lock file yet may be a converter's first instant: spared this long.
UNLOCKED_GRACE_S = 60.0

_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_BLOCK = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_PRE_TOKENIZERS = ("smollm", "gpt2")  # tokenizer.ggml.pre values we know how to rebuild


def _mlx_name(gguf_name: str) -> str | None:
    """`blk.3.attn_q.scales` -> `model.layers.3.self_attn.q_proj.scales`; None if unknown."""
    stem, _, suffix = gguf_name.rpartition(".")
    if stem in _TOP:
        return f"{_TOP[stem]}.{suffix}"
    parts = stem.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in _BLOCK:
        return f"model.layers.{int(parts[1])}.{_BLOCK[parts[2]]}.{suffix}"
    return None


def _check_supported(model_id: str, path: str, header: GGUFHeader) -> None:
    """Refuse what the conversion cannot express, before MLX reads a byte."""
    meta = header.metadata
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise SourceError(model_id, path, f"unsupported architecture {arch!r} (only llama)")
    layers = meta.get("llama.block_count")
    if not isinstance(layers, int) or not 0 < layers <= len(header.tensors):
        raise SourceError(model_id, path, f"bad llama.block_count {layers!r}")
    tok_model, pre = meta.get("tokenizer.ggml.model"), meta.get("tokenizer.ggml.pre", "gpt2")
    if tok_model != "gpt2" or pre not in _PRE_TOKENIZERS:
        raise SourceError(
            model_id,
            path,
            f"unsupported tokenizer {tok_model!r}/{pre!r} "
            f"(only byte-level BPE 'gpt2' with pre-tokenizer {_PRE_TOKENIZERS})",
        )
    for t in header.tensors:
        if _mlx_name(t.name) is None or (t.kind in BITS and not t.name.endswith(".weight")):
            raise SourceError(model_id, path, f"unsupported tensor {t.name!r} for llama")


def check_gguf(model_id: str, path: Path | str, file: Path | None = None) -> GGUFHeader:
    """Validate a GGUF file and check the conversion supports it; SourceError if not.

    `file` is the bytes to read when they are a private copy of `path`.
    """
    path = str(path)
    file = file or Path(path)
    try:
        header = read_gguf_header(file)
    except GGUFFormatError as e:
        raise SourceError(model_id, path, str(e)) from None
    except OSError as e:
        raise SourceError(model_id, path, f"unreadable: {e.strerror or e}") from None
    _check_supported(model_id, path, header)
    return header


def _hash_file(src: Path, copy_to: Path | None = None) -> str:
    digest = hashlib.sha256()
    with open(src, "rb") as fi, open(copy_to or os.devnull, "wb") as fo:
        while chunk := fi.read(1 << 20):
            digest.update(chunk)
            if copy_to is not None:
                fo.write(chunk)
    return digest.hexdigest()


# A checksum reads these blocks of a file (its size, its first and last block, and evenly
# spaced ones between), so checking an entry at every load costs ~1 MiB of reads, not the
# whole weights; a file this small or smaller is hashed whole.
SAMPLE_BLOCK = 1 << 16
SAMPLES = 16


def sampled_digest(path: Path) -> str:
    """sha256 over the file's size and sampled blocks (all of it when small)."""
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        if size <= SAMPLE_BLOCK * (SAMPLES + 2):
            digest.update(f.read())
            return digest.hexdigest()
        between = (size * i // (SAMPLES + 1) for i in range(1, SAMPLES + 1))
        for offset in sorted({0, *between, size - SAMPLE_BLOCK}):
            f.seek(offset)
            digest.update(f.read(SAMPLE_BLOCK))
    return digest.hexdigest()


def entry_damage(out: Path) -> str | None:
    """None for a published entry of this converter whose files match the sizes and
    checksums recorded when it was written; else what is wrong ("absent" when there is
    none)."""
    try:
        marker = json.loads((out / MARKER).read_text())
    except FileNotFoundError:
        return "absent"
    except (OSError, ValueError) as error:
        return f"its marker is unreadable ({error})"
    if not isinstance(marker, dict) or marker.get("converter_version") != CONVERTER_VERSION:
        return "written by another converter version"
    files = marker.get("files")
    if not isinstance(files, dict) or not set(ENTRY_FILES) <= set(files):
        return "its marker lists no files"
    for name, recorded in files.items():
        try:
            if not isinstance(recorded, dict) or (out / name).stat().st_size != recorded["size"]:
                return f"{name} is not the size it was written at"
            if sampled_digest(out / name) != recorded["sampled_sha256"]:
                return f"{name} does not match the checksum it was written with"
        except (OSError, KeyError, TypeError):
            return f"{name} is missing or unreadable"
    return None


def _is_complete(out: Path) -> bool:
    return entry_damage(out) is None


def clean_stale_temps(root: Path) -> list[Path]:
    """Remove the temp dirs of converters that died (killed mid-conversion); the removed.

    A live converter holds the lock in its temp dir, so only abandoned ones go.
    """
    removed = []
    for tmp in root.glob(".tmp-*") if root.is_dir() else []:
        lock_file = tmp / LOCK
        try:
            with open(lock_file, "rb") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held: alive, skip
        except FileNotFoundError:
            with contextlib.suppress(OSError):
                if time.time() - tmp.stat().st_mtime < UNLOCKED_GRACE_S:
                    continue
        except OSError:
            continue
        shutil.rmtree(tmp, ignore_errors=True)
        removed.append(tmp)
    return removed


def convert_gguf(model_id: str, gguf_path: Path, cache_dir: Path) -> Path:
    """Convert a GGUF file once into `cache_dir/gguf/<sha256>/`; return that directory.

    The file is validated before MLX opens it. The output is built in a private temp
    dir beside the final one and published by one rename, so concurrent converters never
    see, use or leave a half-written directory.
    """
    path = str(gguf_path)
    check_gguf(model_id, path)  # fail fast, before hashing a large file
    root = cache_dir / "gguf"
    clean_stale_temps(root)
    try:
        final = root / _hash_file(gguf_path)
    except OSError as e:
        raise SourceError(model_id, path, f"unreadable: {e.strerror or e}") from None
    damage = entry_damage(final)
    if damage is None:
        return final
    if damage != "absent":  # damaged (a file missing, cut short or overwritten): rebuilt once
        emit(CacheRebuilt(model=model_id, path=str(final), reason=damage), level="warning")
    tmp = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
        with open(tmp / LOCK, "wb") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when done, or when this process dies
            # gguflib maps the file read-write, so MLX fails on a read-only one (measured);
            # a private copy also pins the bytes we validated. Its hash names the result.
            copy = tmp / "source.gguf"
            final = root / _hash_file(gguf_path, copy)
            header = check_gguf(model_id, path, copy)
            _write_model(model_id, path, copy, header, tmp)
            copy.unlink()
            (tmp / LOCK).unlink()
            files = {
                f.name: {"size": f.stat().st_size, "sampled_sha256": sampled_digest(f)}
                for f in tmp.iterdir()
                if f.is_file()
            }
            marker = {
                "converter_version": CONVERTER_VERSION,
                "source": path,
                "sha256": final.name,
                "files": files,
            }
            (tmp / MARKER).write_text(json.dumps(marker, indent=2))
            if _publish(tmp, final):
                tmp = None  # renamed into place: nothing of ours left to clean
        return final
    except (OSError, RuntimeError) as e:  # MLX reports a failed write as RuntimeError
        raise SourceError(model_id, path, f"converting into the cache at {final}: {e}") from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _publish(tmp: Path, final: Path) -> bool:
    """Rename `tmp` to `final`; False when another converter got there first (theirs stays)."""
    if final.exists() and not _is_complete(final):
        # Damaged or from an older converter: move it aside (atomic) before replacing it.
        stale = tmp.with_name(tmp.name + "-stale")
        with contextlib.suppress(OSError):
            os.rename(final, stale)
        shutil.rmtree(stale, ignore_errors=True)
    try:
        os.rename(tmp, final)
    except OSError:
        if not _is_complete(final):
            raise
        return False
    return True


def _write_model(model_id: str, path: str, copy: Path, header: GGUFHeader, out: Path) -> None:
    import mlx.core as mx  # here, so validating configs never pays for importing MLX

    try:
        weights, meta = mx.load(str(copy), return_metadata=True)
    except Exception as e:  # MLX raises RuntimeError/ValueError with its own wording
        raise SourceError(model_id, path, f"MLX could not read it: {e}") from None
    renamed = {_mlx_name(k): v for k, v in weights.items()}
    hm = header.metadata
    try:
        n_layers = int(hm["llama.block_count"])
        tokens = list(meta["tokenizer.ggml.tokens"])
        config = {
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
            "hidden_size": int(hm["llama.embedding_length"]),
            "num_hidden_layers": n_layers,
            "intermediate_size": int(hm["llama.feed_forward_length"]),
            "num_attention_heads": int(hm["llama.attention.head_count"]),
            "num_key_value_heads": int(
                hm.get("llama.attention.head_count_kv") or hm["llama.attention.head_count"]
            ),
            "rms_norm_eps": float(hm["llama.attention.layer_norm_rms_epsilon"]),
            "vocab_size": len(tokens),
            "rope_theta": float(hm.get("llama.rope.freq_base", 10000.0)),
            # GGUF llama Q/K weights are permuted for the interleaved rotary layout.
            "rope_traditional": True,
            "tie_word_embeddings": "lm_head.weight" not in renamed,
            "max_position_embeddings": int(hm["llama.context_length"]),
        }
    except (KeyError, TypeError, ValueError) as e:
        raise SourceError(model_id, path, f"missing or bad metadata {e}") from None
    if "llama.attention.key_length" in hm:
        config["head_dim"] = int(hm["llama.attention.key_length"])
    for key in ("bos_token_id", "eos_token_id"):
        if f"tokenizer.ggml.{key}" in hm:
            config[key] = int(hm[f"tokenizer.ggml.{key}"])
    config["gguf"] = {k: v for k, v in hm.items() if k.startswith("general.") and v is not None}
    expected = {f"model.layers.{i}.{m}.weight" for i in range(n_layers) for m in _BLOCK.values()}
    expected |= {"model.embed_tokens.weight", "model.norm.weight"}
    if missing := sorted(expected - renamed.keys()):
        raise SourceError(model_id, path, f"missing tensor {missing[0]} ({len(missing)} missing)")
    if renamed["model.embed_tokens.weight"].shape[0] != len(tokens):
        raise SourceError(model_id, path, "embedding rows do not match the vocabulary size")
    quant = _quantization(header)
    if quant:
        config["quantization"] = quant
    _write_tokenizer(model_id, path, hm, meta, tokens, out)
    mx.save_safetensors(str(out / "model.safetensors"), renamed, metadata={"format": "mlx"})
    (out / "config.json").write_text(json.dumps(config, indent=2, default=str))


def _quantization(header: GGUFHeader) -> dict[str, object]:
    """mlx-lm's quantization block: the commonest bit width, per-module entries for others."""
    bits = {
        _mlx_name(t.name)[: -len(".weight")]: BITS[t.kind] for t in header.tensors if t.kind in BITS
    }
    if not bits:
        return {}
    common = Counter(bits.values()).most_common(1)[0][0]
    quant: dict[str, object] = {"group_size": 32, "bits": common}  # GGUF blocks are 32 wide
    quant |= {m: {"group_size": 32, "bits": b} for m, b in bits.items() if b != common}
    return quant


def _write_tokenizer(model_id: str, path: str, hm: dict, meta: dict, tokens: list, out: Path):
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
