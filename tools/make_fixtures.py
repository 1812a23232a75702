"""Write the PyTorch fixtures the C tests compare against.

    /usr/bin/python3 tools/make_fixtures.py OUTDIR

For each case <arch>_<mha|gqa>_<tied|untied> (arch `diff`, `tf`, or `d2` for
DIFF V2), and for
Table 6's variants (interop.md "Variants") <case>_<variant> with variant
`nosubln` (diff, subln none), `subln` (tf, subln rms), `li08` / `li05` (diff,
a constant lambda_init of 0.8 / 0.5), `linear` / `nolambda` (d2, v2_lambda
linear / none), it writes
  OUTDIR/<case>.model.safetensors   initial weights (F32) + full difftx metadata
  OUTDIR/<case>.expect.safetensors  F32 tensors:
      tokens [2,12] (ids stored as F32), logits [2,11,V], loss [1],
      grad.<param> (gradient at the initial weights),
      after.<param> (after 3 AdamW steps on the same batch),
      grad_norm [3] (pre-clip), lr [3], train_loss [3] (loss before each step);
    its metadata holds the optimiser settings as strings.

Everything is computed in float64 from the F32 weights actually stored in the
model file, so the fixtures are the exact answer up to F32 storage and the C
fp32 code is judged only on its own rounding. Seeds are fixed and torch runs
single-threaded, so two runs give byte-identical files.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as ref  # noqa: E402

B, SEQ = 2, 12          # 12 tokens -> T = 11 positions after the shift
STEPS = 3
BASE = dict(dim=32, n_layers=2, vocab_size=61, ffn_dim=40, max_seq_len=16,
            rope_theta=10000.0, norm_eps=1e-5)
# n_heads, n_kv_heads per (arch, attention kind); d = 8 everywhere.
HEADS = {("diff", "mha"): (2, 2), ("diff", "gqa"): (2, 1),
         ("transformer", "mha"): (4, 4), ("transformer", "gqa"): (4, 2),
         ("diff2", "mha"): (4, 4), ("diff2", "gqa"): (4, 2)}
HP = dict(lr=1e-2, min_lr=1e-3, warmup_steps=2, total_steps=3, schedule="cosine",
          beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, clip_norm=0.5)


# Table 6's variants: (arch, kind, tie, suffix, config keys). The seeds follow
# the default cases', so those stay byte-identical.
VARIANTS = (("diff", "gqa", False, "nosubln", dict(subln="none")),
            ("diff", "mha", True, "nosubln", dict(subln="none")),
            ("transformer", "gqa", True, "subln", dict(subln="rms")),
            ("transformer", "mha", False, "subln", dict(subln="rms")),
            ("diff", "mha", True, "li08", dict(lambda_init=0.8)),
            ("diff", "gqa", False, "li05", dict(lambda_init=0.5)))
# DIFF V2 (spec §8), after everything above so that those seeds stay as they were.
V2_CASES = (("diff2", "mha", True, "", {}), ("diff2", "mha", False, "", {}),
            ("diff2", "gqa", True, "", {}), ("diff2", "gqa", False, "", {}),
            ("diff2", "gqa", False, "linear", dict(v2_lambda="linear")),
            ("diff2", "mha", True, "nolambda", dict(v2_lambda="none")))
# What Hugging Face imports bring (docs/huggingface.md): a head width other than dim / heads, and Llama
# 3.1's RoPE scaling (factor 4, low 1, high 4, original context 8: the 12-wide heads' first frequency
# blended, the rest divided). Last, for the seeds above.
HF_CASES = (("diff", "gqa", False, "hd12_llama3", dict(head_dim=12, rope_scaling=(4.0, 1.0, 4.0, 8))),
            ("transformer", "gqa", True, "hd6_llama3", dict(head_dim=6, rope_scaling=(4.0, 1.0, 4.0, 8))),
            ("diff2", "gqa", False, "hd4", dict(head_dim=4)))


def case_name(arch, kind, tie):
    prefix = {"diff": "diff", "transformer": "tf", "diff2": "d2"}[arch]
    return "%s_%s_%s" % (prefix, kind, "tied" if tie else "untied")


def cases():
    i = 0
    for arch in ("diff", "transformer"):
        for kind in ("mha", "gqa"):
            for tie in (True, False):
                h, hkv = HEADS[(arch, kind)]
                cfg = dict(BASE, arch=arch, n_heads=h, n_kv_heads=hkv, tie_embeddings=tie)
                yield i, case_name(arch, kind, tie), cfg
                i += 1
    for arch, kind, tie, suffix, keys in VARIANTS + V2_CASES + HF_CASES:
        h, hkv = HEADS[(arch, kind)]
        cfg = dict(BASE, arch=arch, n_heads=h, n_kv_heads=hkv, tie_embeddings=tie, **keys)
        yield i, case_name(arch, kind, tie) + ("_" + suffix if suffix else ""), cfg
        i += 1


def train(model_path, tokens, hp):
    """Fresh float64 copy of the stored model, STEPS steps; returns records and params."""
    model, _ = ref.load_model(model_path, torch.float64)
    opt = ref.make_optimizer(model, hp["lr"], hp["beta1"], hp["beta2"], hp["eps"],
                             hp["weight_decay"], hp["decay_embeddings"])
    rec = {"grad_norm": [], "lr": [], "train_loss": []}
    for s in range(STEPS):
        loss, norm, lr = ref.train_step(model, opt, tokens, s, hp)
        rec["train_loss"].append(loss)
        rec["grad_norm"].append(norm)
        rec["lr"].append(lr)
    return rec, ref.state_tensors(model)


def make_case(outdir, idx, name, cfg):
    gen = torch.Generator().manual_seed(20250 + idx)
    model = ref.Model(cfg)
    # Stronger than the spec's init (lambda std 0.1, norm weights 1) so that a
    # wrong lambda or norm-weight index shows in the numbers.
    ref.init_weights(model, gen, lam_std=0.3, norm_jitter=0.1)
    model_path = os.path.join(outdir, name + ".model.safetensors")
    ref.save_model(model_path, model)

    model, _ = ref.load_model(model_path, torch.float64)
    tokens = torch.randint(0, cfg["vocab_size"], (B, SEQ), generator=gen)
    logits = model(tokens[:, :-1])
    loss = model.loss(tokens)
    loss.backward()

    hp = dict(HP, decay_embeddings=cfg["tie_embeddings"])
    rec, after = train(model_path, tokens, hp)
    if max(rec["grad_norm"]) <= hp["clip_norm"]:
        # The fixture must exercise clipping; pick a clip below the largest norm.
        hp["clip_norm"] = float("%.2g" % (0.5 * max(rec["grad_norm"])))
        print("%s: clip_norm lowered to %g" % (name, hp["clip_norm"]))
        rec, after = train(model_path, tokens, hp)
    assert max(rec["grad_norm"]) > hp["clip_norm"]

    out = {"tokens": tokens.double(), "logits": logits.detach(), "loss": loss.detach().reshape(1)}
    for pname, p in ref.state_tensors(model).items():
        out["grad." + pname] = dict(model.named_parameters())[pname].grad
    for pname, p in after.items():
        out["after." + pname] = p
    for k in ("grad_norm", "lr", "train_loss"):
        out[k] = torch.tensor(rec[k], dtype=torch.float64)
    meta = {k: repr(hp[k]) for k in ("lr", "min_lr", "beta1", "beta2", "eps", "weight_decay",
                                     "clip_norm")}
    meta.update(warmup_steps=str(hp["warmup_steps"]), total_steps=str(hp["total_steps"]),
                schedule=hp["schedule"], steps=str(STEPS),
                decay_embeddings="true" if hp["decay_embeddings"] else "false")
    ref.write_safetensors(os.path.join(outdir, name + ".expect.safetensors"), out, meta)
    print("%-16s loss %.6f grad_norm %s clip %g" % (
        name, loss.item(), " ".join("%.4f" % g for g in rec["grad_norm"]), hp["clip_norm"]))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_fixtures.py OUTDIR")
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)   # fixed reduction order -> byte-identical reruns
    for idx, name, cfg in cases():
        make_case(outdir, idx, name, cfg)


if __name__ == "__main__":
    main()
