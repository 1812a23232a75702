#!/usr/bin/python3
"""The scaling stage's analysis (scripts/scaling.sh; make reproduce
STAGE=scaling): plain language modelling, each arch at its own learning
rate, 4 sizes x 3 seeds. Writes DIR/SCALING.md with every verdict computed
from the numbers here.

- Learning rate: each arch's final validation loss at the sweep size for
  every lr; its best is the one phase 2 used (--choose-lr prints them;
  --sweep-next the lrs to add while a best lies at the edge of those tried).
- Fig 3a: per size the validation loss (mean over seeds), a power law
  L = a·N^b per arch (least squares in log–log, N non-embedding params),
  and the DIFF parameters that reach each Transformer's loss, as a fraction
  of the Transformer's; the interval resamples the seeds of every (arch,
  size) with replacement and refits (percentile bootstrap, 2000 draws).
- Fig 3b: at the largest size, validation loss against tokens (mean over
  seeds), power laws on the second half of the points, the tokens DIFF
  needs for the Transformer's final loss; the same bootstrap over seeds.
- Loss and Table 6's slices (AR hits, others) per size: DIFF − Transformer
  per seed (the same seed: the same batches), 95% t interval.

usage: tools/scaling.py DIR [--command CMD]
       tools/scaling.py DIR --choose-lr | --sweep-next
"""
import argparse
import datetime
import functools
import json
import math
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runs import finished_models, fit_power, invert, model_info, read_log, read_settings  # noqa: E402
from stats import LEDGER, fmt_ci, mean_ci, verdict, write_verdicts  # noqa: E402

ARCHS = ("diff", "transformer")
NAME = {"diff": "DIFF", "transformer": "Transformer"}
PAPER_PARAMS = "62.2% (6.8B vs 11B) and 59.5% (7.8B vs 13.1B)"
PAPER_TOKENS = "63.7% (160B vs 251B tokens)"


@functools.lru_cache(maxsize=None)
def read_log_val(path):
    """The validation points of a log, read once (the bootstraps ask for them thousands of times)."""
    return tuple(read_log(path)[1])


class Run:
    def __init__(self, d, archs=ARCHS):
        self.dir = d
        self.archs = archs
        self.settings = read_settings(os.path.join(d, "settings.txt"))
        self.steps = int(self.settings["steps"])
        self.tokens_per_step = int(self.settings["batch"]) * int(self.settings["seq"])
        self.runs = {}  # (arch, dim, lr, seed) -> base path (finished runs only)
        pattern = "(" + "|".join(archs) + r")-d(\d+)-lr([0-9.e-]+)-s(\d+)"
        for (a, dim, lr, seed), base in finished_models(d, pattern).items():
            if os.path.exists(base + ".jsonl"):
                self.runs[(a, int(dim), lr, int(seed))] = base
        self.lr = {}
        lp = os.path.join(d, "lr.txt")
        if os.path.exists(lp):
            for line in open(lp):
                f = line.split()
                if len(f) == 2:
                    self.lr[f[0]] = f[1]

    def final_val(self, key):
        pts = read_log_val(self.runs[key] + ".jsonl")
        return pts[-1][1] if pts and pts[-1][0] >= self.steps else None

    def diverged(self, key):
        """A sweep run stopped by a non-finite loss (scripts/scaling.sh records it as finished)."""
        p = self.runs[key] + ".info.json"
        return os.path.exists(p) and json.load(open(p)).get("diverged", False)

    def ppl(self, key):
        p = os.path.join(self.dir, "eval", "ppl-" + os.path.basename(self.runs[key]) + ".json")
        return json.load(open(p)) if os.path.exists(p) else None

    def sizes(self, arch):
        """{dim: {seed: key}} of the arch at its chosen lr."""
        out = {}
        for (a, d, lr, s) in sorted(self.runs):
            if a == arch and lr == self.lr.get(arch):
                out.setdefault(d, {})[s] = (a, d, lr, s)
        return out


def lr_name(x):
    """A learning rate as the run names write it: 0.012 -> 1.2e-2."""
    m, e = f"{x:.1e}".split("e")
    return f"{m.rstrip('0').rstrip('.')}e{int(e)}"


MAX_EXTEND = 2  # lrs tried beyond the grid at each end, at most


def sweep_vals(r, a):
    """{lr: final val loss, inf where it diverged} of arch A's sweep runs (dim sweep_dim, seed 1): the grid of
    the settings and the lrs the stage added beyond it. Exits where a run of the grid is not finished."""
    sweep = int(r.settings["sweep_dim"])
    vals = {}
    for (b, d, lr, s) in r.runs:
        if (b, d, s) == (a, sweep, 1):
            v = math.inf if r.diverged((b, d, lr, s)) else r.final_val((b, d, lr, s))
            if v is not None:
                vals[lr] = v
    for lr in r.settings["lrs"].split():
        if lr not in vals:
            sys.exit(f"scaling: the sweep run {a} lr {lr} is not finished")
    return vals


def choose_lr(r):
    for a in r.archs:
        vals = sweep_vals(r, a)
        print(a, min(vals, key=vals.get))


def sweep_next(r):
    """Prints "ARCH LR" for each arch whose best lr lies at an end of the lrs it was tried at: the next lr
    out (x2 above, /2 below), unless MAX_EXTEND were tried beyond the grid at that end already."""
    grid = sorted(float(x) for x in r.settings["lrs"].split())
    for a in r.archs:
        vals = sweep_vals(r, a)
        best = float(min(vals, key=vals.get))
        tried = sorted(float(x) for x in vals)
        if best == tried[-1] and sum(x > grid[-1] for x in tried) < MAX_EXTEND:
            print(a, lr_name(best * 2))
        elif best == tried[0] and sum(x < grid[0] for x in tried) < MAX_EXTEND:
            print(a, lr_name(best / 2))


def frac_params(r, draw=None):
    """Mean over sizes of (DIFF params for the Transformer's loss) / (Transformer params), and the
    points; draw(list) picks the seeds (a bootstrap resample) or None for all."""
    pts = {}
    for a in ARCHS:
        pts[a] = []
        for d, by_seed in sorted(r.sizes(a).items()):
            vals = [r.final_val(k) for k in by_seed.values()]
            vals = [v for v in vals if v is not None]
            if not vals:
                continue
            vals = draw(vals) if draw else vals
            n = model_info(r.runs[next(iter(by_seed.values()))])["params_nonembed"]
            pts[a].append((d, n, statistics.fmean(vals)))
    if any(len(pts[a]) < 2 for a in ARCHS):
        return None, pts, None
    fits = {a: fit_power([n for _, n, _ in pts[a]], [l for _, _, l in pts[a]]) for a in ARCHS}
    dd = {d: (n, l) for d, n, l in pts["diff"]}
    fr = [invert(*fits["diff"], l) / n for d, n, l in pts["transformer"] if d in dd]
    return statistics.fmean(fr), pts, fits


def frac_tokens(r, draw=None):
    """Tokens DIFF needs (power law on the second half of its mean curve) to reach the Transformer's
    final loss, over the Transformer's tokens, at the largest size."""
    dims = sorted(set(r.sizes("diff")) & set(r.sizes("transformer")))
    if not dims:
        return None, None, None
    d = dims[-1]
    curves, fits = {}, {}
    for a in ARCHS:
        per_seed = [dict(read_log_val(r.runs[k] + ".jsonl")) for k in r.sizes(a)[d].values()]
        per_seed = [p for p in per_seed if p]
        if not per_seed:
            return None, None, None
        per_seed = draw(per_seed) if draw else per_seed
        steps = sorted(set.intersection(*[set(p) for p in per_seed]))
        curves[a] = [(st * r.tokens_per_step, statistics.fmean(p[st] for p in per_seed)) for st in steps]
        half = curves[a][len(curves[a]) // 2:]
        if len(half) < 2:
            return None, None, None
        fits[a] = fit_power(*zip(*half))
    final_t = curves["transformer"][-1]
    return invert(*fits["diff"], final_t[1]) / final_t[0], curves, (fits, d)


def size_trend(pts, fits):
    """What the sizes say beyond the verdict: where the two fits cross (an extrapolation), and any size at which
    an arch's loss does not fall (its lr, tuned at the sweep size alone, may not suit it)."""
    out = []
    (at, bt), (ad, bd) = fits["transformer"], fits["diff"]
    gaps = {d: l for d, _, l in pts["diff"]}
    gaps = [(d, gaps[d] - l) for d, _, l in pts["transformer"] if d in gaps]
    if bd != bt:
        cross = (ad / at) ** (1 / (bt - bd))  # N where at·N^bt = ad·N^bd
        lo, hi = min(n for _, n, _ in pts["transformer"]), max(n for _, n, _ in pts["transformer"])
        below = "DIFF" if ad * (cross / 2) ** bd < at * (cross / 2) ** bt else "the Transformer"
        above = "the Transformer" if below == "DIFF" else "DIFF"
        where = ("within the sizes measured" if lo <= cross <= hi else
                 f"{cross / hi:.3g}× the largest size measured ({hi:,}): an extrapolation the data cannot support, "
                 "not a prediction" if cross > hi else f"below the smallest size measured ({lo:,})")
        out.append(f"The DIFF − Transformer gap by size is {', '.join(f'{g:+.3f}' for _, g in gaps)} (dims "
                   f"{', '.join(str(d) for d, _ in gaps)}); the fits cross at N ≈ {cross:,.0f} non-embedding "
                   f"parameters, {where}; {below} is ahead below it and {above} above.\n")
    for a in ARCHS:
        ls = [(d, l) for d, _, l in pts[a]]
        flat = [(d0, d1) for (d0, l0), (d1, l1) in zip(ls, ls[1:]) if l1 >= l0]
        if flat:
            out.append(f"**{NAME[a]}'s loss does not fall with size** from dim " +
                       ", ".join(f"{d0} to {d1}" for d0, d1 in flat) + ": its learning rate, tuned at the sweep "
                       "size alone, may not suit the larger size, so its fit there understates it.\n")
    return out


def fewest_seeds(r, largest_only=False):
    """The fewest finished seeds of any (arch, size) a fit uses: a bootstrap over seeds decides nothing
    with fewer than stats.MIN_SEEDS (it then only resamples the same runs)."""
    counts = []
    for a in ARCHS:
        sizes = r.sizes(a)
        dims = [max(sizes)] if largest_only and sizes else sorted(sizes)
        counts += [sum(r.final_val(k) is not None for k in sizes[d].values()) for d in dims]
    return min(counts) if counts else 0


def bootstrap(r, fn, n=2000, seed=1):
    rng = random.Random(seed)
    vals = []
    for _ in range(n):
        v = fn(r, lambda xs: [rng.choice(xs) for _ in xs])[0]
        if v is not None and math.isfinite(v):
            vals.append(v)
    if len(vals) < n // 2:
        return None
    vals.sort()
    return vals[int(0.025 * len(vals))], vals[int(0.975 * len(vals)) - 1]


def train_hours(r):
    """The finished runs' training time by their logs' elapsed_s (a resumed process starts its clock again: each
    segment counts; two runs went side by side)."""
    total = 0.0
    for base in r.runs.values():
        last = 0.0
        with open(base + ".jsonl") as f:
            for line in f:
                try:
                    el = json.loads(line).get("elapsed_s")
                except ValueError:
                    continue
                if el is None:
                    continue
                if el < last:
                    total += last
                last = el
        total += last
    return total / 3600


def write(r, command):
    s = r.settings
    out = ["# Scaling on plain language modelling (the paper's Fig. 3a, 3b and Table 6's slices)\n",
           f"Written by `{command}` on {datetime.date.today().isoformat()} ({os.cpu_count()} cores"
           + f", {train_hours(r):.1f} h of training in all by the logs' clocks" + ") by tools/scaling.py; every verdict "
           "below is computed from the numbers in this file: *held* only where the 95% interval lies on the "
           "paper's side, *did not hold* where it lies on the other, *not resolved* otherwise.\n"]
    out.append("## Recipe\n")
    out.append(f"The State of the Union speeches (vocab {s['vocab']}), held-out speeches for validation; no needle "
               f"and no copy rows, no warm-up. {s['layers']} layers, context {s['seq']}, batch {s['batch']}, "
               f"{r.steps} AdamW steps ({r.steps * r.tokens_per_step:,} tokens; warmup 5%, cosine to 0.1×, weight "
               f"decay 0.1, clip 1.0) for every size and arch. DIFF has H heads of width d, the Transformer 2H of "
               f"d (the same projection shapes). Seeds {s['seeds']}; the same seed gives both archs the same "
               "batches.\n")
    # learning rates
    sweep = int(s["sweep_dim"])
    out.append(f"## Learning rate: each architecture at its own best (dim {sweep}, seed 1)\n")
    out.append("| lr | " + " | ".join(NAME[a] + " final val loss" for a in ARCHS) + " |")
    out.append("|---|---|---|")
    vals = {a: sweep_vals(r, a) for a in ARCHS}
    for lr in sorted(set(vals["diff"]) | set(vals["transformer"]), key=float):
        cells = []
        for a in ARCHS:
            v = vals[a].get(lr)
            c = "n/a" if v is None else "diverged" if math.isinf(v) else f"{v:.4f}"
            cells.append(f"**{c}**" if r.lr.get(a) == lr else c)
        out.append(f"| {lr}{'' if lr in s['lrs'].split() else ' (added)'} | " + " | ".join(cells) + " |")
    out.append("")
    if r.lr:
        out.append("Phase 2 trains each arch at its best (bold): " +
                   ", ".join(f"{NAME[a]} lr {r.lr.get(a, '?')}" for a in ARCHS) + ". The grid is "
                   f"{', '.join(s['lrs'].split())}; an lr marked *added* is one the stage tried because an arch's "
                   f"best lay at the edge of what it had tried (x2 or /2, at most {MAX_EXTEND} beyond the grid).\n")
        edge = [a for a in ARCHS if r.lr.get(a) in (min(vals[a], key=float), max(vals[a], key=float))]
        if edge:
            out.append("**The sweep does not bracket** the best learning rate of " + " and ".join(NAME[a] for a in edge)
                       + " (it is at the edge of the lrs tried), so that arch may do better at an lr outside them; "
                       "the comparisons below are fair only as far as the sweep reaches.\n")
    # Fig 3a
    out.append("## Scaling with parameters (paper Fig. 3a: the Transformer's loss with " + PAPER_PARAMS +
               " of the parameters)\n")
    frac, pts, fits = frac_params(r)
    if frac is None:
        out.append("Not enough finished sizes to fit.\n")
    else:
        out.append("| dim | non-emb. params (Transformer) | Transformer val loss | DIFF val loss | "
                   "DIFF − Transformer (per seed) |")
        out.append("|---|---|---|---|---|")
        for a_d, a_t in zip(sorted(r.sizes("diff").items()), sorted(r.sizes("transformer").items())):
            d, bd = a_d
            _, bt = a_t
            lt = [r.final_val(k) for k in bt.values()]
            ld = [r.final_val(k) for k in bd.values()]
            diff = mean_ci([r.final_val(bd[x]) - r.final_val(bt[x]) for x in sorted(set(bd) & set(bt))
                            if r.final_val(bd[x]) is not None and r.final_val(bt[x]) is not None])
            n = model_info(r.runs[next(iter(bt.values()))])["params_nonembed"]
            out.append(f"| {d} | {n:,} | {pm(lt)} | {pm(ld)} | {fmt_ci(diff, '{:+.4f}')} |")
        ci = bootstrap(r, frac_params)
        (at, bt_), (ad, bd_) = fits["transformer"], fits["diff"]
        out.append("")
        out.append(f"Fits: Transformer L = {at:.3f}·N^{bt_:.4f}, DIFF L = {ad:.3f}·N^{bd_:.4f}. DIFF reaches the "
                   f"Transformer's loss with **{100 * frac:.0f}%** of its non-embedding parameters (mean over the "
                   "sizes)" + (f", 95% bootstrap interval over seeds [{100 * ci[0]:.0f}%, {100 * ci[1]:.0f}%]"
                               if ci else "") + ".\n")
        v = verdict((frac - 1, ci[0] - 1, ci[1] - 1, fewest_seeds(r)) if ci else None, -1,
                    "DIFF needs fewer parameters for the same loss (Fig. 3a)", "Scaling")
        out.append(f"**Verdict:** the paper's claim (DIFF needs fewer parameters for the same loss) **{v}** here.\n")
        out += size_trend(pts, fits)
    # Fig 3b
    out.append("## Scaling with training tokens (paper Fig. 3b: " + PAPER_TOKENS + ")\n")
    ft, curves, fd = frac_tokens(r)
    if ft is None:
        out.append("The largest size is not finished for both archs.\n")
    else:
        fits, d = fd
        ci = bootstrap(r, frac_tokens)
        final_t = curves["transformer"][-1]
        out.append(f"At dim {d}, mean over seeds; power laws on the second half of the validation points: "
                   f"Transformer L = {fits['transformer'][0]:.3f}·D^{fits['transformer'][1]:.4f}, DIFF L = "
                   f"{fits['diff'][0]:.3f}·D^{fits['diff'][1]:.4f}.\n")
        out.append("| tokens | Transformer | DIFF |")
        out.append("|---|---|---|")
        for (n, lt), (_, ld) in zip(curves["transformer"], curves["diff"]):
            out.append(f"| {n:,} | {lt:.4f} | {ld:.4f} |")
        out.append("")
        out.append(f"DIFF reaches the Transformer's final loss ({final_t[1]:.4f} after {final_t[0]:,} tokens) after "
                   f"an estimated **{100 * ft:.0f}%** of its tokens" +
                   (f", 95% bootstrap interval over seeds [{100 * ci[0]:.0f}%, {100 * ci[1]:.0f}%]" if ci else "") +
                   (" (beyond the run: an extrapolation)" if ft > 1 else "") + ".\n")
        v = verdict((ft - 1, ci[0] - 1, ci[1] - 1, fewest_seeds(r, largest_only=True)) if ci else None, -1,
                    "DIFF needs fewer training tokens for the same loss (Fig. 3b)", "Scaling")
        out.append(f"**Verdict:** the paper's claim (DIFF needs fewer tokens) **{v}** here.\n")
    # loss slices
    out.append("## Table 6's slices: AR hits and others (eval ppl on the held-out speeches)\n")
    out.append("AR hits are targets whose bigram with the token before already occurred in the window "
               "(associative recall can predict them); others are the rest. The paper (1.4B models): Transformer "
               "0.898 / 3.272, DIFF 0.880 / 3.247: DIFF lower on both.\n")
    out.append("| dim | Transformer AR hit | DIFF AR hit | DIFF − Transformer | Transformer others | DIFF others | "
               "DIFF − Transformer |")
    out.append("|---|---|---|---|---|---|---|")
    verdicts = []
    for d in sorted(set(r.sizes("diff")) & set(r.sizes("transformer"))):
        bd, bt = r.sizes("diff")[d], r.sizes("transformer")[d]
        cols = []
        for sl in ("ar_hit", "others"):
            vt = {x: (r.ppl(k) or {}).get(sl, {}).get("nll") for x, k in bt.items()}
            vd = {x: (r.ppl(k) or {}).get(sl, {}).get("nll") for x, k in bd.items()}
            ci = mean_ci([vd[x] - vt[x] for x in sorted(set(vd) & set(vt)) if vd[x] is not None and vt[x] is not None])
            cols += [pm([v for v in vt.values() if v is not None]), pm([v for v in vd.values() if v is not None]),
                     fmt_ci(ci, "{:+.4f}")]
            if d == max(set(r.sizes("diff")) & set(r.sizes("transformer"))):
                verdicts.append((sl, ci))
        out.append(f"| {d} | " + " | ".join(cols) + " |")
    out.append("")
    if verdicts:
        name = {"ar_hit": "AR hits"}
        out.append("**Verdict** (the largest size): " + "; ".join(
            f"{name.get(sl, 'others')}: DIFF lower **"
            + verdict(ci, -1, f"DIFF's loss is lower on {name.get(sl, 'the other tokens')} (Table 6)", "Scaling") + "**"
            for sl, ci in verdicts)
            + ".\n")
    if draw(r, pts if frac is not None else None, fits if frac is not None else None, curves, fd):
        out.append("![validation loss against parameters and tokens](scaling.png)\n")
    path = os.path.join(r.dir, "SCALING.md")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(out))
    os.replace(path + ".tmp", path)
    write_verdicts(r.dir)  # for the report's summary (tools/report.py)
    return path


def draw(r, pts, fits, curves, fd):
    """scaling.png: loss against parameters (the fits) and against tokens (the largest size)."""
    if not pts and not curves:
        return False
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FormatStrFormatter
    except ImportError:
        return False
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    colour = {"transformer": "tab:blue", "diff": "tab:red"}
    if pts:
        for a in ARCHS:
            xs, ys = [n for _, n, _ in pts[a]], [l for _, _, l in pts[a]]
            ax[0].loglog(xs, ys, "o", color=colour[a], label=NAME[a])
            lo, hi = min(xs) * 0.8, max(xs) * 1.25
            gx = [lo * (hi / lo) ** (i / 50) for i in range(51)]
            ax[0].loglog(gx, [fits[a][0] * x ** fits[a][1] for x in gx], "-", color=colour[a], alpha=0.6)
        ax[0].set_xlabel("non-embedding parameters")
        ax[0].set_ylabel("validation loss (mean over seeds)")
        ax[0].set_title("loss vs parameters")
        ax[0].legend()
    if curves:
        for a in ARCHS:
            xs, ys = zip(*curves[a])
            ax[1].loglog(xs, ys, "o-", color=colour[a], label=NAME[a], ms=3)
        ax[1].set_xlabel("training tokens")
        ax[1].set_title(f"loss vs tokens (dim {fd[1]})")
        ax[1].legend()
    for x in ax:  # plain loss values on the log axis, not 5 × 10^0
        x.yaxis.set_major_formatter(FormatStrFormatter("%.1f"))
        x.yaxis.set_minor_formatter(FormatStrFormatter("%.1f"))
    fig.tight_layout()
    fig.savefig(os.path.join(r.dir, "scaling.png"), dpi=110)
    plt.close(fig)
    return True


def pm(xs, fmt="{:.4f}"):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "n/a"
    if len(xs) == 1:
        return fmt.format(xs[0])
    return (fmt + " ± " + fmt).format(statistics.fmean(xs), statistics.stdev(xs))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--choose-lr", action="store_true")
    ap.add_argument("--sweep-next", action="store_true")
    ap.add_argument("--command", default="make reproduce STAGE=scaling")
    args = ap.parse_args()
    r = Run(args.dir)
    if args.choose_lr:
        choose_lr(r)
        return
    if args.sweep_next:
        sweep_next(r)
        return
    print("scaling: " + write(r, args.command))


if __name__ == "__main__":
    main()
