"""A textbook GPT in PyTorch, trained on difftx's copy documents: the baseline beside difftx's LLaMA-style
Transformer in the induction-time stage (scripts/induction_time.sh), so that a reader can see whether
difftx's baseline behaves as the standard one does on the same data.

usage: tools/gpt_torch.py --out MODEL.pt --log LOG.jsonl --steps N --lr X [--seed S] [--dim D] [--layers L]
                          [--heads H] [--vocab V] [--seq T] [--batch B] [--warmup W] [--min-lr X]
                          [--wd X] [--clip X] [--ckpt-every N] [--log-steps N] [--stop-after N] [--resume]
       tools/gpt_torch.py --batch-of SEED STEP --vocab V --seq T --batch B    (prints a step's rows, as JSON)

The model is GPT-2's (Radford et al. 2019, as nanoGPT writes it): learned position embeddings, pre-norm
blocks with LayerNorm (with biases), fused q/k/v with biases, a GELU MLP of 4 x the width, a final
LayerNorm, the output tied to the token embedding; GPT-2's initialisation (N(0, 0.02^2), the residual
projections / sqrt(2 x layers), biases 0). Everything else is difftx train's: the rows (copy documents
made exactly as `difftx train --copy-frac 1` makes them for the same seed and step: L ids of the
vocabulary, 16 <= L <= max(T/4, 16), repeated; copy_rows of src/train/needle_mix.c, written again from
its code), AdamW with its defaults (betas 0.9/0.95, eps 1e-8, decoupled weight decay 0.1 on the weight
matrices only: not embeddings, norms or biases), the global gradient-norm clip 1, and its schedule
(linear warmup to the peak at step W, cosine to min-lr, default lr/10, at the last step). The log has
difftx's fields (step, loss, lr, grad_norm, copy_rows, copy_first, copy_repeat, elapsed_s), so
tools/induction.py and tools/induction_time.py read both the same way.

Resumable: with --ckpt-every N, OUT.ckpt holds the model, the optimizer and the step every N steps (and at
the end); --resume continues from it (the rows depend on the step alone, so a resumed run sees what an
unbroken one would). Needs torch (Debian's python3-torch); scripts/induction_time.sh points it at
OpenBLAS (bench/openblas.sh) as `make bench` does, since Debian's torch otherwise uses the reference BLAS.
"""
import argparse
import json
import math
import os
import sys
import time

M64 = (1 << 64) - 1


def mix64(z):
    """dtx_mix64 (src/common/common.c): splitmix64's finaliser."""
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def copy_rows(seed, step, batch, seq, vocab):
    """(inputs, targets, periods): the rows `difftx train --copy-frac 1 --seed SEED` trains on at STEP
    (1-based; micro-batch 0), each [batch][seq] lists. needle_mix_apply with needle_frac 0 and copy_frac 1:
    every row a copy document."""
    ins, tgs, periods = [], [], []
    hi = max(seq // 4, 16)
    for r in range(batch):
        h = mix64(mix64(mix64((seed ^ 0x6E65656431) & M64) ^ step) ^ r)
        h2 = mix64(h)
        L = min(16 + h2 % (hi - 16 + 1), seq)
        row, h = [], h2
        for _ in range(L):
            h = mix64(h)
            row.append(h % vocab)
        row += [0] * (seq - L)
        for i in range(L, seq):
            row[i] = row[i - L]
        ins.append(row)
        tgs.append([row[(i + 1) % L] for i in range(seq)])
        periods.append(L)
    return ins, tgs, periods


def lr_at(s, lr, min_lr, warmup, total):
    """dtx_lr_at (src/train/optim.c) at 0-based optimizer step s: linear warmup to lr at s = warmup - 1, then
    cosine from lr to exactly min_lr at s = total - 1."""
    if s < warmup:
        return lr * (s + 1) / warmup
    if total <= warmup:
        return lr
    r = min(1.0, (s + 1 - warmup) / (total - warmup))
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * r))


def build(args):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, d, h):
            super().__init__()
            self.h = h
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.fc_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            B, T, D = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
            q, k, v = (t.view(B, T, self.h, D // self.h).transpose(1, 2) for t in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True) if hasattr(F, "scaled_dot_product_attention") \
                else self._attend(q, k, v)
            x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
            return x + self.fc_proj(F.gelu(self.fc(self.ln2(x))))

        @staticmethod
        def _attend(q, k, v):
            T = q.shape[2]
            s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
            return torch.softmax(s, dim=-1) @ v

    class GPT(nn.Module):
        def __init__(self, a):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(a.vocab, a.dim), nn.Embedding(a.seq, a.dim)
            self.blocks = nn.ModuleList(Block(a.dim, a.heads) for _ in range(a.layers))
            self.ln_f = nn.LayerNorm(a.dim)
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    nn.init.zeros_(p)
                elif p.dim() >= 2:
                    std = 0.02 / math.sqrt(2 * a.layers) if name.endswith(("proj.weight", "fc_proj.weight")) else 0.02
                    nn.init.normal_(p, 0.0, std)

        def forward(self, idx, targets):
            T = idx.shape[1]
            x = self.wte(idx) + self.wpe(torch.arange(T))
            for b in self.blocks:
                x = b(x)
            logits = self.ln_f(x) @ self.wte.weight.t()  # tied output
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")

    return GPT(args)


def train(args):
    import torch
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    torch.manual_seed(args.seed)
    model = build(args)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and not n.startswith(("wte", "wpe"))]
    rest = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and not n.startswith(("wte", "wpe")))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd}, {"params": rest, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    min_lr = args.lr / 10 if args.min_lr is None else args.min_lr
    ckpt = args.out + ".ckpt"
    step, elapsed = 0, 0.0
    if args.resume and os.path.exists(ckpt):
        st = torch.load(ckpt)
        if st["settings"] != settings_of(args):
            sys.exit(f"gpt_torch: {ckpt} was written with other settings ({st['settings']}); remove it")
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        torch.set_rng_state(st["rng"])
        step, elapsed = st["step"], st["elapsed"]
        truncate_log(args.log, step)
    elif args.resume and os.path.exists(args.out):
        return  # finished
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model gpt  dim {args.dim}  layers {args.layers}  heads {args.heads}  vocab {args.vocab}  "
          f"seq {args.seq}  tied  {n_params} params", flush=True)
    log = open(args.log, "a" if step else "w")
    t0 = time.time() - elapsed
    while step < args.steps:
        ins, tgs, periods = copy_rows(args.seed, step + 1, args.batch, args.seq, args.vocab)
        x, y = torch.tensor(ins), torch.tensor(tgs)
        lr = lr_at(step, args.lr, min_lr, args.warmup, args.steps)
        for g in opt.param_groups:
            g["lr"] = lr
        losses = model(x, y).view(args.batch, args.seq)
        loss = losses.mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip))
        if not math.isfinite(float(loss)) or not math.isfinite(gnorm):
            log.write(json.dumps({"step": step + 1, "error": "the loss is not finite"}) + "\n")
            log.close()
            sys.exit(f"gpt_torch: the loss or gradient norm is not finite at step {step + 1}")
        opt.step()
        step += 1
        with torch.no_grad():
            first = sum(float(losses[r, : periods[r]].sum()) for r in range(args.batch))
            n_first = sum(periods)
            repeat = float(losses.sum()) - first
        if step % args.log_steps == 0 or step == args.steps:
            log.write(json.dumps({"step": step, "loss": float(loss), "lr": lr, "grad_norm": gnorm,
                                  "elapsed_s": round(time.time() - t0, 3), "copy_rows": args.batch,
                                  "copy_first": first / n_first,
                                  "copy_repeat": repeat / (args.batch * args.seq - n_first)}) + "\n")
            log.flush()
        if step % max(1, args.steps // 10) == 0:
            print(f"step {step}/{args.steps}  loss {float(loss):.4f}  lr {lr:.2e}  gnorm {gnorm:.3f}", flush=True)
        stop = args.stop_after and step == args.stop_after and step < args.steps
        if (args.ckpt_every or stop) and (stop or step % args.ckpt_every == 0 or step == args.steps):
            torch.save({"settings": settings_of(args), "model": model.state_dict(), "opt": opt.state_dict(),
                        "rng": torch.get_rng_state(), "step": step, "elapsed": time.time() - t0}, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
        if stop:
            log.close()
            print(f"stopped after step {step} (--stop-after); checkpoint written to {ckpt}; resume with --resume")
            return
    log.close()
    torch.save(model.state_dict(), args.out + ".tmp")
    os.replace(args.out + ".tmp", args.out)
    print(f"final loss {float(loss):.4f}\nsaved {args.out}")


def settings_of(a):
    return {k: getattr(a, k) for k in ("dim", "layers", "heads", "vocab", "seq", "batch", "steps", "lr", "min_lr",
                                       "warmup", "wd", "clip", "seed")}


def truncate_log(path, step):
    """Drops the log's lines after STEP (a resume replays from the checkpoint)."""
    if not os.path.exists(path):
        return
    keep = []
    for line in open(path):
        try:
            if json.loads(line).get("step", 0) <= step:
                keep.append(line)
        except ValueError:
            pass
    with open(path + ".tmp", "w") as f:
        f.writelines(keep)
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--log")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--min-lr", type=float, default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dim", type=int, default=192)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--ckpt-every", type=int, default=0)
    ap.add_argument("--log-steps", type=int, default=1)
    ap.add_argument("--stop-after", type=int, default=0)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--batch-of", type=int, nargs=2, metavar=("SEED", "STEP"))
    a = ap.parse_args()
    if a.batch_of:
        ins, tgs, periods = copy_rows(a.batch_of[0], a.batch_of[1], a.batch, a.seq, a.vocab)
        print(json.dumps({"inputs": ins, "targets": tgs, "periods": periods}))
        return
    missing = [f for f in ("out", "log", "steps", "lr") if getattr(a, f) is None]
    if missing:
        ap.error("needs " + ", ".join("--" + m for m in missing))
    if a.dim % a.heads or a.steps < 1 or a.lr <= 0 or a.seq < 2 or a.log_steps < 1:
        ap.error("--dim must divide by --heads; --steps, --lr, --log-steps positive; --seq at least 2")
    train(a)


if __name__ == "__main__":
    main()
