#!/usr/bin/env python3
"""[8/8] Random-weight GGUFs in real Llama shapes, for SPEED TESTS ONLY.

    THEIR OUTPUT IS NOISE. They exist because real 1B/8B weights cannot
    travel to the GPU machine; speed does not depend on the weights' values.

Two steps, because the GPU machine has no model to read a tokenizer from:
  here:  gen-random-gguf.py tokenizer SRC.gguf OUT.json
         (the tokenizer.* metadata of a real model, e.g. the default model)
  there: gen-random-gguf.py model --tok OUT.json --shape 1b|8b --type f16|q8_0|q4_k --out X.gguf

Shapes: 1b = Llama-3.2-1B (2048 wide, 16 layers, 32 heads, 8 KV heads, FFN 8192),
8b = Llama-3-8B (4096, 32, 32, 8, 14336), with the tokenizer's vocabulary (SmolLM2:
49,152, so "8b" has ~7.4B parameters). Needs numpy and the `gguf` package.
Tensors are views into one random buffer, so memory stays small and writing
is bound by the disk.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import gguf

SHAPES = {  # width, layers, heads, kv heads, ffn, rope base
    "tiny": (256, 2, 8, 4, 512, 10000.0),
    "1b": (2048, 16, 32, 8, 8192, 500000.0),
    "8b": (4096, 32, 32, 8, 14336, 500000.0),
}
QT = gguf.GGMLQuantizationType
TYPES = {"f16": (QT.F16, 1), "q8_0": (QT.Q8_0, 7), "q4_k": (QT.Q4_K, 15)}


def tokenizer(src, out):
    r = gguf.GGUFReader(src)
    keys = {}
    for k, f in r.fields.items():
        if k.startswith("tokenizer."):
            vt = f.types[0]
            sub = f.types[1] if vt == gguf.GGUFValueType.ARRAY else None
            keys[k] = {"type": int(vt), "sub_type": None if sub is None else int(sub), "value": f.contents()}
    with open(out, "w") as fh:
        json.dump(keys, fh)
    print(f"{len(keys)} tokenizer keys -> {out}")


def random_blocks(kind, n_bytes, rng):
    """Bytes laid out as valid blocks of `kind` (finite scales, small values)."""
    if kind == "f16":
        return (rng.standard_normal(n_bytes // 2, dtype=np.float32) * 0.02).astype(np.float16).view(np.uint8)
    if kind == "q8_0":  # per block: f16 scale, 32 int8
        nb = n_bytes // 34
        b = np.empty((nb, 34), np.uint8)
        b[:, 2:] = rng.integers(-127, 128, size=(nb, 32), dtype=np.int8).view(np.uint8)
        b[:, :2] = np.full(nb, 0.02 / 64, np.float16).view(np.uint8).reshape(nb, 2)
        return b.reshape(-1)
    if kind == "q4_k":  # per block: f16 d, f16 dmin, 12 scale bytes, 128 nibble bytes
        nb = n_bytes // 144
        b = rng.integers(0, 256, size=(nb, 144), dtype=np.uint8)
        b[:, :4] = np.full((nb, 2), 1.5e-4, np.float16).view(np.uint8).reshape(nb, 4)
        return b.reshape(-1)
    raise ValueError(kind)


def model(tok_json, shape, kind, out):
    t0 = time.time()
    width, layers, heads, kv, ffn, rope = SHAPES[shape]
    hd = width // heads
    with open(tok_json) as fh:
        tok = json.load(fh)
    n_vocab = len(tok["tokenizer.ggml.tokens"]["value"])
    qt, ftype = TYPES[kind]
    w = gguf.GGUFWriter(out, arch="llama")
    w.add_name(f"RANDOM WEIGHTS (noise) llama-{shape}-{kind}")
    w.add_context_length(32768)
    w.add_embedding_length(width)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_freq_base(rope)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hd)
    w.add_vocab_size(n_vocab)
    w.add_file_type(ftype)
    for k, f in tok.items():
        sub = None if f["sub_type"] is None else gguf.GGUFValueType(f["sub_type"])
        w.add_key_value(k, f["value"], gguf.GGUFValueType(f["type"]), sub_type=sub)
    rng = np.random.default_rng(7)
    blk, blk_bytes = gguf.GGML_QUANT_SIZES[qt]
    biggest = max(n_vocab * width, ffn * width)
    base = random_blocks(kind, biggest // blk * blk_bytes + (16 << 20), rng)
    norm = np.ones(width, np.float32)
    n = [0]

    def weight(name, rows, cols):
        size = rows * cols // blk * blk_bytes
        room = base.size - size
        off = ((n[0] * 7919 * 4096) % (room + 1)) // blk_bytes * blk_bytes if room else 0
        n[0] += 1
        v = base[off:off + size]
        if kind == "f16":
            w.add_tensor(name, v.view(np.float16).reshape(rows, cols))
        else:
            w.add_tensor(name, v.reshape(rows, cols // blk * blk_bytes), raw_dtype=qt)

    weight("token_embd.weight", n_vocab, width)
    w.add_tensor("output_norm.weight", norm)
    weight("output.weight", n_vocab, width)
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", norm)
        weight(f"blk.{i}.attn_q.weight", heads * hd, width)
        weight(f"blk.{i}.attn_k.weight", kv * hd, width)
        weight(f"blk.{i}.attn_v.weight", kv * hd, width)
        weight(f"blk.{i}.attn_output.weight", width, heads * hd)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", norm)
        weight(f"blk.{i}.ffn_gate.weight", ffn, width)
        weight(f"blk.{i}.ffn_up.weight", ffn, width)
        weight(f"blk.{i}.ffn_down.weight", width, ffn)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"RANDOM WEIGHTS, OUTPUT IS NOISE: {out} ({os.path.getsize(out) / 2**30:.2f} GiB, "
          f"{time.time() - t0:.0f} s)", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokenizer")
    t.add_argument("src")
    t.add_argument("out")
    m = sub.add_parser("model")
    m.add_argument("--tok", required=True)
    m.add_argument("--shape", choices=SHAPES, default="1b")
    m.add_argument("--type", choices=TYPES, default="f16")
    m.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.cmd == "tokenizer":
        tokenizer(a.src, a.out)
    else:
        model(a.tok, a.shape, a.type, a.out)


if __name__ == "__main__":
    main()
