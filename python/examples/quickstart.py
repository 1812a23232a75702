"""difftx from Python, notebook style: train a tiny DIFF Transformer and its
parameter-matched Transformer on the repository's own documentation, compare
their losses and attention, generate, and hand the weights to PyTorch.

    make lib && python3 python/examples/quickstart.py            # ~1 minute on 2 cores
    python3 python/examples/quickstart.py --steps 20              # a quick look

Run it from anywhere: it finds the package in python/ when it is not
installed (`pip install ./python` installs it)."""
import argparse
import glob
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
try:
    import difftx
except ImportError:
    sys.path.insert(0, os.path.dirname(HERE))
    import difftx

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--out", default=os.path.join(ROOT, "runs", "python-quickstart"))
args = ap.parse_args()
os.makedirs(args.out, exist_ok=True)

# %% 1. A tokenizer and tokens, from the repository's markdown files
texts = [open(p, encoding="utf-8").read() for p in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]
tok = difftx.Tokenizer.train(texts, vocab_size=512)
ids = np.concatenate([np.append(tok.encode(t), tok.token_id("<|eos|>")) for t in texts])
split = int(len(ids) * 0.9)
train_ids, val_ids = ids[:split], ids[split:]
print("tokenizer: %d ids; %d training tokens, %d validation tokens" % (tok.vocab_size, len(train_ids), len(val_ids)))

# %% 2. Two models of the same size: DIFF and the Transformer it is matched with
diff_cfg = difftx.Config(arch="diff", dim=64, n_layers=2, n_heads=2, vocab_size=tok.vocab_size, ffn_dim=176,
                         max_seq_len=64)
tf_cfg = diff_cfg.baseline()


def progress(name):
    def cb(s):
        if s.val_loss is not None:
            print("  %-11s step %4d/%d  train %.3f  val %.3f  (%.1f s)" % (name, s.step, s.steps, s.loss, s.val_loss,
                                                                          s.seconds))
    return cb


every = max(args.steps // 5, 1)
models = {}
for name, cfg in (("diff", diff_cfg), ("transformer", tf_cfg)):
    models[name] = difftx.train(train_ids, args.steps, config=cfg, val_tokens=val_ids, batch=8, seq=64, seed=1,
                                lr=3e-3, warmup_steps=args.steps // 10, eval_every=every, callback=progress(name),
                                checkpoint=os.path.join(args.out, "%s-%d.ckpt.safetensors" % (name, args.steps)))
    models[name].save(os.path.join(args.out, name + ".safetensors"))
    print("%s: %d parameters" % (name, models[name].num_params()))

# %% 3. Scores on held-out text, and where the last token looks
sample = val_ids[:64]
for name, m in models.items():
    print("%-11s loss on 64 held-out tokens: %.3f nats" % (name, m.score(sample)))
diff_map = models["diff"].attention_map(sample, layer=1, head=0)            # A1 - lambda*A2
tf_map = models["transformer"].attention_map(sample, layer=1, head=0)
print("last query's largest weight: DIFF %.3f on key %d, Transformer %.3f on key %d; DIFF lambda %.3f"
      % (diff_map[-1].max(), diff_map[-1].argmax(), tf_map[-1].max(), tf_map[-1].argmax(),
         models["diff"].lambda_(1)))

# %% 4. Generation
prompt = tok.encode("The model")
for name, m in models.items():
    out = list(m.generate(prompt, 30, temperature=0.8, top_p=0.95, seed=1, eos=tok.token_id("<|eos|>")))
    print("%-11s %r" % (name, tok.decode(list(prompt) + out)))

# %% 5. To PyTorch: the state dict holds numpy arrays under the interop names
try:
    import torch
    state = {k: torch.from_numpy(v) for k, v in models["diff"].state_dict().items()}
    print("torch state dict: %d tensors, e.g. %s %s" % (len(state), "layers.0.attention.q_proj.weight",
                                                        tuple(state["layers.0.attention.q_proj.weight"].shape)))
except ImportError:
    print("(PyTorch is not installed: state_dict() gives numpy arrays all the same)")
