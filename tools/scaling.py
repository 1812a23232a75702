#!/usr/bin/python3
"""The scaling stage's analysis (scripts/scaling.sh; make reproduce
STAGE=scaling): plain language modelling, each arch at its own learning
rate, 4 sizes x 3 seeds. Writes DIR/SCALING.md with every verdict computed
from the numbers here.

- Learning rate: each arch's final validation loss at the sweep size for
  every lr; its best is the one phase 2 used (--choose-lr prints them;
  --sweep-next the lrs to add while a best lies at the edge of those tried).
- Fig 3a: per size the validation loss (mean over seeds) and DIFF −
  Transformer per seed; the claim's test is that gap averaged over the sizes
  per seed (the two archs are parameter-matched at each size), paired t.
  A power law L = a·N^b per arch (least squares in log–log, N non-embedding
  params) is drawn; the DIFF parameters that reach a Transformer's loss are
  read off DIFF's measured sizes, never beyond them.
- Fig 3b: at the largest size, validation loss against tokens (mean over
  seeds); the test is DIFF − Transformer over the second half of the
  validation points per seed; the tokens DIFF needs for a Transformer loss
  are read off DIFF's measured curve, never beyond it.
- Table 6's slices (AR hits, others) per size: DIFF − Transformer per seed
  (the same seed: the same batches), paired t; judged at the largest size.
Verdicts: tools/stats.py (the primary claims, Fig. 3a and 3b, are corrected
with the others in REPORT.md).

usage: tools/scaling.py DIR [--command CMD]
       tools/scaling.py DIR --choose-lr | --sweep-next
"""
import argparse
import datetime
import functools
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runs import finished_models, fit_power, model_info, read_log, read_settings  # noqa: E402
from stats import fmt_ci, fmt_p, mean_ci, paired, record, say, t_p, write_verdicts  # noqa: E402

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


def runs_at(r, arch, lr):
    """{seed: key} of ARCH's finished runs at LR at the stage's sweep size (the v2 and optimal stages' one size)."""
    dim = int(r.settings["sweep_dim"])
    return {s: k for k in r.runs for (a, d, l_, s) in [k] if (a, d, l_) == (arch, dim, lr)}


def final_losses(r, arch, lr):
    """{seed: final validation loss} of ARCH's finished runs at LR (a diverged run has none)."""
    return {s: v for s, v in ((s, r.final_val(k)) for s, k in runs_at(r, arch, lr).items()) if v is not None}


def sweep_table(r, names):
    """The lines of a markdown table of the sweep (seed 1, final validation loss per lr; 'diverged', or '–' not
    run) with each arch's chosen lr; NAMES: {arch: its label}, in the table's order."""
    dim = int(r.settings["sweep_dim"])
    lrs = sorted({float(lr) for (a, d, lr, s) in r.runs if s == 1 and d == dim})
    out = ["| arch | " + " | ".join(lr_name(x) for x in lrs) + " | chosen |", "|---|" + "---:|" * len(lrs) + "---|"]
    for a, label in names.items():
        try:
            vals = sweep_vals(r, a)
        except SystemExit:
            vals = {}
        cells = ["–" if vals.get(lr_name(x)) is None else "diverged" if math.isinf(vals[lr_name(x)])
                 else f"{vals[lr_name(x)]:.4f}" for x in lrs]
        out.append(f"| {label} | " + " | ".join(cells) + f" | {r.lr.get(a, '–')} |")
    return out


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


def size_points(r):
    """{arch: [(dim, non-embedding params, mean final val loss over seeds)]} at the arch's chosen lr."""
    pts = {}
    for a in ARCHS:
        pts[a] = []
        for d, by_seed in sorted(r.sizes(a).items()):
            vals = [v for v in (r.final_val(k) for k in by_seed.values()) if v is not None]
            if vals:
                n = model_info(r.runs[next(iter(by_seed.values()))])["params_nonembed"]
                pts[a].append((d, n, statistics.fmean(vals)))
    return pts


def params_gaps(r):
    """{seed: mean over the sizes of DIFF − Transformer final val loss}, the sizes both archs finished for that
    seed. Each DIFF model has its Transformer's parameters (to 0.1%), so where both losses fall with size, "DIFF
    needs fewer parameters for the same loss" is "DIFF's loss is lower at each matched size": the test of Fig. 3a
    reads no fit."""
    out = {}
    sd, st = r.sizes("diff"), r.sizes("transformer")
    for s in sorted({s for by in sd.values() for s in by}):
        g = [r.final_val(sd[d][s]) - r.final_val(st[d][s]) for d in sorted(set(sd) & set(st))
             if s in sd[d] and s in st[d] and r.final_val(sd[d][s]) is not None and r.final_val(st[d][s]) is not None]
        if g:
            out[s] = statistics.fmean(g)
    return out


def token_curves(r):
    """(dim, {arch: {seed: {tokens: val loss}}}) at the largest size both archs have."""
    dims = sorted(set(r.sizes("diff")) & set(r.sizes("transformer")))
    if not dims:
        return None, None
    d = dims[-1]
    return d, {a: {s: {st * r.tokens_per_step: v for st, v in read_log_val(r.runs[k] + ".jsonl")}
                   for s, k in r.sizes(a)[d].items()} for a in ARCHS}


def second_half(points):
    return points[len(points) // 2:]


def tokens_gaps(curves):
    """{seed: mean of DIFF − Transformer val loss over the second half of the validation points both have}: lower
    all along the curve's settled part is "fewer tokens for the same loss" (Fig. 3b), with no fit read."""
    out = {}
    for s in sorted(set(curves["diff"]) & set(curves["transformer"])):
        common = sorted(set(curves["diff"][s]) & set(curves["transformer"][s]))
        half = second_half(common)
        if half:
            out[s] = statistics.fmean(curves["diff"][s][t] - curves["transformer"][s][t] for t in half)
    return out


def mean_curve(by_seed):
    """[(tokens, mean val loss)] over the points every seed has."""
    if not by_seed:
        return []
    common = sorted(set.intersection(*[set(c) for c in by_seed.values()]))
    return [(t, statistics.fmean(c[t] for c in by_seed.values())) for t in common]


def reach(curve, loss):
    """The x (tokens, parameters) at which a measured curve [(x, mean loss)] first reaches LOSS, interpolated
    log-log between its points, or None where it does not within them: a curve is never read beyond its data."""
    prev = None
    for t, l in curve:
        if l <= loss:
            if prev is None or prev[1] == l:
                return t
            t0, l0 = prev
            f = (math.log(l0) - math.log(loss)) / (math.log(l0) - math.log(l))
            return math.exp(math.log(t0) + f * (math.log(t) - math.log(t0)))
        prev = (t, l)
    return None


def params_reads(pts):
    """Each Transformer size's loss read off DIFF's measured sizes (interpolated between them, never beyond):
    [(dim, params, loss, DIFF params or None)]."""
    along = [(n, l) for _, n, l in pts["diff"]]
    return [(d, n, lt, reach(along, lt)) for d, n, lt in pts["transformer"]]


def size_trend(pts, fits):
    """What the sizes say beyond the verdict: whether the fits cross inside the sizes measured (never where
    outside), and any size at which an arch's loss does not fall (its lr, tuned at the sweep size alone, may
    not suit it)."""
    out = []
    (at, bt), (ad, bd) = fits["transformer"], fits["diff"]
    gaps = {d: l for d, _, l in pts["diff"]}
    gaps = [(d, gaps[d] - l) for d, _, l in pts["transformer"] if d in gaps]
    lo, hi = min(n for _, n, _ in pts["transformer"]), max(n for _, n, _ in pts["transformer"])
    cross = (ad / at) ** (1 / (bt - bd)) if bd != bt else None  # N where at·N^bt = ad·N^bd
    out.append(f"The DIFF − Transformer gap by size is {', '.join(f'{g:+.3f}' for _, g in gaps)} (dims "
               f"{', '.join(str(d) for d, _ in gaps)}); " +
               (f"the two fits cross at N ≈ {cross:,.0f}, inside the sizes measured.\n" if cross and lo <= cross <= hi
                else "the two fits do not cross inside the sizes measured (where they would beyond them is an "
                     "extrapolation this data cannot support, so it is not given).\n"))
    for a in ARCHS:
        ls = [(d, l) for d, _, l in pts[a]]
        flat = [(d0, d1) for (d0, l0), (d1, l1) in zip(ls, ls[1:]) if l1 >= l0]
        if flat:
            out.append(f"**{NAME[a]}'s loss does not fall with size** from dim " +
                       ", ".join(f"{d0} to {d1}" for d0, d1 in flat) + ": its learning rate, tuned at the sweep "
                       "size alone, may not suit the larger size.\n")
    return out


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
           "below is computed from the numbers in this file by tools/stats.py's rule (docs/reproduce.md, \"How a "
           "verdict is reached\"): *held* only where the two-sided test at 0.05 rejects on the paper's side, *did "
           "not hold* where it rejects on the other, *not resolved* otherwise; Fig. 3a and 3b are two of the "
           "paper's primary claims, whose verdicts REPORT.md gives after Holm's correction.\n"]
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
    pts = size_points(r)
    fits = None
    if any(len(pts[a]) < 2 for a in ARCHS):
        out.append("Not enough finished sizes to compare.\n")
    else:
        fits = {a: fit_power([n for _, n, _ in pts[a]], [l for _, _, l in pts[a]]) for a in ARCHS}
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
        out.append("")
        gaps = params_gaps(r)
        rec = record("params", mean_ci(list(gaps.values())), t_p(list(gaps.values())), list(gaps.values()), -1,
                     "SCALING.md")
        out.append("The test reads no fit: each DIFF model has its Transformer's parameters (to 0.1%), so, where "
                   "both losses fall with size, needing fewer parameters for the same loss is a lower loss at each "
                   "matched size. Per seed, DIFF − Transformer averaged over the sizes: "
                   f"{', '.join(f'{g:+.4f}' for g in gaps.values())}; mean {fmt_ci(rec['ci'], '{:+.4f}')}, "
                   f"two-sided p = {fmt_p(rec['p'])} (paired t).\n")
        out.append(f"**Verdict:** the paper's claim (DIFF needs fewer parameters for the same loss): {say(rec)}.\n")
        (at, bt_), (ad, bd_) = fits["transformer"], fits["diff"]
        reads = params_reads(pts)
        out.append("Read off DIFF's measured sizes (interpolated log–log between them, never beyond): the "
                   "Transformer's loss at " + "; ".join(
                       f"dim {d} ({lt:.4f}): " + (f"DIFF reaches it with {nd:,.0f} parameters, {100 * nd / n:.0f}% "
                                                  "of the Transformer's" if nd else
                                                  "not reached within the measured sizes")
                       for d, n, lt, nd in reads) + f". The power laws of the figure (least squares in log–log): "
                   f"Transformer L = {at:.3f}·N^{bt_:.4f}, DIFF L = {ad:.3f}·N^{bd_:.4f}.\n")
        out += size_trend(pts, fits)
    # Fig 3b
    out.append("## Scaling with training tokens (paper Fig. 3b: " + PAPER_TOKENS + ")\n")
    d, per = token_curves(r)
    curves = None
    if d is None or not all(per[a] for a in ARCHS):
        out.append("The largest size is not finished for both archs.\n")
    else:
        curves = {a: mean_curve(per[a]) for a in ARCHS}
        out.append(f"At dim {d}, mean over seeds.\n")
        out.append("| tokens | Transformer | DIFF |")
        out.append("|---|---|---|")
        dc = dict(curves["diff"])
        for n, lt in curves["transformer"]:
            out.append(f"| {n:,} | {lt:.4f} | " + (f"{dc[n]:.4f}" if n in dc else "n/a") + " |")
        out.append("")
        gaps = tokens_gaps(per)
        rec = record("tokens", mean_ci(list(gaps.values())), t_p(list(gaps.values())), list(gaps.values()), -1,
                     "SCALING.md")
        out.append("The test reads no fit: needing fewer tokens for the same loss is a lower loss at the same "
                   "tokens. Per seed, DIFF − Transformer averaged over the second half of the validation points "
                   f"(the curves' settled part): {', '.join(f'{g:+.4f}' for g in gaps.values())}; mean "
                   f"{fmt_ci(rec['ci'], '{:+.4f}')}, two-sided p = {fmt_p(rec['p'])} (paired t).\n")
        out.append(f"**Verdict:** the paper's claim (DIFF needs fewer tokens): {say(rec)}.\n")
        reads = [(t, lt, reach(curves["diff"], lt)) for t, lt in second_half(curves["transformer"])]
        got = [(t, lt, td) for t, lt, td in reads if td]
        final_t = curves["transformer"][-1]
        out.append(f"Read off DIFF's measured mean curve (interpolated between its points, never beyond them): of "
                   f"the Transformer's losses at the second half's {len(reads)} points, DIFF reaches "
                   f"{len(got)} within the run" +
                   (" (" + "; ".join(f"{lt:.4f}, the Transformer's at {t:,} tokens: {100 * td / t:.0f}% of them"
                                     for t, lt, td in got) + ")" if got else "") +
                   f"; the Transformer's final loss ({final_t[1]:.4f} after {final_t[0]:,} tokens) is " +
                   (f"reached after {100 * reads[-1][2] / final_t[0]:.0f}% of its tokens" if reads[-1][2] else
                    f"not reached within the measured tokens (DIFF's lowest: {min(l for _, l in curves['diff']):.4f})")
                   + ".\n")
    # loss slices
    out.append("## Table 6's slices: AR hits and others (eval ppl on the held-out speeches)\n")
    out.append("AR hits are targets whose bigram with the token before already occurred in the window "
               "(associative recall can predict them); others are the rest. The paper (1.4B models): Transformer "
               "0.898 / 3.272, DIFF 0.880 / 3.247: DIFF lower on both.\n")
    out.append("| dim | Transformer AR hit | DIFF AR hit | DIFF − Transformer | Transformer others | DIFF others | "
               "DIFF − Transformer |")
    out.append("|---|---|---|---|---|---|---|")
    verdicts = []
    both = sorted(set(r.sizes("diff")) & set(r.sizes("transformer")))
    for d in both:
        bd, bt = r.sizes("diff")[d], r.sizes("transformer")[d]
        cols = []
        for sl in ("ar_hit", "others"):
            vt = {x: (r.ppl(k) or {}).get(sl, {}).get("nll") for x, k in bt.items()}
            vd = {x: (r.ppl(k) or {}).get(sl, {}).get("nll") for x, k in bd.items()}
            per_seed = paired(vt, vd)
            ci = mean_ci(per_seed)
            cols += [pm([v for v in vt.values() if v is not None]), pm([v for v in vd.values() if v is not None]),
                     fmt_ci(ci, "{:+.4f}")]
            if d == both[-1]:
                verdicts.append((sl, ci, per_seed))
        out.append(f"| {d} | " + " | ".join(cols) + " |")
    out.append("")
    if verdicts:
        name = {"ar_hit": "AR hits"}
        out.append("**Verdict** (the largest size, paired t): " + "; ".join(
            f"{name.get(sl, 'others')}: DIFF lower " +
            say(record("ar-hits" if sl == "ar_hit" else "ar-others", ci, t_p(per_seed), per_seed, -1, "SCALING.md"))
            for sl, ci, per_seed in verdicts) + ".\n")
    if draw(r, pts if fits else None, fits, curves, d):
        out.append("![validation loss against parameters and tokens](scaling.png)\n")
    path = os.path.join(r.dir, "SCALING.md")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(out))
    os.replace(path + ".tmp", path)
    write_verdicts(r.dir)  # for the report's summary (tools/report.py)
    return path


def draw(r, pts, fits, curves, dim):
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
        ax[1].set_title(f"loss vs tokens (dim {dim})")
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
