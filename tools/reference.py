"""Independent PyTorch reference for difftx (DIFF Transformer V1, V2 and their LLaMA baseline).

Written only from the specs (shared/spec/diff-transformer.md §2-§3.1, §8 and
shared/spec/interop.md), never from the C sources, so that the fixtures it
produces judge the C code rather than copy it.

Model
-----
Config keys come from the safetensors `__metadata__` (all strings there):
arch (`diff` | `transformer` | `diff2`), dim, n_layers, n_heads, n_kv_heads, vocab_size,
ffn_dim, max_seq_len, rope_theta, norm_eps, tie_embeddings, and the variant
keys of interop.md "Variants" (absent: the defaults; any other value refused):
subln (`rms` | `none`; default `rms` for diff, `none` for transformer) and
lambda_init (`schedule` | a number; diff only), and v2_lambda (`sigmoid` |
`linear` | `none`; diff2 only: spec §8.3's ablations).

    h = tok_embeddings[tokens]
    per layer l:  h = h + attention_l(RMSNorm(h))
                  h = h + w2(silu(w1 x) * w3 x),  x = RMSNorm(h)
    logits = RMSNorm(h) @ W_out^T,  W_out = output.weight or tok_embeddings.weight (tied)

RMSNorm(x) = x * rsqrt(mean(x^2) + norm_eps) * w. No biases anywhere.

RoPE is interleaved (pairs 2i, 2i+1) on every d-wide q/k (sub-)head, with the
angle p * theta^(-2i/d), p the 0-based position.

`diff` attention (flash GQA semantics of spec §2.2), d = dim / n_heads / 2,
n_rep = n_heads / n_kv_heads:
    head h: q1, q2 = q channels [2hd, 2hd+d), [2hd+d, 2hd+2d)
    group g = h // n_rep: k1, k2 = k channels [2gd, 2gd+d), [2gd+d, 2gd+2d);
                          v = v channels [2gd, 2gd+2d)
    A_i = causal softmax(q_i k_i^T / sqrt(d))           (sqrt(d), not sqrt(2d))
    lambda = exp(lq1.lk1) - exp(lq2.lk2) + lambda_init,  one scalar per layer
    lambda_init = 0.8 - 0.6 exp(-0.3 l), l the 0-based layer index
    O_h = A1 v - lambda A2 v, RMSNorm over its 2d channels (weight `subln`,
          shared by the heads), times the constant (1 - lambda_init)
    heads concatenated h = 0..H-1, then out_proj.
    Variants: subln `none` drops the RMSNorm (and its weight), the scale
    stays; lambda_init = X uses X in every layer, in lambda and in the scale.
`transformer` attention: d = dim / n_heads, head j reads KV head j // n_rep,
causal softmax(q k^T / sqrt(d)) v, concat, out_proj. Variant subln `rms`:
each head's d-wide output RMS-normalised with one weight [d] (`subln`)
shared by the heads, no scale.
`diff2` attention (spec §8.1, interop.md "DIFF V2"), d = dim / n_heads, h = n_heads:
    q_proj gives 2h query heads of width d; k, v give n_kv_heads heads of width d;
    query head j reads KV head j // (2h / n_kv_heads);
    a_j = causal softmax(q_j k^T / sqrt(d)) v, one ordinary attention over 2h heads;
    lam = sigmoid(x @ lambda_proj^T)  (B, T, h), x the attention input;
    out head i = a_{2i} - lam_i * a_{2i+1}; concat, out_proj. No subln, no lambda_init.
    v2_lambda `linear`: lam = x @ lambda_proj^T; `none`: lam = 1, no lambda_proj.

Loss: mean next-token cross-entropy (nats) over all B*T positions; the model
sees tokens[:, :-1] and predicts tokens[:, 1:].

Training step (what the fixtures pin; see `train_step`)
-------------------------------------------------------
1. lr for 0-based step s (`lr_at`): s < warmup: lr * (s+1) / warmup; otherwise
   r = (s + 1 - warmup) / (total - warmup) (r = 0 if total == warmup) and
   cosine: min_lr + 0.5 (lr - min_lr)(1 + cos(pi r)); linear: lr - (lr - min_lr) r;
   constant: lr. The peak is reached at step warmup-1 and min_lr at step total-1.
2. loss, backward; the global L2 norm of all gradients is recorded before clipping;
   `clip_grad_norm_` then multiplies every gradient by min(1, clip / (norm + 1e-6)).
3. torch.optim.AdamW (decoupled decay: p -= lr*wd*p, then the Adam update with
   bias correction, eps added to sqrt(v_hat)), with two groups:
   decay    = every 2-D linear weight, plus tok_embeddings/output when decay_embeddings;
   no-decay = every norm weight, subln, the four lambda vectors, and the
              embeddings when decay_embeddings is false.

Safetensors is read and written by hand (no `safetensors` package here).
"""

import json
import math
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

INT_KEYS = ("dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "ffn_dim", "max_seq_len")
FLOAT_KEYS = ("rope_theta", "norm_eps")
ARCHES = ("diff", "transformer", "diff2")
V2_LAMBDAS = ("sigmoid", "linear", "none")

# ---------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------


def config_from_metadata(meta):
    """Parse interop.md metadata (string values) into a typed config dict."""
    if meta.get("format") != "difftx":
        raise ValueError("metadata key 'format' must be 'difftx'")
    cfg = {}
    arch = meta.get("arch")
    if arch not in ARCHES:
        raise ValueError("metadata key 'arch' must be one of %s, got %r" % (ARCHES, arch))
    cfg["arch"] = arch
    for k in INT_KEYS:
        if k not in meta:
            raise ValueError("metadata key %r missing" % k)
        cfg[k] = int(meta[k])
    cfg["rope_theta"] = float(meta.get("rope_theta", "10000"))
    cfg["norm_eps"] = float(meta.get("norm_eps", "1e-5"))
    tie = meta.get("tie_embeddings", "false")
    if tie not in ("true", "false"):
        raise ValueError("metadata key 'tie_embeddings' must be 'true' or 'false'")
    cfg["tie_embeddings"] = tie == "true"
    subln = meta.get("subln", "rms" if arch == "diff" else "none")
    if subln not in ("rms", "none"):
        raise ValueError("metadata key 'subln' must be 'rms' or 'none', got %r" % subln)
    if arch == "diff2" and subln != "none":
        raise ValueError("arch diff2 has no per-head norm")
    cfg["subln"] = subln
    li = meta.get("lambda_init", "schedule")
    if li != "schedule":
        if arch != "diff":
            raise ValueError("metadata key 'lambda_init' applies to arch diff only")
        try:
            li = float(li)
        except ValueError:
            raise ValueError("metadata key 'lambda_init' must be 'schedule' or a number, got %r" % li)
    cfg["lambda_init"] = li
    v2l = meta.get("v2_lambda", "sigmoid")
    if v2l not in V2_LAMBDAS or (v2l != "sigmoid" and arch != "diff2"):
        raise ValueError("metadata key 'v2_lambda' must be one of %s, for arch diff2 only" % (V2_LAMBDAS,))
    cfg["v2_lambda"] = v2l
    rs = meta.get("rope_scaling", "none")
    if rs != "none":
        parts = rs.split()
        if len(parts) != 5 or parts[0] != "llama3":
            raise ValueError("metadata key 'rope_scaling' must be 'none' or 'llama3 FACTOR LOW HIGH ORIG', got %r" % rs)
        cfg["rope_scaling"] = (float(parts[1]), float(parts[2]), float(parts[3]), int(parts[4]))
    if "head_dim" in meta:
        cfg["head_dim"] = int(meta["head_dim"])
    check_config(cfg)
    return cfg


def subln_of(cfg):
    return cfg.get("subln", "rms" if cfg["arch"] == "diff" else "none")


def layer_lambda_init(cfg, layer):
    li = cfg.get("lambda_init", "schedule")
    return lambda_init(layer) if li == "schedule" else float(li)


def metadata_from_config(cfg):
    meta = {"format": "difftx", "arch": cfg["arch"]}
    for k in INT_KEYS:
        meta[k] = str(int(cfg[k]))
    for k in FLOAT_KEYS:
        meta[k] = repr(float(cfg[k]))
    meta["tie_embeddings"] = "true" if cfg["tie_embeddings"] else "false"
    if subln_of(cfg) != ("rms" if cfg["arch"] == "diff" else "none"):
        meta["subln"] = subln_of(cfg)
    if cfg.get("lambda_init", "schedule") != "schedule":
        meta["lambda_init"] = repr(float(cfg["lambda_init"]))
    if cfg.get("v2_lambda", "sigmoid") != "sigmoid":
        meta["v2_lambda"] = cfg["v2_lambda"]
    if cfg.get("rope_scaling"):
        meta["rope_scaling"] = "llama3 %r %r %r %d" % cfg["rope_scaling"]
    if cfg.get("head_dim"):
        meta["head_dim"] = str(int(cfg["head_dim"]))
    return meta


def has_lambda_proj(cfg):
    return cfg["arch"] == "diff2" and cfg.get("v2_lambda", "sigmoid") != "none"


def head_dim(cfg):
    """Width d of one q/k (sub-)head: the metadata's head_dim, else dim / (2 n_heads) for diff, dim / n_heads."""
    if cfg.get("head_dim"):
        return cfg["head_dim"]
    div = 2 * cfg["n_heads"] if cfg["arch"] == "diff" else cfg["n_heads"]
    return cfg["dim"] // div


def q_dim(cfg):
    """q_proj's width: 2 n_heads d for diff and diff2, n_heads d for a Transformer."""
    return (1 if cfg["arch"] == "transformer" else 2) * cfg["n_heads"] * head_dim(cfg)


def attn_dim(cfg):
    """out_proj's input width: 2 n_heads d for diff (values 2d wide), n_heads d otherwise."""
    return (2 if cfg["arch"] == "diff" else 1) * cfg["n_heads"] * head_dim(cfg)


def kv_dim(cfg):
    return (2 if cfg["arch"] == "diff" else 1) * cfg["n_kv_heads"] * head_dim(cfg)


def check_config(cfg):
    for k in INT_KEYS:
        if cfg[k] <= 0:
            raise ValueError("config %r must be positive" % k)
    div = 2 * cfg["n_heads"] if cfg["arch"] == "diff" else cfg["n_heads"]
    if not cfg.get("head_dim") and cfg["dim"] % div:
        raise ValueError("dim must be divisible by %d" % div)
    if cfg["n_heads"] % cfg["n_kv_heads"]:
        raise ValueError("n_heads must be divisible by n_kv_heads")
    if head_dim(cfg) % 2:
        raise ValueError("head_dim must be even for RoPE")


def lambda_init(layer):
    """0-based layer index, as in the official code (first layer: 0.2)."""
    return 0.8 - 0.6 * math.exp(-0.3 * layer)


# ---------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


def rope_cos_sin(T, d, theta, dtype, scaling=None):
    """Tables of shape (T, d/2): angle p * f_i, f_i = theta^(-2i/d), or with scaling (factor, low, high,
    orig: Llama 3.1's) f/factor for wavelengths 2pi/f above orig/low, f below orig/high, and between them
    (1 - s) f/factor + s f with s = (orig/wavelength - low) / (high - low)."""
    i = torch.arange(d // 2, dtype=torch.float64)
    inv_freq = theta ** (-2.0 * i / d)
    if scaling is not None:
        factor, low, high, orig = scaling
        w = 2 * math.pi / inv_freq
        s = (orig / w - low) / (high - low)
        inv_freq = torch.where(w > orig / low, inv_freq / factor,
                               torch.where(w < orig / high, inv_freq, (1 - s) * inv_freq / factor + s * inv_freq))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return ang.cos().to(dtype), ang.sin().to(dtype)


def apply_rope(x, cos, sin):
    """Interleaved RoPE on x of shape (B, T, n, d); cos/sin are (T, d/2)."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    out = torch.stack((x0 * c - x1 * s, x1 * c + x0 * s), dim=-1)
    return out.flatten(-2)


def causal_softmax(q, k, scale):
    """q, k: (B, n, T, d) -> attention probabilities (B, n, T, T), causal."""
    T = q.shape[-2]
    z = torch.matmul(q, k.transpose(-1, -2)) * scale
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    return torch.softmax(z.masked_fill(~mask, float("-inf")), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        self.cfg = cfg
        self.diff = cfg["arch"] == "diff"
        self.v2 = cfg["arch"] == "diff2"
        self.d = head_dim(cfg)
        self.H, self.Hkv = cfg["n_heads"], cfg["n_kv_heads"]
        dim = cfg["dim"]
        self.q_proj = nn.Linear(dim, q_dim(cfg), bias=False)
        self.k_proj = nn.Linear(dim, kv_dim(cfg), bias=False)
        self.v_proj = nn.Linear(dim, kv_dim(cfg), bias=False)
        self.out_proj = nn.Linear(attn_dim(cfg), dim, bias=False)
        if has_lambda_proj(cfg):
            self.lambda_proj = nn.Linear(dim, self.H, bias=False)
        self.has_subln = subln_of(cfg) == "rms"
        if self.diff:
            self.lambda_init = layer_lambda_init(cfg, layer)
            for n in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
                setattr(self, n, nn.Parameter(torch.zeros(self.d)))
        if self.has_subln:
            self.subln = RMSNorm((2 if self.diff else 1) * self.d, cfg["norm_eps"])

    def lambda_full(self):
        return (torch.exp(torch.dot(self.lambda_q1, self.lambda_k1))
                - torch.exp(torch.dot(self.lambda_q2, self.lambda_k2))
                + self.lambda_init)

    def forward(self, x):
        B, T, _ = x.shape
        d, H, Hkv = self.d, self.H, self.Hkv
        n_rep = H // Hkv
        cos, sin = rope_cos_sin(T, d, self.cfg["rope_theta"], x.dtype, self.cfg.get("rope_scaling"))
        scale = 1.0 / math.sqrt(d)
        if self.diff:
            # (B, T, 2H, d): sub-head 2h is q1 of head h, 2h+1 is q2.
            q = apply_rope(self.q_proj(x).view(B, T, 2 * H, d), cos, sin)
            k = apply_rope(self.k_proj(x).view(B, T, 2 * Hkv, d), cos, sin)
            v = self.v_proj(x).view(B, T, Hkv, 2 * d)
            q = q.view(B, T, H, 2, d)
            # Flash GQA: head h reads group h // n_rep, both branches from that group.
            k = k.view(B, T, Hkv, 2, d).repeat_interleave(n_rep, dim=2)
            v = v.repeat_interleave(n_rep, dim=2).transpose(1, 2)          # (B, H, T, 2d)
            a1 = causal_softmax(q[:, :, :, 0].transpose(1, 2), k[:, :, :, 0].transpose(1, 2), scale)
            a2 = causal_softmax(q[:, :, :, 1].transpose(1, 2), k[:, :, :, 1].transpose(1, 2), scale)
            lam = self.lambda_full()
            o = torch.matmul(a1, v) - lam * torch.matmul(a2, v)             # (B, H, T, 2d)
            if self.has_subln:
                o = self.subln(o)
            o = o * (1.0 - self.lambda_init)
            o = o.transpose(1, 2).reshape(B, T, H * 2 * d)
        elif self.v2:
            n_rep2 = 2 * H // Hkv
            q = apply_rope(self.q_proj(x).view(B, T, 2 * H, d), cos, sin).transpose(1, 2)   # (B, 2H, T, d)
            k = apply_rope(self.k_proj(x).view(B, T, Hkv, d), cos, sin)
            v = self.v_proj(x).view(B, T, Hkv, d)
            k = k.repeat_interleave(n_rep2, dim=2).transpose(1, 2)
            v = v.repeat_interleave(n_rep2, dim=2).transpose(1, 2)
            a = torch.matmul(causal_softmax(q, k, scale), v)                 # (B, 2H, T, d)
            mode = self.cfg.get("v2_lambda", "sigmoid")
            if mode == "none":
                lam = torch.ones(B, T, H, dtype=x.dtype)
            else:
                lam = self.lambda_proj(x)
                if mode == "sigmoid":
                    lam = torch.sigmoid(lam)
            lam = lam.transpose(1, 2)[..., None]                             # (B, H, T, 1)
            o = a[:, 0::2] - lam * a[:, 1::2]                                 # (B, H, T, d)
            o = o.transpose(1, 2).reshape(B, T, H * d)
        else:
            q = apply_rope(self.q_proj(x).view(B, T, H, d), cos, sin)
            k = apply_rope(self.k_proj(x).view(B, T, Hkv, d), cos, sin)
            v = self.v_proj(x).view(B, T, Hkv, d)
            k = k.repeat_interleave(n_rep, dim=2).transpose(1, 2)
            v = v.repeat_interleave(n_rep, dim=2).transpose(1, 2)
            a = causal_softmax(q.transpose(1, 2), k, scale)
            o = torch.matmul(a, v)                                           # (B, H, T, d)
            if self.has_subln:
                o = self.subln(o)
            o = o.transpose(1, 2).reshape(B, T, H * d)
        return self.out_proj(o)


class FeedForward(nn.Module):
    def __init__(self, dim, ffn_dim):
        super().__init__()
        self.w1 = nn.Linear(dim, ffn_dim, bias=False)
        self.w3 = nn.Linear(dim, ffn_dim, bias=False)
        self.w2 = nn.Linear(ffn_dim, dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        self.attention_norm = RMSNorm(cfg["dim"], cfg["norm_eps"])
        self.attention = Attention(cfg, layer)
        self.ffn_norm = RMSNorm(cfg["dim"], cfg["norm_eps"])
        self.feed_forward = FeedForward(cfg["dim"], cfg["ffn_dim"])

    def forward(self, h):
        h = h + self.attention(self.attention_norm(h))
        return h + self.feed_forward(self.ffn_norm(h))


class Model(nn.Module):
    """Module paths are chosen so that named_parameters() gives the interop names."""

    def __init__(self, cfg):
        super().__init__()
        check_config(cfg)
        self.cfg = dict(cfg)
        self.tok_embeddings = nn.Embedding(cfg["vocab_size"], cfg["dim"])
        self.layers = nn.ModuleList([Block(cfg, l) for l in range(cfg["n_layers"])])
        self.norm = RMSNorm(cfg["dim"], cfg["norm_eps"])
        if not cfg["tie_embeddings"]:
            self.output = nn.Linear(cfg["dim"], cfg["vocab_size"], bias=False)

    def forward(self, tokens):
        if tokens.shape[1] > self.cfg["max_seq_len"]:
            raise ValueError("sequence longer than max_seq_len")
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        h = self.norm(h)
        w = self.tok_embeddings.weight if self.cfg["tie_embeddings"] else self.output.weight
        return h @ w.t()

    def loss(self, tokens):
        """Mean next-token cross-entropy over every position of tokens[:, 1:]."""
        logits = self(tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def expected_shapes(cfg):
    """Interop tensor names and shapes, in canonical file order."""
    dim, ffn, V = cfg["dim"], cfg["ffn_dim"], cfg["vocab_size"]
    kv = kv_dim(cfg)
    d = head_dim(cfg)
    shapes = {"tok_embeddings.weight": (V, dim)}
    for l in range(cfg["n_layers"]):
        p = "layers.%d." % l
        shapes[p + "attention_norm.weight"] = (dim,)
        shapes[p + "attention.q_proj.weight"] = (q_dim(cfg), dim)
        shapes[p + "attention.k_proj.weight"] = (kv, dim)
        shapes[p + "attention.v_proj.weight"] = (kv, dim)
        shapes[p + "attention.out_proj.weight"] = (dim, attn_dim(cfg))
        if has_lambda_proj(cfg):
            shapes[p + "attention.lambda_proj.weight"] = (cfg["n_heads"], dim)
        if cfg["arch"] == "diff":
            for n in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
                shapes[p + "attention." + n] = (d,)
        if subln_of(cfg) == "rms":
            shapes[p + "attention.subln.weight"] = ((2 if cfg["arch"] == "diff" else 1) * d,)
        shapes[p + "ffn_norm.weight"] = (dim,)
        shapes[p + "feed_forward.w1.weight"] = (ffn, dim)
        shapes[p + "feed_forward.w3.weight"] = (ffn, dim)
        shapes[p + "feed_forward.w2.weight"] = (dim, ffn)
    shapes["norm.weight"] = (dim,)
    if not cfg["tie_embeddings"]:
        shapes["output.weight"] = (V, dim)
    return shapes


def state_tensors(model):
    """Parameters in canonical file order (detached, as stored)."""
    params = dict(model.named_parameters())
    return {n: params[n].detach() for n in expected_shapes(model.cfg)}


def init_weights(model, gen, lam_std=0.1, norm_jitter=0.0):
    """Initialise in place with the spec's defaults (float32 draws from `gen`).

    Linear: U(-1/sqrt(in), 1/sqrt(in)); embeddings/output: N(0,1)*dim^-0.5;
    lambda vectors: N(0, lam_std^2); norm weights: 1 + norm_jitter*N(0,1).
    Draw order is the canonical tensor order, so a seed fixes every value.
    """
    dim = model.cfg["dim"]
    with torch.no_grad():
        for name, p in state_tensors(model).items():
            shape = tuple(p.shape)
            if name in ("tok_embeddings.weight", "output.weight"):
                v = torch.randn(shape, generator=gen) * dim ** -0.5
            elif ".lambda_" in name:
                v = torch.randn(shape, generator=gen) * lam_std
            elif len(shape) == 1:
                v = 1.0 + norm_jitter * torch.randn(shape, generator=gen)
            else:
                b = 1.0 / math.sqrt(shape[1])
                v = torch.rand(shape, generator=gen) * (2 * b) - b
            p.copy_(v.to(torch.float32).to(p.dtype))


# ---------------------------------------------------------------------------
# Safetensors by hand
# ---------------------------------------------------------------------------

_DTYPES = {"F32": (4, np.float32), "F16": (2, np.float16), "BF16": (2, None)}


def read_safetensors(path):
    """Return (dict name -> float32 torch tensor, metadata dict). F32/BF16/F16 only."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("%s: too short for a safetensors header" % path)
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ValueError("%s: header length %d runs past the end of the file" % (path, n))
    header = json.loads(data[8:8 + n].decode("utf-8"))
    body = memoryview(data)[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    for k, v in meta.items():
        if not isinstance(v, str):
            raise ValueError("%s: metadata %r is not a string" % (path, k))
    out = {}
    for name, info in header.items():
        if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
            raise ValueError("%s: tensor %r has a malformed header entry" % (path, name))
        dt = info["dtype"]
        if dt not in _DTYPES:
            raise ValueError("%s: tensor %r has unsupported dtype %s" % (path, name, dt))
        size, npt = _DTYPES[dt]
        shape = tuple(int(s) for s in info["shape"])
        begin, end = (int(o) for o in info["data_offsets"])
        count = int(np.prod(shape)) if shape else 1
        if not (0 <= begin <= end <= len(body)) or end - begin != count * size:
            raise ValueError("%s: tensor %r has bad data_offsets" % (path, name))
        raw = body[begin:end]
        if dt == "BF16":
            # bf16 is the top half of an f32: widen by shifting into the high bits.
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=np.dtype(npt).newbyteorder("<")).astype(np.float32)
        out[name] = torch.from_numpy(arr.copy()).reshape(shape)
    return out, meta


def write_safetensors(path, tensors, meta=None, dtype="F32"):
    """Write tensors (in dict order, contiguous, no holes) as F32, BF16 or F16."""
    header = {}
    if meta:
        header["__metadata__"] = {str(k): str(v) for k, v in meta.items()}
    blobs, off = [], 0
    for name, t in tensors.items():
        t = t.detach().to(torch.float32).contiguous()
        if dtype == "F32":
            b = t.numpy().astype("<f4").tobytes()
        elif dtype == "BF16":
            b = t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
        elif dtype == "F16":
            b = t.to(torch.float16).numpy().astype("<f2").tobytes()
        else:
            raise ValueError("can only write F32, BF16 or F16")
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * (-len(hj) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


def load_model(path, dtype=torch.float64):
    """Load a difftx model file; returns (model, metadata). Names and shapes are checked."""
    tensors, meta = read_safetensors(path)
    cfg = config_from_metadata(meta)
    shapes = expected_shapes(cfg)
    for name, shape in shapes.items():
        if name not in tensors:
            raise ValueError("%s: tensor %r missing" % (path, name))
        if tuple(tensors[name].shape) != shape:
            raise ValueError("%s: tensor %r has shape %s, expected %s"
                             % (path, name, tuple(tensors[name].shape), shape))
    for name in tensors:
        if name not in shapes:
            raise ValueError("%s: unexpected tensor %r" % (path, name))
    model = Model(cfg).to(dtype)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name in shapes:
            params[name].copy_(tensors[name].to(dtype))
    return model, meta


def save_model(path, model, meta=None, dtype="F32"):
    """Save with the interop names. `meta` (e.g. from load_model) is written verbatim,
    so a round trip keeps the exact strings and any unknown keys."""
    m = dict(meta) if meta else metadata_from_config(model.cfg)
    write_safetensors(path, state_tensors(model), m, dtype)


# ---------------------------------------------------------------------------
# Training step semantics
# ---------------------------------------------------------------------------


def lr_at(step, lr, min_lr, warmup, total, schedule):
    if step < warmup:
        return lr * (step + 1) / warmup
    r = 0.0 if total == warmup else (step + 1 - warmup) / (total - warmup)
    if schedule == "cosine":
        return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * r))
    if schedule == "linear":
        return lr - (lr - min_lr) * r
    if schedule == "constant":
        return lr
    raise ValueError("unknown schedule %r" % schedule)


def is_embedding(name):
    return name in ("tok_embeddings.weight", "output.weight")


def decays(name, param, decay_embeddings):
    """Decay exactly the 2-D linear weights (and embeddings on request)."""
    if is_embedding(name):
        return decay_embeddings
    return param.dim() == 2


def make_optimizer(model, lr, beta1, beta2, eps, weight_decay, decay_embeddings):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if decays(name, p, decay_embeddings) else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(beta1, beta2), eps=eps)


def train_step(model, opt, tokens, step, hp):
    """One step; returns (loss before the step, pre-clip grad norm, lr used)."""
    lr = lr_at(step, hp["lr"], hp["min_lr"], hp["warmup_steps"], hp["total_steps"], hp["schedule"])
    for g in opt.param_groups:
        g["lr"] = lr
    opt.zero_grad(set_to_none=True)
    loss = model.loss(tokens)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(list(model.parameters()), hp["clip_norm"])
    opt.step()
    return loss.item(), norm.item(), lr


if __name__ == "__main__":
    # Tiny smoke run: python3 tools/reference.py MODEL.safetensors prints the config.
    if len(sys.argv) == 2:
        m, meta = load_model(sys.argv[1])
        print(json.dumps(m.cfg))
