#!/usr/bin/python3
"""Hugging Face checkpoints and their logits, as fixtures for difftx's importer (docs/huggingface.md).

An independent PyTorch implementation of what transformers' `LlamaForCausalLM` and
`DiffLlamaForCausalLM` compute, written from their modeling files (`models/llama/modeling_llama.py`,
`models/diffllama/modeling_diffllama.py`): it works in HF's own tensor names and layout (rotate_half
RoPE over the pairs (i, i + D/2), DiffLlama's maps paired as heads j and j + H/2, values concatenated
after repeat_kv, one λ per layer with a 0-based λ_init, a weightless per-head RMSNorm), never in
difftx's. Each case is a folder as HF writes it (config.json, model.safetensors or shards with
model.safetensors.index.json) plus expect.safetensors: tokens and the logits computed in float64 from
the stored weights (bf16/f16 values widened exactly).

    /usr/bin/python3 tools/hf_reference.py tests/fixtures/hf
"""
import json
import math
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as ref  # noqa: E402  (the safetensors reader and writer only)

B, T = 2, 12

# name, architecture, config, dtype, shards, tied
CASES = [
    ("diffllama_mha", "DiffLlamaForCausalLM",
     dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
          num_key_value_heads=4, vocab_size=61, rms_norm_eps=1e-5, rope_theta=10000.0), "F32", 1, False),
    ("diffllama_gqa_bf16_sharded", "DiffLlamaForCausalLM",
     dict(hidden_size=32, intermediate_size=40, num_hidden_layers=3, num_attention_heads=8,
          num_key_value_heads=2, vocab_size=67, rms_norm_eps=1e-5, rope_theta=500000.0), "BF16", 3, True),
    ("diffllama_mqa_f16", "DiffLlamaForCausalLM",
     dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
          num_key_value_heads=1, vocab_size=61, rms_norm_eps=1e-5, rope_theta=10000.0), "F16", 1, False),
    ("llama_gqa_untied", "LlamaForCausalLM",
     dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
          num_key_value_heads=2, vocab_size=61, rms_norm_eps=1e-6, rope_theta=10000.0), "F32", 1, False),
    ("llama_mha_tied_bf16_sharded", "LlamaForCausalLM",
     dict(hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
          num_key_value_heads=4, vocab_size=67, rms_norm_eps=1e-6, rope_theta=500000.0), "BF16", 2, True),
    ("llama_mqa", "LlamaForCausalLM",
     dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
          num_key_value_heads=1, vocab_size=61, rms_norm_eps=1e-6, rope_theta=10000.0), "F32", 1, False),
    # Llama 3.1's RoPE scaling, with theta and orig small enough that the 4 frequencies of an 8-wide head
    # fall in every branch (wavelengths 6.3: kept, 20: blended, 63 and 200: divided by the factor)
    ("llama_rope_llama3", "LlamaForCausalLM",
     dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
          num_key_value_heads=2, vocab_size=61, rms_norm_eps=1e-5, rope_theta=100.0,
          rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                            original_max_position_embeddings=32)), "F32", 1, False),
    # an explicit head_dim other than hidden / heads: wider heads (Llama), narrower (DiffLlama)
    ("llama_head_dim_16", "LlamaForCausalLM",
     dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, head_dim=16,
          num_key_value_heads=2, vocab_size=61, rms_norm_eps=1e-6, rope_theta=10000.0), "F32", 1, False),
    ("diffllama_head_dim_4", "DiffLlamaForCausalLM",
     dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, head_dim=4,
          num_key_value_heads=2, vocab_size=61, rms_norm_eps=1e-5, rope_theta=10000.0), "BF16", 1, True),
    # the same scaling written as newer transformers write it (rope_parameters, rope_theta inside)
    ("diffllama_rope_parameters_llama3", "DiffLlamaForCausalLM",
     dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
          num_key_value_heads=2, vocab_size=61, rms_norm_eps=1e-5,
          rope_parameters=dict(rope_theta=100.0, rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                               high_freq_factor=4.0, original_max_position_embeddings=32)), "F32", 1, False),
]


def rope_params(c):
    """(theta, scaling dict or None) wherever the config keeps them."""
    p = c.get("rope_parameters") or {}
    s = p if p else (c.get("rope_scaling") or {})
    theta = p.get("rope_theta", c.get("rope_theta", 10000.0))
    return theta, (s if s.get("rope_type", s.get("type")) == "llama3" else None)


def inv_freq(D, c):
    """transformers' default frequencies, then (rope_type llama3) _compute_llama3_parameters."""
    theta, s = rope_params(c)
    f = 1.0 / theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    if s is None:
        return f
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old = s["original_max_position_embeddings"]
    wavelen = 2 * math.pi / f
    scaled = torch.where(wavelen > old / low, f / factor, f)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return torch.where(medium, smoothed, scaled)


def head_width(c):
    """transformers' head_dim: the config's, else hidden_size / num_attention_heads."""
    return c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]


def weights(arch, c, tied, gen):
    """Random weights in HF's names and shapes ([out, in] linears); lambdas and norms far from their
    init so that a wrong index shows in the logits."""
    h, H, kv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    D, F, V = head_width(c), c["intermediate_size"], c["vocab_size"]

    def lin(o, i):
        return (torch.rand(o, i, generator=gen, dtype=torch.float64) * 2 - 1) / math.sqrt(i)

    def norm(n):
        return 1 + 0.2 * torch.randn(n, generator=gen, dtype=torch.float64)

    w = {"model.embed_tokens.weight": torch.randn(V, h, generator=gen, dtype=torch.float64) / math.sqrt(h)}
    for L in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % L
        w[p + "input_layernorm.weight"] = norm(h)
        w[p + "self_attn.q_proj.weight"] = lin(H * D, h)
        w[p + "self_attn.k_proj.weight"] = lin(kv * D, h)
        w[p + "self_attn.v_proj.weight"] = lin(kv * D, h)
        w[p + "self_attn.o_proj.weight"] = lin(h, H * D)
        if arch == "DiffLlamaForCausalLM":
            for n in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
                w[p + "self_attn." + n] = 0.3 * torch.randn(D, generator=gen, dtype=torch.float64)
        w[p + "post_attention_layernorm.weight"] = norm(h)
        w[p + "mlp.gate_proj.weight"] = lin(F, h)
        w[p + "mlp.up_proj.weight"] = lin(F, h)
        w[p + "mlp.down_proj.weight"] = lin(h, F)
    w["model.norm.weight"] = norm(h)
    if not tied:
        w["lm_head.weight"] = lin(V, h)
    return w


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (w if w is not None else 1)


def rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., :x.shape[-1] // 2]), dim=-1)


def rope(x, c):
    """x [B, heads, T, D]: HF's RoPE, frequency i on the pair (i, i + D/2)."""
    D = x.shape[-1]
    ang = torch.arange(x.shape[2], dtype=torch.float64)[:, None] * inv_freq(D, c)[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    return x * emb.cos() + rotate_half(x) * emb.sin()


def repeat_kv(x, n):
    b, g, t, d = x.shape
    return x[:, :, None].expand(b, g, n, t, d).reshape(b, g * n, t, d)


def attention(arch, c, w, p, x, layer):
    Bn, Tn, _ = x.shape
    H, kv = c["num_attention_heads"], c["num_key_value_heads"]
    D = head_width(c)
    q = (x @ w[p + "q_proj.weight"].T).view(Bn, Tn, H, D).transpose(1, 2)
    k = (x @ w[p + "k_proj.weight"].T).view(Bn, Tn, kv, D).transpose(1, 2)
    v = (x @ w[p + "v_proj.weight"].T).view(Bn, Tn, kv, D).transpose(1, 2)
    q, k = rope(q, c), rope(k, c)
    k, v = repeat_kv(k, H // kv), repeat_kv(v, H // kv)
    mask = torch.full((Tn, Tn), float("-inf"), dtype=torch.float64).triu(1)
    if arch == "DiffLlamaForCausalLM":
        v = torch.cat(torch.chunk(v, 2, dim=1), dim=-1).repeat(1, 2, 1, 1)  # head j: [v_j ; v_{j+H/2}]
    a = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(D) + mask, dim=-1)
    o = a @ v
    if arch == "DiffLlamaForCausalLM":
        lam_init = 0.8 - 0.6 * math.exp(-0.3 * layer)  # layer_idx from 0
        lam = (torch.exp((w[p + "lambda_q1"] * w[p + "lambda_k1"]).sum())
               - torch.exp((w[p + "lambda_q2"] * w[p + "lambda_k2"]).sum()) + lam_init)
        o1, o2 = torch.chunk(o, 2, dim=1)  # maps j and j + H/2
        o = (1 - lam_init) * rms(o1 - lam * o2, None, c["rms_norm_eps"])
    o = o.transpose(1, 2).reshape(Bn, Tn, -1)
    return o @ w[p + "o_proj.weight"].T


def forward(arch, c, w, tokens, tied):
    x = w["model.embed_tokens.weight"][tokens]
    eps = c["rms_norm_eps"]
    for L in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % L
        x = x + attention(arch, c, w, p + "self_attn.", rms(x, w[p + "input_layernorm.weight"], eps), L)
        hmid = rms(x, w[p + "post_attention_layernorm.weight"], eps)
        g, u = hmid @ w[p + "mlp.gate_proj.weight"].T, hmid @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ w[p + "mlp.down_proj.weight"].T
    x = rms(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if tied else w["lm_head.weight"]
    return x @ head.T


def stored(t, dtype):
    """The value a tensor has once written in dtype and read back (what both readers see)."""
    if dtype == "BF16":
        return t.to(torch.float32).to(torch.bfloat16).to(torch.float64)
    if dtype == "F16":
        return t.to(torch.float16).to(torch.float64)
    return t.to(torch.float32).to(torch.float64)


def write_dir(out, arch, c, w, dtype, shards, tied):
    os.makedirs(out)
    cfg = dict(dict(rope_scaling=None), **c)
    cfg.update(architectures=[arch], model_type="diffllama" if arch.startswith("Diff") else "llama",
               max_position_embeddings=64, hidden_act="silu", tie_word_embeddings=tied, attention_bias=False,
               torch_dtype={"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[dtype],
               bos_token_id=1, eos_token_id=2)
    if arch == "LlamaForCausalLM":
        cfg["mlp_bias"] = False
    else:
        cfg["lambda_std_dev"] = 0.1
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    names = list(w)
    meta = {"format": "pt"}
    if shards == 1:
        ref.write_safetensors(os.path.join(out, "model.safetensors"), w, meta, dtype=dtype)
        return
    per = -(-len(names) // shards)
    weight_map, total = {}, 0
    for s in range(shards):
        part = names[s * per:(s + 1) * per]
        fname = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
        ref.write_safetensors(os.path.join(out, fname), {n: w[n] for n in part}, meta, dtype=dtype)
        for n in part:
            weight_map[n] = fname
            total += w[n].numel() * (4 if dtype == "F32" else 2)
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/hf"
    os.makedirs(outdir, exist_ok=True)
    for i, (name, arch, c, dtype, shards, tied) in enumerate(CASES):
        gen = torch.Generator().manual_seed(4100 + i)
        w = {k: stored(v, dtype) for k, v in weights(arch, c, tied, gen).items()}
        d = os.path.join(outdir, name)
        if os.path.exists(d):
            shutil.rmtree(d)
        write_dir(d, arch, c, w, dtype, shards, tied)
        tokens = torch.randint(0, c["vocab_size"], (B, T), generator=gen)
        logits = forward(arch, c, w, tokens, tied)
        ref.write_safetensors(os.path.join(d, "expect.safetensors"),
                              {"tokens": tokens.double(), "logits": logits})
        print("%-28s %s %s, %d shard(s): logits |max| %.3f" % (name, arch, dtype, shards, logits.abs().max()))


if __name__ == "__main__":
    main()
