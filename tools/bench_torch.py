"""PyTorch side of `make bench`: times one model configuration in PyTorch.

Uses the independent reference implementation (tools/reference.py) in float32,
optionally under bf16 autocast, with the fastest settings PyTorch 1.13 offers
on this CPU (README "Performance"). bench/bench starts it with:
  * the same thread count: --threads N (torch.set_num_threads) and OMP_NUM_THREADS;
  * OMP_WAIT_POLICY=PASSIVE (PyTorch's OpenMP pool and OpenBLAS's pthreads
    otherwise spin against each other on 2 cores);
  * OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (they force AVX2 kernels);
  * LD_LIBRARY_PATH at OpenBLAS (pthreads) when the system's libblas.so.3 is
    the reference BLAS (bench/openblas.sh): Debian's torch calls whatever
    libblas.so.3 is, and fp32 matmuls are ~30x slower with the reference one.
Options here:
  * --prec bf16: torch.autocast("cpu", dtype=torch.bfloat16) around the
    forward and the loss (oneDNN bf16 matmuls); parameters, gradients and AdamW
    state stay fp32, as in difftx's bf16 mode;
  * attention is materialised (1.13 has no scaled_dot_product_attention):
      --attn ref    the reference's causal_softmax as written (matmul, scale,
                    boolean mask built per call, masked_fill, softmax);
      --attn fused  cached additive causal mask, one baddbmm (scale folded in)
                    then softmax: one T x T tensor fewer per map (default);
    RoPE tables are cached per (T, d) in both cases;
  * --foreach 1: AdamW's multi-tensor implementation (no faster here).

One training step = zero_grad, forward + cross-entropy, backward (gradient
accumulation over --micro-batch sized pieces when --micro-batch < --batch),
clip_grad_norm_(1.0), AdamW (betas 0.9/0.95, wd 0.1 on 2-D weights): the
same work as difftx's dtx_model_forward + dtx_model_backward +
dtx_optimizer_step. One forward = the model's logits without autograd.

Standalone it runs --warmup + --steps training steps and --fwd-steps forwards
and prints one JSON line (times in seconds, peak RSS in KiB). With --serve it
answers bench/bench's commands on stdin ("train", "fwd", "quit") with one line
"ok SECONDS VMHWM_KIB LOSS" each, after a first line "ready MICRO_BATCH".
"""

import argparse
import functools
import json
import math
import os
import resource
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402

_orig_rope = reference.rope_cos_sin


@functools.lru_cache(maxsize=None)
def _rope_cached(T, d, theta, dtype, scaling=None):
    return _orig_rope(T, d, theta, dtype, scaling)


@functools.lru_cache(maxsize=None)
def _additive_mask(T, dtype):
    m = torch.full((T, T), float("-inf"))
    return torch.triu(m, diagonal=1).to(dtype)


def causal_softmax_fused(q, k, scale):
    """q, k: (B, n, T, d) -> causal softmax(q kᵀ · scale) of shape (B, n, T, T)."""
    B, n, T, d = q.shape
    q3 = q.reshape(B * n, T, d)
    k3 = k.reshape(B * n, T, d)
    mask = _additive_mask(T, q3.dtype).expand(B * n, T, T)  # stride 0 over B * n: no copy
    z = torch.baddbmm(mask, q3, k3.transpose(1, 2), alpha=scale)
    return torch.softmax(z, dim=-1).view(B, n, T, T)


def vm_hwm_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return -1


def build(args):
    heads = args.heads
    cfg = {
        "arch": args.arch, "dim": args.dim, "n_layers": args.layers, "n_heads": heads,
        "n_kv_heads": heads, "vocab_size": args.vocab, "ffn_dim": args.ffn, "max_seq_len": args.seq,
        "rope_theta": 10000.0, "norm_eps": 1e-5, "tie_embeddings": False,
    }
    model = reference.Model(cfg).to(torch.float32)
    gen = torch.Generator().manual_seed(args.seed)
    reference.init_weights(model, gen)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", choices=("diff", "transformer"), required=True)
    ap.add_argument("--dim", type=int, required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True, help="diff heads or ordinary heads (MHA)")
    ap.add_argument("--ffn", type=int, required=True)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--micro-batch", type=int, default=0, help="gradient-accumulation piece (0: whole batch)")
    ap.add_argument("--prec", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--attn", choices=("ref", "fused"), default="fused")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3, help="timed training steps")
    ap.add_argument("--fwd-steps", type=int, default=3, help="timed forward passes (0: skip)")
    ap.add_argument("--foreach", type=int, default=0, help="AdamW foreach implementation")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--serve", action="store_true",
                    help="bench/bench's protocol: answer 'train' / 'fwd' / 'quit' lines on stdin")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    reference.rope_cos_sin = _rope_cached
    if args.attn == "fused":
        reference.causal_softmax = causal_softmax_fused

    model = build(args)
    opt = reference.make_optimizer(model, 1e-4, 0.9, 0.95, 1e-8, 0.1, False)
    if args.foreach:
        for g in opt.param_groups:
            g["foreach"] = True
    mb = args.micro_batch if 0 < args.micro_batch < args.batch else args.batch
    if args.batch % mb:
        sys.exit("batch %d is not a multiple of micro-batch %d" % (args.batch, mb))
    n_micro = args.batch // mb
    g = torch.Generator().manual_seed(args.seed + 1)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
    targets = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
    params = list(model.parameters())

    def autocast():
        if args.prec == "bf16":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return torch.autocast("cpu", enabled=False)

    def train_step():
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for i in range(n_micro):
            tk = tokens[i * mb:(i + 1) * mb]
            tg = targets[i * mb:(i + 1) * mb]
            with autocast():
                logits = model(tk)
                loss = F.cross_entropy(logits.float().reshape(-1, args.vocab), tg.reshape(-1))
            (loss / n_micro).backward()
            total += loss.item() / n_micro
            del logits, loss
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return total

    def forward():
        with torch.no_grad(), autocast():
            for i in range(n_micro):
                model(tokens[i * mb:(i + 1) * mb])

    if args.serve:
        print("ready %d" % mb, flush=True)
        for line in sys.stdin:
            cmd = line.strip()
            t0 = time.perf_counter()
            loss = float("nan")
            if cmd == "train":
                loss = train_step()
            elif cmd == "fwd":
                forward()
            else:
                break
            dt = time.perf_counter() - t0
            if cmd == "train" and not math.isfinite(loss):
                print("err loss is %g" % loss, flush=True)
                return
            print("ok %.6f %d %.6f" % (dt, vm_hwm_kib(), loss), flush=True)
        return

    train_t, fwd_t, losses = [], [], []
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        losses.append(train_step())
        dt = time.perf_counter() - t0
        if i >= args.warmup:
            train_t.append(dt)
    if args.fwd_steps > 0:
        for i in range(1 + args.fwd_steps):
            t0 = time.perf_counter()
            forward()
            dt = time.perf_counter() - t0
            if i >= 1:
                fwd_t.append(dt)
    ok = all(math.isfinite(x) for x in losses)
    out = {
        "impl": "torch", "torch": torch.__version__, "arch": args.arch, "prec": args.prec, "attn": args.attn,
        "threads": torch.get_num_threads(), "batch": args.batch, "micro_batch": mb, "seq": args.seq,
        "train_s": train_t, "fwd_s": fwd_t, "loss0": losses[0] if losses else None, "finite": ok,
        "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
