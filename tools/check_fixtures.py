"""Self-checks of tools/reference.py and of the fixtures it wrote.

    /usr/bin/python3 tools/check_fixtures.py [FIXTURE_DIR]     (default tests/fixtures)

The reference is the yardstick for the C code, so it must not be wrong in the
same way the C code could be. These checks re-derive its results by other
routes: a second, loop-based forward pass written straight from the spec's
per-head pseudocode (complex-number RoPE, explicit channel slices, (A1 - lam A2) V
order, hand-written softmax/cross-entropy); closed forms for degenerate weights;
gradcheck in float64; a hand-written clip + AdamW; and the safetensors layout.
Exits non-zero on the first group of failures.
"""

import json
import math
import os
import struct
import sys
import tempfile

import numpy as np
import torch
from torch.nn.utils import stateless

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as ref  # noqa: E402
import make_fixtures as mf  # noqa: E402

torch.set_num_threads(1)
FAILS = []


def check(ok, what):
    print("%s  %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        FAILS.append(what)


def close(a, b, rtol, atol):
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return a.shape == b.shape and bool(((a - b).abs() <= atol + rtol * b.abs()).all())


def maxdiff(a, b):
    return (torch.as_tensor(a, dtype=torch.float64) - torch.as_tensor(b, dtype=torch.float64)).abs().max().item()


# ---------------------------------------------------------------------------
# Second implementation, written independently of reference.Model
# ---------------------------------------------------------------------------


def naive_freq(cfg, i, d):
    """Frequency of pair i: theta^(-2i/d), or with Llama 3.1's scaling (factor, low, high, orig) the
    wavelength decides: above orig/low slowed by the factor, below orig/high kept, blended between."""
    f = 1.0 / cfg["rope_theta"] ** (2.0 * i / d)
    if not cfg.get("rope_scaling"):
        return f
    factor, low, high, orig = cfg["rope_scaling"]
    wavelength = 2 * math.pi / f
    if wavelength > orig / low:
        return f / factor
    if wavelength < orig / high:
        return f
    s = (orig / wavelength - low) / (high - low)
    return (1 - s) * f / factor + s * f


def naive_rope(x, cfg):
    """x: (T, d). Rotate pair (2i, 2i+1) as the complex number x[2i] + i x[2i+1]."""
    T, d = x.shape
    z = torch.view_as_complex(x.reshape(T, d // 2, 2).contiguous())
    rot = torch.empty(T, d // 2, dtype=torch.complex128)
    for p in range(T):
        for i in range(d // 2):
            a = p * naive_freq(cfg, i, d)
            rot[p, i] = complex(math.cos(a), math.sin(a))
    return torch.view_as_real(z * rot.to(z.dtype)).reshape(T, d)


def naive_softmax_causal(s):
    T = s.shape[0]
    keep = torch.tril(torch.ones(T, T, dtype=torch.float64)) > 0
    s = torch.where(keep, s, torch.full_like(s, -math.inf))
    e = torch.exp(s - s.max(dim=1, keepdim=True).values)
    return e / e.sum(dim=1, keepdim=True)


def naive_rms(x, w, eps):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) / x.shape[-1] + eps) * w


def naive_attention(cfg, P, l, x):
    """One sequence x: (T, dim). Loops over heads, slices channels as in spec §2.8."""
    pre = "layers.%d.attention." % l
    T = x.shape[0]
    H, Hkv, eps = cfg["n_heads"], cfg["n_kv_heads"], cfg["norm_eps"]
    rep = H // Hkv
    Q = x @ P[pre + "q_proj.weight"].t()
    K = x @ P[pre + "k_proj.weight"].t()
    V = x @ P[pre + "v_proj.weight"].t()
    cols = []
    rms = cfg.get("subln", "rms" if cfg["arch"] == "diff" else "none") == "rms"
    if cfg["arch"] == "diff":
        d = cfg.get("head_dim") or cfg["dim"] // H // 2
        fixed = cfg.get("lambda_init", "schedule")
        li = 0.8 - 0.6 * math.exp(-0.3 * l) if fixed == "schedule" else float(fixed)
        lam = (torch.exp((P[pre + "lambda_q1"] * P[pre + "lambda_k1"]).sum())
               - torch.exp((P[pre + "lambda_q2"] * P[pre + "lambda_k2"]).sum()) + li)
        for h in range(H):
            g = h // rep
            q1 = naive_rope(Q[:, 2 * h * d:2 * h * d + d], cfg)
            q2 = naive_rope(Q[:, 2 * h * d + d:2 * h * d + 2 * d], cfg)
            k1 = naive_rope(K[:, 2 * g * d:2 * g * d + d], cfg)
            k2 = naive_rope(K[:, 2 * g * d + d:2 * g * d + 2 * d], cfg)
            v = V[:, 2 * g * d:2 * g * d + 2 * d]
            a1 = naive_softmax_causal(q1 @ k1.t() / math.sqrt(d))
            a2 = naive_softmax_causal(q2 @ k2.t() / math.sqrt(d))
            o = (a1 - lam * a2) @ v
            cols.append((naive_rms(o, P[pre + "subln.weight"], eps) if rms else o) * (1 - li))
    elif cfg["arch"] == "diff2":
        # spec §8.1: query heads 2i, 2i+1 of width d = dim/H on KV head (2i) // (2H/Hkv);
        # lambda per token and head from the attention input x.
        d = cfg.get("head_dim") or cfg["dim"] // H
        rep2 = 2 * H // Hkv
        mode = cfg.get("v2_lambda", "sigmoid")
        for i in range(H):
            heads = []
            for j in (2 * i, 2 * i + 1):
                g = j // rep2
                q = naive_rope(Q[:, j * d:(j + 1) * d], cfg)
                k = naive_rope(K[:, g * d:(g + 1) * d], cfg)
                heads.append(naive_softmax_causal(q @ k.t() / math.sqrt(d)) @ V[:, g * d:(g + 1) * d])
            if mode == "none":
                lam = torch.ones(T, 1, dtype=x.dtype)
            else:
                z = x @ P[pre + "lambda_proj.weight"][i]
                lam = (1 / (1 + torch.exp(-z)) if mode == "sigmoid" else z).reshape(T, 1)
            cols.append(heads[0] - lam * heads[1])
    else:
        d = cfg.get("head_dim") or cfg["dim"] // H
        for j in range(H):
            g = j // rep
            q = naive_rope(Q[:, j * d:(j + 1) * d], cfg)
            k = naive_rope(K[:, g * d:(g + 1) * d], cfg)
            o = naive_softmax_causal(q @ k.t() / math.sqrt(d)) @ V[:, g * d:(g + 1) * d]
            cols.append(naive_rms(o, P[pre + "subln.weight"], eps) if rms else o)
    return torch.cat(cols, dim=1) @ P[pre + "out_proj.weight"].t()


def naive_logits(cfg, P, tokens):
    eps = cfg["norm_eps"]
    out = []
    for b in range(tokens.shape[0]):
        h = P["tok_embeddings.weight"][tokens[b]]
        for l in range(cfg["n_layers"]):
            pre = "layers.%d." % l
            h = h + naive_attention(cfg, P, l, naive_rms(h, P[pre + "attention_norm.weight"], eps))
            x = naive_rms(h, P[pre + "ffn_norm.weight"], eps)
            gate = x @ P[pre + "feed_forward.w1.weight"].t()
            up = x @ P[pre + "feed_forward.w3.weight"].t()
            h = h + (gate / (1 + torch.exp(-gate)) * up) @ P[pre + "feed_forward.w2.weight"].t()
        h = naive_rms(h, P["norm.weight"], eps)
        w = P["tok_embeddings.weight"] if cfg["tie_embeddings"] else P["output.weight"]
        out.append(h @ w.t())
    return torch.stack(out)


def naive_loss(cfg, P, tokens):
    z = naive_logits(cfg, P, tokens[:, :-1])
    lse = z.max(-1, keepdim=True).values
    lse = lse + torch.log(torch.exp(z - lse).sum(-1, keepdim=True))
    logp = z - lse
    tgt = tokens[:, 1:]
    picked = torch.stack([logp[b, t, tgt[b, t]] for b in range(tgt.shape[0]) for t in range(tgt.shape[1])])
    return -picked.mean()


def random_model(cfg, seed):
    m = ref.Model(cfg)
    ref.init_weights(m, torch.Generator().manual_seed(seed), lam_std=0.3, norm_jitter=0.2)
    return m.double()


def params_of(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


# ---------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------


def check_forward_vs_naive():
    for i, name, cfg in mf.cases():
        m = random_model(cfg, 7 + i)
        tok = torch.randint(0, cfg["vocab_size"], (2, 9), generator=torch.Generator().manual_seed(i))
        with torch.no_grad():
            a = m(tok)
            b = naive_logits(cfg, params_of(m), tok)
            la, lb = m.loss(torch.cat([tok, tok[:, :1]], 1)), naive_loss(cfg, params_of(m), torch.cat([tok, tok[:, :1]], 1))
        check(close(a, b, 1e-11, 1e-11) and abs(la.item() - lb.item()) < 1e-11,
              "forward == naive loop implementation (%s), max diff %.1e" % (name, maxdiff(a, b)))


def check_rope():
    d, T = 8, 10
    x = torch.randn(1, T, 3, d, dtype=torch.float64)
    cos, sin = ref.rope_cos_sin(T, d, 10000.0, torch.float64)
    y = ref.apply_rope(x, cos, sin)
    check(close(y.norm(dim=-1), x.norm(dim=-1), 1e-13, 1e-13), "RoPE preserves norms")
    check(torch.equal(y[:, 0], x[:, 0]), "RoPE is the identity at position 0")
    check(close(y[0, :, 1], naive_rope(x[0, :, 1], {"rope_theta": 10000.0}), 1e-13, 1e-13), "RoPE == complex rotation")
    # q_m . k_n must depend on m - n only: place the same q, k at shifted positions.
    q, k = torch.randn(d, dtype=torch.float64), torch.randn(d, dtype=torch.float64)
    xs = torch.stack([q, k]).expand(T, 2, d)[None].contiguous()
    r = ref.apply_rope(xs, cos, sin)[0]
    dots = [torch.dot(r[m, 0], r[m - 3, 1]).item() for m in range(3, T)]
    check(max(dots) - min(dots) < 1e-12, "RoPE scores depend on relative position only")
    # Frequency of pair i: theta^(-2i/d). Pair 1 at position 1 turns by 10000^(-1/4) = 0.1 rad.
    e = torch.zeros(1, 2, 1, d, dtype=torch.float64)
    e[..., 2] = 1.0
    c2, s2 = ref.rope_cos_sin(2, d, 10000.0, torch.float64)
    yy = ref.apply_rope(e, c2, s2)[0, 1, 0]
    check(abs(yy[2].item() - math.cos(0.1)) < 1e-14 and abs(yy[3].item() - math.sin(0.1)) < 1e-14,
          "RoPE pair (2,3) rotates by 0.1 rad at position 1 (theta 1e4, d 8)")


def check_lambda():
    table = [0.2000, 0.3555, 0.4707, 0.5561, 0.6193, 0.6661]     # spec §2.5, depth 0..5
    check(all(abs(ref.lambda_init(l) - v) < 6e-5 for l, v in enumerate(table)),
          "lambda_init matches the spec table (0-based depth)")
    cfg = dict(mf.BASE, arch="diff", n_heads=2, n_kv_heads=2, tie_embeddings=False, n_layers=3)
    m = ref.Model(cfg).double()
    for l, layer in enumerate(m.layers):
        with torch.no_grad():
            for n in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
                getattr(layer.attention, n).zero_()
        check(abs(layer.attention.lambda_full().item() - ref.lambda_init(l)) < 1e-15,
              "zero lambda vectors give lambda == lambda_init (layer %d)" % l)


def check_uniform_attention():
    """q_proj = 0 makes both maps uniform over the prefix: closed form A V = cumulative mean of V."""
    for arch, H, Hkv in (("diff", 2, 1), ("diff", 2, 2), ("transformer", 4, 2)):
        cfg = dict(mf.BASE, arch=arch, n_heads=H, n_kv_heads=Hkv, tie_embeddings=False)
        m = random_model(cfg, 3)
        att = m.layers[1].attention
        with torch.no_grad():
            att.q_proj.weight.zero_()
        x = torch.randn(2, 7, cfg["dim"], dtype=torch.float64)
        with torch.no_grad():
            y = att(x)
            v = att.v_proj(x)
            cm = v.cumsum(1) / torch.arange(1, 8, dtype=torch.float64)[None, :, None]
            rep = H // Hkv
            if arch == "diff":
                d = ref.head_dim(cfg)
                lam, li = att.lambda_full().item(), ref.lambda_init(1)
                heads = []
                for h in range(H):
                    o = (1 - lam) * cm[..., 2 * d * (h // rep):2 * d * (h // rep + 1)]
                    o = o / torch.sqrt(o.pow(2).mean(-1, keepdim=True) + cfg["norm_eps"])
                    heads.append(o * att.subln.weight * (1 - li))
            else:
                d = ref.head_dim(cfg)
                heads = [cm[..., d * (h // rep):d * (h // rep + 1)] for h in range(H)]
            want = att.out_proj(torch.cat(heads, -1))
        check(close(y, want, 1e-12, 1e-12), "q = 0 -> uniform causal attention closed form (%s %d/%d)"
              % (arch, H, Hkv))


def check_causality():
    for arch, H, Hkv in (("diff", 2, 1), ("transformer", 4, 2), ("diff2", 4, 2)):
        cfg = dict(mf.BASE, arch=arch, n_heads=H, n_kv_heads=Hkv, tie_embeddings=True)
        m = random_model(cfg, 5)
        t = torch.randint(0, 61, (1, 10), generator=torch.Generator().manual_seed(1))
        t2 = t.clone()
        t2[0, 6:] = (t2[0, 6:] + 1) % 61
        with torch.no_grad():
            a, b = m(t), m(t2)
        check(torch.equal(a[:, :6], b[:, :6]) and not torch.equal(a[:, 6:], b[:, 6:]),
              "future tokens do not change earlier logits (%s)" % arch)


def check_gradcheck():
    for arch, H, Hkv, tie in (("diff", 2, 1, False), ("diff", 2, 2, True),
                              ("transformer", 4, 2, True), ("transformer", 2, 2, False),
                              ("diff2", 2, 1, False), ("diff2", 2, 2, True)):
        cfg = dict(arch=arch, dim=8, n_layers=2, n_heads=H, n_kv_heads=Hkv, vocab_size=7,
                   ffn_dim=6, max_seq_len=8, rope_theta=100.0, norm_eps=1e-5, tie_embeddings=tie)
        m = random_model(cfg, 11)
        names = list(ref.expected_shapes(cfg))
        tok = torch.randint(0, 7, (2, 5), generator=torch.Generator().manual_seed(2))

        def f(*ps):
            return _loss_call(m, names, ps, tok)

        ps = tuple(params_of(m)[n].requires_grad_(True) for n in names)
        ok = torch.autograd.gradcheck(f, ps, eps=1e-6, atol=1e-7, rtol=1e-5, raise_exception=False)
        check(ok, "torch.autograd.gradcheck of the loss, all parameters (%s %d/%d %s)"
              % (arch, H, Hkv, "tied" if tie else "untied"))


def _loss_call(model, names, ps, tok):
    # functional_call runs forward(); the loss needs the shifted targets too.
    logits = stateless.functional_call(model, dict(zip(names, ps)), (tok[:, :-1],))
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tok[:, 1:].reshape(-1))


def check_schedule():
    f = ref.lr_at
    check(close([f(s, 1.0, 0.1, 2, 3, "cosine") for s in range(3)], [0.5, 1.0, 0.1], 0, 1e-15),
          "cosine schedule: warmup 0.5, peak at warmup-1, min_lr at total-1")
    lin = [f(s, 1.0, 0.0, 1, 5, "linear") for s in range(5)]
    check(close(lin, [1.0, 0.75, 0.5, 0.25, 0.0], 0, 1e-15), "linear schedule")
    check(close([f(s, 2.0, 0.0, 2, 4, "constant") for s in range(4)], [1.0, 2.0, 2.0, 2.0], 0, 1e-15),
          "constant schedule")
    cos = [f(s, 1.0, 0.0, 0, 4, "cosine") for s in range(4)]
    want = [0.5 * (1 + math.cos(math.pi * (s + 1) / 4)) for s in range(4)]
    check(close(cos, want, 0, 1e-15) and cos[-1] == 0.0, "cosine without warmup ends at min_lr")
    check([f(s, 1.0, 0.1, 4, 4, "cosine") for s in (2, 3, 4, 9)] == [0.75, 1.0, 1.0, 1.0],
          "total == warmup: r = 0 after warmup")


def check_param_groups():
    cfg = dict(mf.BASE, arch="diff", n_heads=2, n_kv_heads=1, tie_embeddings=False)
    m = ref.Model(cfg)
    for de in (False, True):
        opt = ref.make_optimizer(m, 1e-3, 0.9, 0.95, 1e-8, 0.1, de)
        ids = {id(p): n for n, p in m.named_parameters()}
        decay = {ids[id(p)] for p in opt.param_groups[0]["params"]}
        want = {n for n in ids.values()
                if n.endswith("_proj.weight") or ".feed_forward." in n
                or (de and n in ("tok_embeddings.weight", "output.weight"))}
        check(decay == want and opt.param_groups[0]["weight_decay"] == 0.1
              and opt.param_groups[1]["weight_decay"] == 0.0
              and len(decay) + len(opt.param_groups[1]["params"]) == len(ids),
              "AdamW decay group = linear weights%s" % (" + embeddings" if de else ""))


def manual_training(cfg, P, tokens, hp):
    """Hand-written global clip + AdamW (torch semantics), gradients via the naive forward."""
    P = {n: t.clone() for n, t in P.items()}
    m_ = {n: torch.zeros_like(t) for n, t in P.items()}
    v_ = {n: torch.zeros_like(t) for n, t in P.items()}
    recs = []
    for s in range(int(hp["steps"])):
        lr = ref.lr_at(s, hp["lr"], hp["min_lr"], hp["warmup_steps"], hp["total_steps"], hp["schedule"])
        leaves = {n: t.clone().requires_grad_(True) for n, t in P.items()}
        loss = naive_loss(cfg, leaves, tokens)
        grads = dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values()))))
        norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
        coef = min(1.0, hp["clip_norm"] / (norm + 1e-6))
        t = s + 1
        for n in P:
            g = grads[n] * coef
            wd = hp["weight_decay"] if (n.endswith(".weight") and P[n].dim() == 2 and (
                hp["decay_embeddings"] or n not in ("tok_embeddings.weight", "output.weight"))) else 0.0
            p = P[n] * (1 - lr * wd)
            m_[n] = hp["beta1"] * m_[n] + (1 - hp["beta1"]) * g
            v_[n] = hp["beta2"] * v_[n] + (1 - hp["beta2"]) * g * g
            mh = m_[n] / (1 - hp["beta1"] ** t)
            vh = v_[n] / (1 - hp["beta2"] ** t)
            P[n] = p - lr * mh / (torch.sqrt(vh) + hp["eps"])
        recs.append((loss.item(), norm, lr))
    return P, recs


def check_safetensors_layout(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    off, ok = 0, n % 8 == 0
    for info in header.values():      # json keeps file order
        ok = ok and info["data_offsets"][0] == off and info["dtype"] == "F32"
        off = info["data_offsets"][1]
    return ok and 8 + n + off == len(data)


def check_fixture_dir(fdir):
    total = 0
    for _, name, cfg in mf.cases():
        mp = os.path.join(fdir, name + ".model.safetensors")
        ep = os.path.join(fdir, name + ".expect.safetensors")
        if not (os.path.exists(mp) and os.path.exists(ep)):
            check(False, "fixture files for %s exist" % name)
            continue
        total += os.path.getsize(mp) + os.path.getsize(ep)
        check(check_safetensors_layout(mp) and check_safetensors_layout(ep),
              "%s: header padded to 8, F32, contiguous in header order, no trailing bytes" % name)
        mt, mmeta = ref.read_safetensors(mp)
        want_meta = ref.metadata_from_config(cfg)
        check(mmeta == want_meta and list(mt) == list(ref.expected_shapes(cfg)),
              "%s: model metadata and tensor names/order" % name)
        E, em = ref.read_safetensors(ep)
        hp = {k: float(em[k]) for k in ("lr", "min_lr", "beta1", "beta2", "eps", "weight_decay", "clip_norm")}
        hp.update(warmup_steps=int(em["warmup_steps"]), total_steps=int(em["total_steps"]),
                  steps=int(em["steps"]), schedule=em["schedule"],
                  decay_embeddings=em["decay_embeddings"] == "true")
        names = list(ref.expected_shapes(cfg))
        want_names = (["tokens", "logits", "loss"] + ["grad." + n for n in names]
                      + ["after." + n for n in names] + ["grad_norm", "lr", "train_loss"])
        check(list(E) == want_names, "%s: expect tensor names" % name)
        check(hp["decay_embeddings"] == cfg["tie_embeddings"] and hp["steps"] == 3,
              "%s: decay_embeddings follows tying; 3 steps" % name)

        P = {n: t.double() for n, t in mt.items()}
        tokens = E["tokens"].long()
        check(torch.equal(tokens.double(), E["tokens"].double()) and tokens.shape == (2, 12)
              and int(tokens.min()) >= 0 and int(tokens.max()) < cfg["vocab_size"], "%s: tokens" % name)
        leaves = {n: t.clone().requires_grad_(True) for n, t in P.items()}
        with torch.no_grad():
            logits = naive_logits(cfg, P, tokens[:, :-1])
        loss = naive_loss(cfg, leaves, tokens)
        grads = torch.autograd.grad(loss, list(leaves.values()))
        # Stored F32 vs fresh float64: only F32 rounding (2^-24 relative) may differ.
        check(close(E["logits"], logits, 1e-7, 1e-7) and close(E["loss"], loss.detach().reshape(1), 1e-7, 0),
              "%s: logits/loss reproduced by the naive forward" % name)
        gok = all(close(E["grad." + n], g, 1e-6, 1e-9) for n, g in zip(leaves, grads))
        check(gok, "%s: every grad.* reproduced by autograd through the naive forward" % name)

        after, recs = manual_training(cfg, P, tokens, hp)
        aok = all(close(E["after." + n], after[n], 1e-6, 1e-8) for n in names)
        rl, rn, rlr = zip(*recs)
        check(aok, "%s: after.* reproduced by hand-written clip + AdamW" % name)
        check(close(E["train_loss"], rl, 1e-7, 0) and close(E["grad_norm"], rn, 1e-7, 0)
              and close(E["lr"], rlr, 1e-7, 0), "%s: train_loss / grad_norm / lr" % name)
        check(max(rn) > hp["clip_norm"], "%s: clipping triggers (max norm %.3f > clip %g)"
              % (name, max(rn), hp["clip_norm"]))
        check(abs(rl[0] - loss.item()) < 1e-12 and any(
            not torch.equal(E["after." + n], mt[n]) for n in names), "%s: training moved the weights" % name)
    # 20 cases (8 default, 6 Table 6 variants, 6 DIFF V2) of ~0.22 MB each
    check(0 < total < 6 * 1024 * 1024, "fixtures total %.2f MB < 6 MB" % (total / 2 ** 20))


def check_io():
    cfg = dict(mf.BASE, arch="diff", n_heads=2, n_kv_heads=1, tie_embeddings=False)
    m = ref.Model(cfg)
    ref.init_weights(m, torch.Generator().manual_seed(0), 0.3, 0.1)
    with tempfile.TemporaryDirectory() as td:
        p32, p16, pbf, pbad = (os.path.join(td, x) for x in ("a", "b", "c", "d"))
        meta = dict(ref.metadata_from_config(cfg), extra_key="kept")
        ref.save_model(p32, m, meta)
        m2, meta2 = ref.load_model(p32, torch.float32)
        check(meta2 == meta and all(torch.equal(a, b) for a, b in
                                    zip(ref.state_tensors(m).values(), ref.state_tensors(m2).values())),
              "F32 save/load round trip is exact and keeps unknown metadata")
        ref.save_model(pbf, m, meta, dtype="BF16")
        m3, _ = ref.load_model(pbf, torch.float32)
        check(all(torch.equal(a.to(torch.bfloat16).float(), b) for a, b in
                  zip(ref.state_tensors(m).values(), ref.state_tensors(m3).values())),
              "BF16 file loads as the bf16-rounded weights")
        # Hand-built F16 file: same layout, dtype F16.
        st = ref.state_tensors(m)
        hdr, blobs, off = {"__metadata__": meta}, [], 0
        for n, t in st.items():
            b = t.numpy().astype("<f2").tobytes()
            hdr[n] = {"dtype": "F16", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
            blobs.append(b)
            off += len(b)
        hj = json.dumps(hdr).encode()
        hj += b" " * (-len(hj) % 8)
        with open(p16, "wb") as f:
            f.write(struct.pack("<Q", len(hj)) + hj + b"".join(blobs))
        m4, _ = ref.load_model(p16, torch.float32)
        check(all(torch.equal(torch.from_numpy(a.numpy().astype(np.float16).astype(np.float32)), b)
                  for a, b in zip(st.values(), ref.state_tensors(m4).values())), "F16 file loads")
        # Refusals: an I32 tensor, and offsets past the end of the file.
        for mutate, what in ((lambda h: h["norm.weight"].update(dtype="I32"), "dtype I32"),
                             (lambda h: h["norm.weight"].update(data_offsets=[off, off + 128]), "offsets past end")):
            h2 = json.loads(json.dumps(hdr))
            mutate(h2)
            hj = json.dumps(h2).encode()
            hj += b" " * (-len(hj) % 8)
            with open(pbad, "wb") as f:
                f.write(struct.pack("<Q", len(hj)) + hj + b"".join(blobs))
            try:
                ref.load_model(pbad)
                refused = False
            except ValueError:
                refused = True
            check(refused, "loader refuses %s" % what)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    fdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "tests", "fixtures")
    check_rope()
    check_lambda()
    check_uniform_attention()
    check_causality()
    check_forward_vs_naive()
    check_gradcheck()
    check_schedule()
    check_param_groups()
    check_io()
    check_fixture_dir(fdir)
    if FAILS:
        print("%d check(s) FAILED" % len(FAILS))
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
