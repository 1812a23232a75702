#!/usr/bin/python3
"""A Hugging Face checkpoint folder of a given shape with random weights, for measuring difftx on models
of real size (docs/huggingface.md): config.json and BF16 (or F32) shards with their index, as transformers
writes them. The weights are N(0, 0.02^2) (norms 1, lambda vectors N(0, 0.1^2)): a model of that size
and layout, not a trained one.

    /usr/bin/python3 tools/hf_synth.py --arch diffllama --hidden 2048 --layers 16 --heads 16 --kv-heads 4 \\
        --ffn 5632 --vocab 32000 --out /tmp/diffllama-0.8b          # 0.79B parameters, 1.6 GB of BF16
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as ref  # noqa: E402  (the safetensors writer)


def write_file(path, tensors, dtype):
    """One shard: the tensors (name, shape, maker) made and written in order."""
    ref.write_safetensors(path, {name: torch.from_numpy(make()) for name, _, make in tensors}, {"format": "pt"},
                          dtype=dtype)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--arch", choices=("diffllama", "llama"), required=True)
    for k, v in (("hidden", 2048), ("layers", 16), ("heads", 16), ("kv-heads", 4), ("ffn", 5632), ("vocab", 32000),
                 ("max-pos", 4096), ("seed", 1)):
        p.add_argument("--" + k, type=int, default=v)
    p.add_argument("--head-dim", type=int, default=0)
    p.add_argument("--tied", action="store_true")
    p.add_argument("--dtype", choices=("BF16", "F32"), default="BF16")
    p.add_argument("--shard-mb", type=int, default=1000, help="shards of at most this many MB (0: one)")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    rng = np.random.default_rng(a.seed)
    h, H, kv, F, V = a.hidden, a.heads, a.kv_heads, a.ffn, a.vocab
    D = a.head_dim or h // H

    def normal(shape, std):
        return lambda: rng.standard_normal(shape, dtype=np.float32) * std

    def ones(n):
        return lambda: np.ones(n, dtype=np.float32)

    t = [("model.embed_tokens.weight", (V, h), normal((V, h), 0.02))]
    for L in range(a.layers):
        q = "model.layers.%d." % L
        t += [(q + "input_layernorm.weight", (h,), ones(h)),
              (q + "self_attn.q_proj.weight", (H * D, h), normal((H * D, h), 0.02)),
              (q + "self_attn.k_proj.weight", (kv * D, h), normal((kv * D, h), 0.02)),
              (q + "self_attn.v_proj.weight", (kv * D, h), normal((kv * D, h), 0.02)),
              (q + "self_attn.o_proj.weight", (h, H * D), normal((h, H * D), 0.02))]
        if a.arch == "diffllama":
            t += [(q + "self_attn." + n, (D,), normal((D,), 0.1)) for n in ("lambda_q1", "lambda_k1", "lambda_q2",
                                                                               "lambda_k2")]
        t += [(q + "post_attention_layernorm.weight", (h,), ones(h)),
              (q + "mlp.gate_proj.weight", (F, h), normal((F, h), 0.02)),
              (q + "mlp.up_proj.weight", (F, h), normal((F, h), 0.02)),
              (q + "mlp.down_proj.weight", (h, F), normal((h, F), 0.02))]
    t += [("model.norm.weight", (h,), ones(h))]
    if not a.tied:
        t += [("lm_head.weight", (V, h), normal((V, h), 0.02))]
    os.makedirs(a.out, exist_ok=True)
    width = 2 if a.dtype == "BF16" else 4
    shards, cur, size = [], [], 0
    for x in t:
        b = int(np.prod(x[1])) * width
        if cur and a.shard_mb and size + b > a.shard_mb * 1000000:
            shards.append(cur)
            cur, size = [], 0
        cur.append(x)
        size += b
    shards.append(cur)
    weight_map, total = {}, 0
    for i, s in enumerate(shards):
        name = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
        write_file(os.path.join(a.out, name), s, a.dtype)
        for n, shape, _ in s:
            weight_map[n] = name
            total += int(np.prod(shape)) * width
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    cfg = {"architectures": ["DiffLlamaForCausalLM" if a.arch == "diffllama" else "LlamaForCausalLM"],
           "model_type": a.arch, "hidden_size": h, "intermediate_size": F, "num_hidden_layers": a.layers,
           "num_attention_heads": H, "num_key_value_heads": kv, "head_dim": D, "vocab_size": V,
           "max_position_embeddings": a.max_pos, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "rope_scaling": None,
           "tie_word_embeddings": a.tied, "hidden_act": "silu", "attention_bias": False,
           "torch_dtype": "bfloat16" if a.dtype == "BF16" else "float32"}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    n = sum(int(np.prod(s)) for _, s, _ in t)
    print("%s: %s, %.3fB parameters, %.2f GB in %d shard(s)" % (a.out, cfg["architectures"][0], n / 1e9, total / 1e9,
                                                                 len(shards)))


if __name__ == "__main__":
    main()
