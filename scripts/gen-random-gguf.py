#!/usr/bin/env python3
"""[8/8] Random-weight GGUFs in real Llama shapes, for SPEED TESTS ONLY.

    THEIR OUTPUT IS NOISE. They exist because real 1B/8B weights cannot
    travel to the GPU machine; speed does not depend on the weights' values.

Two steps, because the GPU machine has no model to read a tokenizer from:
  here:  gen-random-gguf.py tokenizer SRC.gguf OUT.json
         (the tokenizer.* metadata of a real model, e.g. the default model)
  there: gen-random-gguf.py model --tok OUT.json --shape 1b|8b --type f16|q8_0|q4_k --out X.gguf

For TEMPLATE TESTS, one step, here (scripts/gen-template-ggufs.sh runs it per family):
         gen-random-gguf.py chat --src SRC.gguf --template T.jinja [--template-variant NAME=FILE ...]
             [--special TEXT ...] [--user-defined TEXT ...] [--bos TEXT] [--eos TEXT] [--eot TEXT]
             [--add-bos true|false] --out OUT.gguf
         a "tiny" model (256 wide, 2 layers, f16, output tied to the embedding) with SRC's
         tokenizer (gpt2/BPE merges kept) plus each --special text as a CONTROL token
         (type 3) and each --user-defined text as a USER_DEFINED token (type 4; what
         llama.cpp's converter makes of added tokens that the model marks non-special,
         e.g. Qwen's <think>), appended unless present (a NORMAL token of that text is
         retyped); --bos/--eos/--eot name the token for tokenizer.ggml.*_token_id (added
         as control when missing); tokenizer.chat_template = T's text and
         tokenizer.chat_template.NAME = each variant's. SRC may also be a tokenizer JSON
         written by the `tokenizer` step.

For ARCHITECTURE TESTS (recurrent / hybrid / sliding-window memory), one step, here:
         gen-random-gguf.py arch --arch mamba2|rwkv7|lfm2|granitehybrid|gemma3 [--src SRC.gguf] --out OUT.gguf
         a tiny model of that llama.cpp architecture (128 wide, f16 matrices (gemma3's layers:
         f32), f32 vectors, output tied to the embedding where the arch allows; 14-27 MiB, nearly all of it
         the vocabulary) with SRC's tokenizer, unchanged (default: the default model):
           mamba2        2 Mamba-2 layers (d_inner 256, d_state 32, 4 heads, 1 group): all recurrent
           rwkv7         2 RWKV-7 layers (head size 64, 2 heads): all recurrent; untied output
           lfm2          4 layers: shortconv (recurrent), attention, shortconv, attention
           granitehybrid 4 layers: Mamba-2 (recurrent), attention, Mamba-2, attention
           gemma3        6 attention layers, sliding_window 32: llama.cpp's own gemma3 pattern
                         makes layers 0-4 sliding-window and layer 5 global
         The recurrent parameters keep the state bounded (Mamba-2 A < 0, dt = softplus(bias)
         in 0.01..0.1, D = 1; RWKV-7 decays come out in (0.55, 1) by construction), norms = 1,
         so outputs are finite noise. The final norm weight is LOGIT_SCALE[arch] (20-30, not 1),
         so the logits are peaked (top-1 vs top-2 logprob gap: median ~1, 70-85% of tokens
         > 0.5; top-1 logprob ~ -0.3..-1 where flat logits gave -9.8) and greedy text varies
         along the text (lfm2: ffn_down 10x wider so the layers, not the embedding, steer it;
         with 1x it repeated one token forever). Scaling does NOT remove near-ties relative
         to numeric noise: path noise (e.g. a prefix-cache hit's other batch shapes, through
         CPU flash attention's f16 sums) lives in the hidden state and is scaled with the
         logits (gemma3: max |dlogprob| 4e-4 -> 5e-3 at scale 20). It is a random network,
         so the top-2 gap has density at 0 and a rare flip stays possible; a replay check
         must accept a first difference where the top-2 are within the noise. gemma3 keeps
         its layer matrices f32 (no f16 rounding of activations; measured 1.6x less noise).

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
    keys = read_tokenizer(src)
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
    with open(tok_json) as fh:
        tok = json.load(fh)
    write_model(tok, shape, kind, out, f"RANDOM WEIGHTS (noise) llama-{shape}-{kind}")


def write_model(tok, shape, kind, out, name, tied=False, quiet=False):
    """A llama-architecture GGUF of random weights with the tokenizer keys `tok`
    ({key: {"type", "sub_type", "value"}}, as `tokenizer` writes them). `tied`:
    no output.weight (llama.cpp then uses token_embd.weight), half the bytes."""
    t0 = time.time()
    width, layers, heads, kv, ffn, rope = SHAPES[shape]
    hd = width // heads
    n_vocab = len(tok["tokenizer.ggml.tokens"]["value"])
    qt, ftype = TYPES[kind]
    w = gguf.GGUFWriter(out, arch="llama")
    w.add_name(name)
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
    if not tied:
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
    if not quiet:
        print(f"RANDOM WEIGHTS, OUTPUT IS NOISE: {out} ({os.path.getsize(out) / 2**30:.2f} GiB, "
              f"{time.time() - t0:.0f} s)", file=sys.stderr)


def read_tokenizer(src):
    """The tokenizer.* keys of a GGUF (or of a JSON that `tokenizer` wrote)."""
    if src.endswith(".json"):
        with open(src) as fh:
            return json.load(fh)
    r = gguf.GGUFReader(src)
    keys = {}
    for k, f in r.fields.items():
        if k.startswith("tokenizer."):
            vt = f.types[0]
            sub = f.types[1] if vt == gguf.GGUFValueType.ARRAY else None
            keys[k] = {"type": int(vt), "sub_type": None if sub is None else int(sub), "value": f.contents()}
    return keys


CONTROL, USER_DEFINED, NORMAL = int(gguf.TokenType.CONTROL), int(gguf.TokenType.USER_DEFINED), int(gguf.TokenType.NORMAL)
VT = gguf.GGUFValueType


def chat(a):
    """A tiny random model carrying a family's chat template and marker tokens."""
    t0 = time.time()
    tok = read_tokenizer(a.src)
    if tok.get("tokenizer.ggml.model", {}).get("value") != "gpt2":
        sys.exit(f"{a.src}: tokenizer.ggml.model is not gpt2 (BPE)")
    for k in [k for k in tok if k == "tokenizer.chat_template" or k.startswith("tokenizer.chat_template.")
              or k.startswith("tokenizer.ggml.eot_token_id")]:
        del tok[k]
    tokens = list(tok["tokenizer.ggml.tokens"]["value"])
    types = [int(t) for t in tok["tokenizer.ggml.token_type"]["value"]]
    scores = tok.get("tokenizer.ggml.scores")
    scores = None if scores is None else list(scores["value"])
    index = {t: i for i, t in enumerate(tokens)}
    added, retyped = [], []

    def ensure(text, kind):
        i = index.get(text)
        if i is None:
            i = index[text] = len(tokens)
            tokens.append(text)
            types.append(kind)
            if scores is not None:
                scores.append(0.0)
            added.append(text)
        elif types[i] == NORMAL and kind != NORMAL:
            if not all(33 <= ord(c) <= 126 for c in text):  # a BPE token's stored text is byte-encoded
                sys.exit(f"{text!r} is a NORMAL token of {a.src}; cannot retype it")
            types[i] = kind
            retyped.append(text)
        return i

    for text in a.special:
        ensure(text, CONTROL)
    for text in a.user_defined:
        ensure(text, USER_DEFINED)
    ids = {}
    for role, text in (("bos", a.bos), ("eos", a.eos), ("eot", a.eot)):
        if text is not None:
            ids[role] = ensure(text, CONTROL)
            tok[f"tokenizer.ggml.{role}_token_id"] = {"type": int(VT.UINT32), "sub_type": None, "value": ids[role]}
    if a.add_bos is not None:
        tok["tokenizer.ggml.add_bos_token"] = {"type": int(VT.BOOL), "sub_type": None, "value": a.add_bos == "true"}
    tok["tokenizer.ggml.tokens"]["value"] = tokens
    tok["tokenizer.ggml.token_type"]["value"] = types
    if scores is not None:
        tok["tokenizer.ggml.scores"]["value"] = scores

    def text_of(path):
        with open(path, encoding="utf-8") as fh:
            return fh.read()

    s = {"type": int(VT.STRING), "sub_type": None}
    tok["tokenizer.chat_template"] = dict(s, value=text_of(a.template))
    for v in a.template_variant:
        name, sep, path = v.partition("=")
        if not sep or not name:
            sys.exit(f"--template-variant {v!r}: want NAME=FILE")
        tok[f"tokenizer.chat_template.{name}"] = dict(s, value=text_of(path))
    stem = os.path.splitext(os.path.basename(a.template))[0]
    tmp = a.out + ".tmp"
    write_model(tok, "tiny", "f16", tmp, f"RANDOM WEIGHTS (noise) chat-template test model: {stem}",
                tied=True, quiet=True)
    os.replace(tmp, a.out)
    roles = " ".join(f"{r}={tokens[i]}({i})" for r, i in ids.items())
    print(f"{a.out}: {len(tokens)} tokens, +{len(added)} added"
          + (f", {len(retyped)} retyped ({' '.join(retyped)})" if retyped else "")
          + (f", {roles}" if roles else "")
          + f", {os.path.getsize(a.out) / 2**20:.0f} MiB, {time.time() - t0:.1f} s")


ARCHS = ("mamba2", "rwkv7", "lfm2", "granitehybrid", "gemma3")


LOGIT_SCALE = {"mamba2": 30.0, "rwkv7": 30.0, "lfm2": 25.0, "granitehybrid": 30.0, "gemma3": 20.0}


def write_arch(tok, arch, out):
    """A tiny random model of llama.cpp architecture `arch` (shapes as that arch's
    load_arch_tensors wants them; numpy shapes are ggml's reversed)."""
    width, head_dim, eps = 128, 64, 1e-5
    n_vocab = len(tok["tokenizer.ggml.tokens"]["value"])
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(out, arch=arch)
    w.add_name(f"RANDOM WEIGHTS (noise) {arch} architecture test model")
    w.add_context_length(32768)
    w.add_embedding_length(width)
    w.add_vocab_size(n_vocab)
    w.add_file_type(1)  # mostly f16
    for k, f in tok.items():
        sub = None if f["sub_type"] is None else gguf.GGUFValueType(f["sub_type"])
        w.add_key_value(k, f["value"], gguf.GGUFValueType(f["type"]), sub_type=sub)

    layer_f32 = arch == "gemma3"

    def mat(name, rows, cols, std=0.02):  # a matmul weight: {cols, rows} in ggml, f16 (gemma3's layers: f32)
        m = rng.standard_normal((rows, cols), dtype=np.float32) * std
        w.add_tensor(name, m if layer_f32 and rows != n_vocab else m.astype(np.float16))

    def vec(name, v):  # f32: norms, biases, conv kernels, SSM parameters
        w.add_tensor(name, np.ascontiguousarray(v, dtype=np.float32))

    ones = np.ones(width, np.float32)
    out_norm = ones * LOGIT_SCALE[arch]  # the final norm's weight: the logits' scale
    zeros = np.zeros(width, np.float32)

    def attention(i, heads, kv):
        w.add_tensor(f"blk.{i}.attn_norm.weight", ones)
        mat(f"blk.{i}.attn_q.weight", heads * head_dim, width)
        mat(f"blk.{i}.attn_k.weight", kv * head_dim, width)
        mat(f"blk.{i}.attn_v.weight", kv * head_dim, width)
        mat(f"blk.{i}.attn_output.weight", width, heads * head_dim)

    def ffn(i, n_ff, down_std=0.02):
        w.add_tensor(f"blk.{i}.ffn_norm.weight", ones)
        mat(f"blk.{i}.ffn_gate.weight", n_ff, width)
        mat(f"blk.{i}.ffn_up.weight", n_ff, width)
        mat(f"blk.{i}.ffn_down.weight", width, n_ff, down_std)

    d_inner, d_state, d_conv, n_group = 2 * width, 32, 4, 1
    n_ssm_head = d_inner // head_dim

    def mamba2_keys():
        w.add_ssm_conv_kernel(d_conv)
        w.add_ssm_inner_size(d_inner)
        w.add_ssm_state_size(d_state)
        w.add_ssm_time_step_rank(n_ssm_head)
        w.add_ssm_group_count(n_group)

    def mamba2(i):  # llama.cpp's llm_build_mamba_base::build_mamba2_layer
        conv_dim = d_inner + 2 * n_group * d_state
        w.add_tensor(f"blk.{i}.attn_norm.weight", ones)
        mat(f"blk.{i}.ssm_in.weight", d_inner + conv_dim + n_ssm_head, width)  # z, xBC, dt
        vec(f"blk.{i}.ssm_conv1d.weight", rng.standard_normal((conv_dim, d_conv)) * 0.2)
        vec(f"blk.{i}.ssm_conv1d.bias", np.zeros(conv_dim))
        dt = np.exp(rng.uniform(np.log(0.01), np.log(0.1), n_ssm_head))
        vec(f"blk.{i}.ssm_dt.bias", dt + np.log(-np.expm1(-dt)))  # softplus(bias) = dt
        vec(f"blk.{i}.ssm_a", -rng.uniform(1, 16, (n_ssm_head, 1)))  # A = -exp(A_log) < 0
        vec(f"blk.{i}.ssm_d", np.ones((n_ssm_head, 1)))
        vec(f"blk.{i}.ssm_norm.weight", np.ones((n_group, d_inner // n_group)))
        mat(f"blk.{i}.ssm_out.weight", width, d_inner)

    mat("token_embd.weight", n_vocab, width)
    if arch == "mamba2":
        layers = 2
        w.add_block_count(layers)
        mamba2_keys()
        w.add_layer_norm_rms_eps(eps)
        for i in range(layers):
            mamba2(i)
        w.add_tensor("output_norm.weight", out_norm)
    elif arch == "granitehybrid":
        kinds = ["recurrent", "attention", "recurrent", "attention"]
        heads, kv, n_ff = width // head_dim, 1, 2 * width
        w.add_block_count(len(kinds))
        w.add_head_count(heads)
        w.add_head_count_kv([0 if k == "recurrent" else kv for k in kinds])  # 0 = a Mamba-2 layer
        w.add_feed_forward_length(n_ff)
        w.add_rope_freq_base(10000.0)
        w.add_layer_norm_rms_eps(eps)
        mamba2_keys()
        for i, k in enumerate(kinds):
            if k == "recurrent":
                mamba2(i)
            else:
                attention(i, heads, kv)
            ffn(i, n_ff)
        w.add_tensor("output_norm.weight", out_norm)
    elif arch == "lfm2":
        kinds = ["recurrent", "attention", "recurrent", "attention"]
        heads, kv, n_ff, l_cache = width // head_dim, 1, 2 * width, 3
        w.add_block_count(len(kinds))
        w.add_head_count(heads)
        w.add_head_count_kv([0 if k == "recurrent" else kv for k in kinds])  # 0 = a shortconv layer
        w.add_feed_forward_length(n_ff)
        w.add_rope_freq_base(1000000.0)
        w.add_layer_norm_rms_eps(eps)
        w.add_uint32(f"{arch}.shortconv.l_cache", l_cache)
        for i, k in enumerate(kinds):
            if k == "recurrent":
                w.add_tensor(f"blk.{i}.attn_norm.weight", ones)
                vec(f"blk.{i}.shortconv.conv.weight", rng.standard_normal((width, l_cache)) * 0.2)
                mat(f"blk.{i}.shortconv.in_proj.weight", 3 * width, width)
                mat(f"blk.{i}.shortconv.out_proj.weight", width, width)
            else:
                attention(i, heads, kv)
                vec(f"blk.{i}.attn_q_norm.weight", np.ones(head_dim))
                vec(f"blk.{i}.attn_k_norm.weight", np.ones(head_dim))
            ffn(i, n_ff, down_std=0.2)
        w.add_tensor("token_embd_norm.weight", out_norm)  # llama.cpp's name for LFM2's output norm
    elif arch == "gemma3":
        layers, heads, kv, n_ff = 6, width // head_dim, 1, 2 * width
        w.add_block_count(layers)
        w.add_head_count(heads)
        w.add_head_count_kv(kv)
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
        w.add_feed_forward_length(n_ff)
        w.add_rope_freq_base(1000000.0)
        w.add_float32(f"{arch}.rope.freq_base_swa", 10000.0)
        w.add_layer_norm_rms_eps(1e-6)
        w.add_sliding_window(32)  # no sliding_window_pattern key: llama.cpp's default (5 SWA, 1 global)
        for i in range(layers):
            attention(i, heads, kv)
            vec(f"blk.{i}.attn_q_norm.weight", np.ones(head_dim))
            vec(f"blk.{i}.attn_k_norm.weight", np.ones(head_dim))
            w.add_tensor(f"blk.{i}.post_attention_norm.weight", ones)
            ffn(i, n_ff)
            w.add_tensor(f"blk.{i}.post_ffw_norm.weight", ones)
        w.add_tensor("output_norm.weight", out_norm)
    elif arch == "rwkv7":
        layers, n_ff, rank = 2, 4 * width, 32
        w.add_block_count(layers)
        w.add_feed_forward_length(n_ff)
        w.add_head_count(0)
        w.add_layer_norm_eps(eps)
        w.add_uint32(f"{arch}.wkv.head_size", head_dim)
        for key in ("decay", "iclr", "value_residual_mix", "gate"):
            w.add_uint32(f"{arch}.attention.{key}_lora_rank", rank)
        w.add_uint32(f"{arch}.token_shift_count", 2)
        w.add_tensor("token_embd_norm.weight", ones)
        w.add_tensor("token_embd_norm.bias", zeros)
        for i in range(layers):
            b = f"blk.{i}"
            for n in ("attn_norm", "attn_norm_2", "time_mix_ln"):
                w.add_tensor(f"{b}.{n}.weight", ones)
                w.add_tensor(f"{b}.{n}.bias", zeros)
            for n in ("w", "a", "v", "g"):  # low-rank (LoRA-shaped) projections
                mat(f"{b}.time_mix_{n}1.weight", rank, width)
                mat(f"{b}.time_mix_{n}2.weight", width, rank)
            vec(f"{b}.time_mix_w0.weight", rng.uniform(-6, -1, width))  # decay = exp(-0.61 sigmoid(.))
            vec(f"{b}.time_mix_a0.weight", np.zeros(width))
            vec(f"{b}.time_mix_v0.weight", np.ones(width))
            vec(f"{b}.time_mix_lerp_fused.weight", rng.uniform(0, 1, (6, 1, 1, width)))
            vec(f"{b}.time_mix_k_k.weight", np.full(width, 0.85))
            vec(f"{b}.time_mix_k_a.weight", np.ones(width))
            vec(f"{b}.time_mix_r_k.weight", rng.standard_normal(width) * 0.1)
            for n in ("key", "value", "receptance", "output"):
                mat(f"{b}.time_mix_{n}.weight", width, width)
            vec(f"{b}.channel_mix_lerp_k.weight", rng.uniform(0, 1, (1, 1, width)))
            mat(f"{b}.channel_mix_key.weight", n_ff, width)
            mat(f"{b}.channel_mix_value.weight", width, n_ff)
        w.add_tensor("output_norm.weight", out_norm)
        w.add_tensor("output_norm.bias", zeros)
        mat("output.weight", n_vocab, width)  # rwkv7 has no tied-output fallback
    else:
        raise ValueError(arch)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def arch_model(a):
    t0 = time.time()
    tok = read_tokenizer(a.src)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    tmp = a.out + ".tmp"
    write_arch(tok, a.arch, tmp)
    os.replace(tmp, a.out)
    print(f"RANDOM WEIGHTS, OUTPUT IS NOISE: {a.out} ({a.arch}, "
          f"{os.path.getsize(a.out) / 2**20:.1f} MiB, {time.time() - t0:.1f} s)")


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
    default_src = os.path.join(os.environ.get("STEWARD_CACHE_DIR") or os.path.expanduser("~/.cache/steward"),
                               "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    c = sub.add_parser("chat", help="tiny random model with a chat template and its marker tokens")
    c.add_argument("--src", default=default_src,
                   help="GGUF (or `tokenizer` JSON) whose tokenizer to take (default: the default model)")
    c.add_argument("--template", required=True, help="file whose text becomes tokenizer.chat_template")
    c.add_argument("--template-variant", action="append", default=[], metavar="NAME=FILE",
                   help="tokenizer.chat_template.NAME (repeatable)")
    c.add_argument("--special", action="append", default=[], metavar="TEXT", help="control token (repeatable)")
    c.add_argument("--user-defined", action="append", default=[], metavar="TEXT",
                   help="user-defined token (repeatable)")
    c.add_argument("--bos")
    c.add_argument("--eos")
    c.add_argument("--eot")
    c.add_argument("--add-bos", choices=("true", "false"), help="tokenizer.ggml.add_bos_token (default: SRC's)")
    c.add_argument("--out", required=True)
    r = sub.add_parser("arch", help="tiny random model of a recurrent / hybrid / sliding-window architecture")
    r.add_argument("--arch", choices=ARCHS, required=True)
    r.add_argument("--src", default=default_src,
                   help="GGUF (or `tokenizer` JSON) whose tokenizer to take (default: the default model)")
    r.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.cmd == "tokenizer":
        tokenizer(a.src, a.out)
    elif a.cmd == "chat":
        chat(a)
    elif a.cmd == "arch":
        arch_model(a)
    else:
        model(a.tok, a.shape, a.type, a.out)


if __name__ == "__main__":
    main()
