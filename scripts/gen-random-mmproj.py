#!/usr/bin/env python3
"""Random-weight multimodal projectors (mmproj GGUFs) for llama.cpp's mtmd, FOR TESTS ONLY.

    THEIR OUTPUT IS NOISE. They exist so that image/audio input can be tested end to end
    (load, preprocess, encode, decode into the text model) without real vision weights.
    Paired with the default text model SmolLM2-135M-Instruct (n_embd 576, --n-embd).

    gen-random-mmproj.py --kind gemma3|mlp|ultravox --out X.gguf [--seed 0] [--n-embd 576]

Layouts (names, keys and shapes as tools/mtmd/clip.cpp + clip-impl.h of llama-cpp-sys-2 0.1.160
read them; numpy shapes are the reverse of ggml's ne[], e.g. ne=[576, 64] <=> numpy (64, 576)):

  gemma3    clip.projector_type "gemma3"; SigLIP-style ViT: conv patch embedding
            (v.patch_embd), learned v.position_embd, 2 pre-norm blocks (LayerNorm, separate
            q/k/v/out with biases, GELU FFN), v.post_ln; then clip.cpp avg-pools the patch grid
            by clip.vision.projector.scale_factor (here 2; gemma3's default would be 4),
            RMS-norms (mm.soft_emb_norm) and projects (mm.input_projection, ne=[n_embd, hidden]).
            image_size 64, patch_size 16: 4x4 patches -> 2x2 pool = 4 image tokens.
            Decode is NON-causal (mtmd_decode_use_non_causal() is true for gemma3).
            mtmd wraps the tokens in the TEXT "<start_of_image>" ... "<end_of_image>"
            (plain text for SmolLM2's tokenizer, not special tokens).
  mlp       clip.projector_type "mlp" (LLaVA-1.5 style): same tower, no pooling; the llava
            graph stops at the second-to-last block (so with 2 blocks only block 0 is used),
            then mm.0 (linear) -> GELU -> mm.2 (linear) to n_embd. image_size 64, patch 16:
            16 image tokens. Decode is CAUSAL (the default in mtmd_decode_use_non_causal()).
            No image markers are added around the embeddings.
  ultravox  audio (clip.has_audio_encoder): Whisper-style encoder: a.conv1d.1 (k3, s1),
            a.conv1d.2 (k3, s2), learned a.position_embd (1500 rows), 2 blocks (no k bias),
            then stack 4 frames, RMS-norm, mm.a.mlp.1 -> swiglu -> RMS-norm -> mm.a.mlp.2.
            30 s chunks: 3000 mel frames -> 1500 -> 375 tokens a chunk. (Ultravox's real stack
            factor 8 aborts here: clip.cpp counts 3000/8/2 = 187 tokens, the graph makes 188.)
            Causal. (idefics3, SmolVLM's projector, is not offered: mtmd looks up
            "<fake_token_around_image>" etc. in the vocabulary, which SmolLM2 lacks.)

Every image is RESIZED to image_size x image_size first (mtmd's fixed-size preprocessor for
both gemma3 and mlp), so every image gives the same token count whatever its size.
Weights: matrices N(0, 0.02), norm weights 1 + N(0, 0.02), biases N(0, 0.02) - small, so
the text model's outputs stay finite. All tensors f32 (exact, and tiny: 0.7-2.5 MiB).
Needs numpy and the `gguf` package (target/pyenv has both).
"""
import argparse
import sys

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("needs the gguf package: target/pyenv/bin/pip install gguf numpy")

# the tiny tower shared by the two vision kinds
V_HIDDEN, V_HEADS, V_FF, V_LAYERS = 64, 4, 256, 2   # n_ff != hidden: clip.cpp would swap up/down
IMAGE_SIZE, PATCH_SIZE, POOL = 64, 16, 2
# the tiny audio encoder
A_HIDDEN, A_HEADS, A_FF, A_LAYERS, A_MELS, A_POS, A_STACK, A_PROJ_FF = 64, 4, 256, 2, 128, 1500, 4, 256


class Gen:
    def __init__(self, seed, std=0.02):
        self.rng = np.random.default_rng(seed)
        self.std = std

    def w(self, *shape):            # a matrix / conv kernel / bias
        return (self.rng.standard_normal(shape) * self.std).astype(np.float32)

    def norm(self, n):              # a norm weight near 1
        return (1.0 + self.rng.standard_normal(n) * self.std).astype(np.float32)


def add_blocks(t, g, prefix, n_layers, hidden, n_ff, k_bias=True):
    """Pre-norm transformer blocks: {prefix}.blk.N.{ln1,attn_q,attn_k,attn_v,attn_out,ln2,ffn_up,ffn_down}."""
    for i in range(n_layers):
        b = f"{prefix}.blk.{i}"
        t[f"{b}.ln1.weight"], t[f"{b}.ln1.bias"] = g.norm(hidden), g.w(hidden)
        for n in ("attn_q", "attn_k", "attn_v", "attn_out"):
            t[f"{b}.{n}.weight"] = g.w(hidden, hidden)
            if n != "attn_k" or k_bias:
                t[f"{b}.{n}.bias"] = g.w(hidden)
        t[f"{b}.ln2.weight"], t[f"{b}.ln2.bias"] = g.norm(hidden), g.w(hidden)
        t[f"{b}.ffn_up.weight"], t[f"{b}.ffn_up.bias"] = g.w(n_ff, hidden), g.w(n_ff)         # ne=[hidden, n_ff]
        t[f"{b}.ffn_down.weight"], t[f"{b}.ffn_down.bias"] = g.w(hidden, n_ff), g.w(hidden)   # ne=[n_ff, hidden]


def vision(kind, g, n_embd):
    """Keys and tensors of the gemma3 / mlp kinds."""
    kv = {
        "clip.has_vision_encoder": True,
        "clip.projector_type": kind,
        "clip.vision.image_size": IMAGE_SIZE,
        "clip.vision.patch_size": PATCH_SIZE,
        "clip.vision.embedding_length": V_HIDDEN,
        "clip.vision.feed_forward_length": V_FF,
        "clip.vision.block_count": V_LAYERS,
        "clip.vision.attention.head_count": V_HEADS,
        "clip.vision.attention.layer_norm_epsilon": 1e-6,
        "clip.vision.projection_dim": n_embd,
        "clip.vision.image_mean": [0.5, 0.5, 0.5],
        "clip.vision.image_std": [0.5, 0.5, 0.5],
    }
    n_patches = (IMAGE_SIZE // PATCH_SIZE) ** 2
    t = {
        "v.patch_embd.weight": g.w(V_HIDDEN, 3, PATCH_SIZE, PATCH_SIZE),   # conv2d kernel ne=[P, P, 3, hidden]
        "v.patch_embd.bias": g.w(V_HIDDEN),
        "v.position_embd.weight": g.w(n_patches, V_HIDDEN),                # ne=[hidden, n_patches]
    }
    add_blocks(t, g, "v", V_LAYERS, V_HIDDEN, V_FF)
    if kind == "gemma3":
        kv["clip.use_gelu"] = True                                  # SigLIP: GELU (default: quick GELU)
        kv["clip.vision.projector.scale_factor"] = POOL             # avg-pool kernel (gemma3 default 4)
        t["v.post_ln.weight"], t["v.post_ln.bias"] = g.norm(V_HIDDEN), g.w(V_HIDDEN)
        t["mm.soft_emb_norm.weight"] = g.norm(V_HIDDEN)             # RMS-norm weight (stored as 1+w)
        t["mm.input_projection.weight"] = g.w(V_HIDDEN, n_embd)     # ne=[n_embd, hidden] (transposed in the graph)
    else:  # mlp (LLaVA): quick-GELU CLIP tower with a pre-norm, then a 2-layer MLP
        t["v.pre_ln.weight"], t["v.pre_ln.bias"] = g.norm(V_HIDDEN), g.w(V_HIDDEN)
        t["mm.0.weight"], t["mm.0.bias"] = g.w(n_embd, V_HIDDEN), g.w(n_embd)
        t["mm.2.weight"], t["mm.2.bias"] = g.w(n_embd, n_embd), g.w(n_embd)   # ne[1] = n_embd is the output width
    return kv, t


def audio(g, n_embd):
    """Keys and tensors of the ultravox kind (Whisper encoder + Ultravox projector)."""
    kv = {
        "clip.has_audio_encoder": True,
        "clip.projector_type": "ultravox",
        "clip.audio.embedding_length": A_HIDDEN,
        "clip.audio.feed_forward_length": A_FF,
        "clip.audio.block_count": A_LAYERS,
        "clip.audio.attention.head_count": A_HEADS,
        "clip.audio.attention.layer_norm_epsilon": 1e-5,
        "clip.audio.projection_dim": n_embd,
        "clip.audio.num_mel_bins": A_MELS,
        "clip.audio.projector.stack_factor": A_STACK,
    }
    t = {
        "a.conv1d.1.weight": g.w(A_HIDDEN, A_MELS, 3),     # conv1d kernel ne=[3, n_mel, hidden]
        "a.conv1d.1.bias": g.w(A_HIDDEN, 1),               # ne=[1, hidden]: broadcast over time
        "a.conv1d.2.weight": g.w(A_HIDDEN, A_HIDDEN, 3),
        "a.conv1d.2.bias": g.w(A_HIDDEN, 1),
        "a.position_embd.weight": g.w(A_POS, A_HIDDEN),
    }
    add_blocks(t, g, "a", A_LAYERS, A_HIDDEN, A_FF, k_bias=False)   # Whisper: no k bias (asserted)
    t["a.post_ln.weight"], t["a.post_ln.bias"] = g.norm(A_HIDDEN), g.w(A_HIDDEN)
    t["mm.a.norm_pre.weight"] = g.norm(A_HIDDEN * A_STACK)
    t["mm.a.mlp.1.weight"] = g.w(2 * A_PROJ_FF, A_HIDDEN * A_STACK)   # swiglu halves: 2 * A_PROJ_FF
    t["mm.a.norm_mid.weight"] = g.norm(A_PROJ_FF)
    t["mm.a.mlp.2.weight"] = g.w(n_embd, A_PROJ_FF)                   # ne[1] = n_embd
    return kv, t


def write(path, kind, kv, tensors, seed):
    w = gguf.GGUFWriter(path, "clip")
    w.add_string("general.name", f"random-mmproj-{kind}")
    w.add_string("general.description", f"random weights (seed {seed}), for tests only: output is noise")
    w.add_uint32("general.file_type", 0)  # all f32
    for k, v in kv.items():
        if isinstance(v, bool):
            w.add_bool(k, v)
        elif isinstance(v, int):
            w.add_uint32(k, v)
        elif isinstance(v, float):
            w.add_float32(k, v)
        elif isinstance(v, list):
            w.add_array(k, [float(x) for x in v])   # float list -> f32 array
        else:
            w.add_string(k, v)
    for name, arr in tensors.items():
        w.add_tensor(name, np.ascontiguousarray(arr))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kind", required=True, choices=["gemma3", "mlp", "ultravox"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-embd", type=int, default=576, help="the text model's embedding width")
    ap.add_argument("--large", action="store_true",
                    help="a vision tower of real cost for benchmarks (about a quarter of SigLIP-400M: "
                         "12 blocks of 768, 448 px in 14 px patches = 1024 patches; gemma3 pools 4x4 "
                         "to 64 tokens), ~330 MiB")
    a = ap.parse_args()
    if a.large:
        global V_HIDDEN, V_HEADS, V_FF, V_LAYERS, IMAGE_SIZE, PATCH_SIZE, POOL
        V_HIDDEN, V_HEADS, V_FF, V_LAYERS = 768, 12, 3072, 12
        IMAGE_SIZE, PATCH_SIZE, POOL = 448, 14, 4
    g = Gen(a.seed)
    kv, t = audio(g, a.n_embd) if a.kind == "ultravox" else vision(a.kind, g, a.n_embd)
    write(a.out, a.kind, kv, t, a.seed)
    size = sum(x.nbytes for x in t.values())
    print(f"{a.out}: {a.kind}, {len(t)} tensors, {size / 2**20:.2f} MiB, seed {a.seed}", file=sys.stderr)


if __name__ == "__main__":
    main()
