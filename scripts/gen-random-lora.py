#!/usr/bin/env python3
"""Random-weight LoRA adapter GGUF for a base GGUF model, for ADAPTER TESTS ONLY.

    THE ADAPTER IS NOISE. It exists to test loading / applying / scaling /
    switching adapters (llama_adapter_lora_init, per-request scales); it
    teaches the model nothing.

    gen-random-lora.py BASE.gguf OUT.gguf [--rank 8] [--alpha 16] [--seed 0]
        [--targets attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down]
        [--rel 0.1 | --std X] [--type f32|f16]

What llama.cpp (src/llama-adapter.cpp) checks, and what this writes:
  general.type = "adapter", adapter.type = "lora", general.architecture = BASE's,
  adapter.lora.alpha (f32); for every 2-D base tensor `[blk.N.]TARGET.weight`
  a pair `<name>.lora_a` / `<name>.lora_b` (a lone half is an error). With the
  base tensor's ggml shape ne = [n_in, n_out]:
      lora_a  ne = [n_in, rank]   (numpy shape (rank, n_in))
      lora_b  ne = [rank, n_out]  (numpy shape (n_out, rank))
  llama.cpp adds  scale * alpha / rank * B @ (A @ x)  to W @ x  (rank = lora_b ne[0]);
  types are not checked (copied as stored): F32 (default) or F16 here.
  token_embd (A and B swapped there) and 1-D tensors are not targets.

Magnitude: A and B entries ~ N(0, s^2), so the delta dW = alpha/rank * B @ A has
entries of RMS alpha/sqrt(rank) * s^2. With --rel R (default 0.1) s is chosen per
tensor so that RMS(dW) = R * RMS(W) (W dequantized from BASE); --std X uses s = X
for every tensor instead. 0.1 is per matrix, and the default targets are all 7
block matrices (SmolLM2-135M: 210 of them), so the perturbations compound. Measured
there (greedy, "The capital of France is"): R 0.02 flips one late token, the same for
every seed; R 0.1 changes the text within a few tokens and differently per seed,
still English; R 0.2 repetitive nonsense; R 0.3 garbage.
Try: llama-server -m BASE --lora OUT (or --lora-scaled OUT:1.0); a request's
"lora":[{"id":0,"scale":0}] gives BASE's output exactly. --lora-init-without-apply
does not: llama-server still applies each adapter at its listed scale (1.0).
Same BASE and arguments -> same bytes (numpy's PCG64 seeded with --seed).
Needs numpy and the `gguf` package.
"""
import argparse
import re
import sys

import numpy as np
import gguf

QT = gguf.GGMLQuantizationType
TYPES = {"f32": np.float32, "f16": np.float16}
DEFAULT_TARGETS = "attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down"


def field_str(reader, key):
    f = reader.fields.get(key)
    if f is None:
        return None
    return bytes(f.parts[f.data[0]]).decode("utf-8")


def pick_tensors(reader, targets):
    """(name, ne, tensor) of each 2-D base tensor named [blk.N.]TARGET.weight."""
    pat = re.compile(r"^(?:blk\.\d+\.)?(" + "|".join(map(re.escape, targets)) + r")\.weight$")
    picked, seen = [], set()
    for t in reader.tensors:
        m = pat.match(t.name)
        if not m:
            continue
        ne = [int(x) for x in t.shape]
        if len(ne) != 2:
            sys.exit(f"{t.name}: {len(ne)}-D (ne {ne}); only 2-D matrices can take a LoRA")
        picked.append((t.name, ne, t))
        seen.add(m.group(1))
    missing = [x for x in targets if x not in seen]
    if missing:
        sys.exit(f"no base tensor [blk.N.]<target>.weight for targets: {', '.join(missing)}")
    return picked


def base_rms(t):
    w = gguf.quants.dequantize(t.data, QT(int(t.tensor_type)))
    return float(np.sqrt(np.mean(np.square(w, dtype=np.float64))))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base", help="base model GGUF")
    ap.add_argument("out", help="adapter GGUF to write")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--targets", default=DEFAULT_TARGETS,
                    help=f"comma-separated tensor kinds (default: {DEFAULT_TARGETS})")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--rel", type=float, default=0.1,
                   help="RMS of the delta relative to the base tensor's RMS (default 0.1)")
    g.add_argument("--std", type=float, help="std of every lora_a / lora_b entry (overrides --rel)")
    ap.add_argument("--type", choices=TYPES, default="f32", help="tensor type of lora_a / lora_b")
    a = ap.parse_args()
    if a.rank < 1 or a.alpha <= 0:
        sys.exit("--rank must be >= 1 and --alpha > 0")
    targets = [x.strip() for x in a.targets.split(",") if x.strip()]
    if not targets:
        sys.exit("--targets is empty")
    if "token_embd" in targets:
        sys.exit("token_embd is not supported (llama.cpp swaps A and B for it)")

    reader = gguf.GGUFReader(a.base)
    arch = field_str(reader, "general.architecture")
    if not arch:
        sys.exit(f"{a.base}: no general.architecture")
    picked = pick_tensors(reader, targets)
    if any(min(ne) < a.rank for _, ne, _ in picked):
        sys.exit(f"--rank {a.rank} exceeds a target's smaller dimension")

    w = gguf.GGUFWriter(a.out, arch=arch)
    w.add_type("adapter")  # general.type
    base_name = field_str(reader, "general.name") or arch
    w.add_name(f"RANDOM LoRA (noise) for {base_name}, rank {a.rank}, seed {a.seed}")
    w.add_string(gguf.Keys.Adapter.TYPE, "lora")
    w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, a.alpha)

    rng = np.random.default_rng(a.seed)
    dt = TYPES[a.type]
    per_kind = {}  # kind -> [(base rms, s)]
    n_params = 0
    for name, (n_in, n_out), t in picked:
        rms = base_rms(t)
        s = a.std if a.std is not None else float(np.sqrt(a.rel * rms * np.sqrt(a.rank) / a.alpha))
        la = rng.standard_normal((a.rank, n_in), dtype=np.float32) * np.float32(s)
        lb = rng.standard_normal((n_out, a.rank), dtype=np.float32) * np.float32(s)
        w.add_tensor(name + ".lora_a", la.astype(dt))
        w.add_tensor(name + ".lora_b", lb.astype(dt))
        n_params += la.size + lb.size
        kind = re.sub(r"^blk\.\d+\.|\.weight$", "", name)
        per_kind.setdefault(kind, []).append((n_in, n_out, rms, s))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    delta = a.alpha / np.sqrt(a.rank)  # RMS(dW) = delta * s^2
    how = f"--std {a.std}" if a.std is not None else f"--rel {a.rel}"
    print(f"arch {arch}, rank {a.rank}, alpha {a.alpha} (scale alpha/rank = {a.alpha / a.rank:g}), "
          f"seed {a.seed}, {a.type}, std from {how}")
    for kind, rows in per_kind.items():
        n_in, n_out, _, _ = rows[0]
        rms = [r[2] for r in rows]
        ss = [r[3] for r in rows]
        rel = [delta * r[3] ** 2 / r[2] for r in rows]
        print(f"  {kind:12s} x{len(rows):<3d} lora_a ne [{n_in}, {a.rank}] lora_b ne [{a.rank}, {n_out}]  "
              f"base rms {min(rms):.4f}..{max(rms):.4f}  std {min(ss):.4f}..{max(ss):.4f}  "
              f"delta/base {min(rel):.2f}..{max(rel):.2f}")
    print(f"{2 * len(picked)} tensors, {n_params:,} parameters -> {a.out}")


if __name__ == "__main__":
    main()
