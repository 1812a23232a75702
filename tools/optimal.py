#!/usr/bin/python3
"""The optimal stage's write-up (scripts/optimal.sh; docs/reproduce.md "The optimal stage"): one size
trained to about 20 tokens per non-embedding parameter, each arch at its own learning rate, 6 seeds; DIFF
without the per-head norm and DIFF V2 in the same table (the decomposition of DIFF's deficit); and DIFF and
the Transformer again at smaller token budgets (separate cosine runs, DIR/tokens-F) for the tokens claim.

- Loss: each arch's final validation loss at its own lr; per seed (the same seed: the same batches) each
  arch − the Transformer, and DIFF − DIFF without its norm, 95% t intervals (tools/stats.py's rule).
- Tokens: per seed, the tokens DIFF needs to reach the Transformer's full-budget loss, as log2 of the
  fraction of the full budget, read off DIFF's losses at the budgets by linear interpolation in log2
  tokens (past the budgets run, the nearest segment's line: such a value is marked extrapolated). The
  paper's 63.7% is log2 = −0.65.

usage: tools/optimal.py DIR [--command CMD]
       tools/optimal.py DIR --choose-lr | --sweep-next
"""
import argparse
import datetime
import glob
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scaling  # noqa: E402
from runs import model_info  # noqa: E402
from scaling import Run, final_losses, sweep_table  # noqa: E402
from stats import LEDGER, fmt_ci, mean_ci, paired, record, say, t_p, write_verdicts  # noqa: E402

ARCHS = ("transformer", "diff", "diffnonorm", "diff2")
NAME = {"transformer": "Transformer", "diff": "DIFF", "diffnonorm": "DIFF, no per-head norm", "diff2": "DIFF V2"}
PAPER_TOKENS = math.log2(0.637)


def open_run(d):
    return Run(d, ARCHS)


def params_of(r, arch):
    """Non-embedding parameters of ARCH's runs (one size: all alike), or None before any finished."""
    for (a, d, lr, s), base in sorted(r.runs.items()):
        if a == arch:
            try:
                return model_info(base)["params_nonembed"]
            except (KeyError, OSError, ValueError):
                continue
    return None


def budgets(r):
    """{fraction: Run} of the token-budget folders (DIR/tokens-F), with 1.0 the stage's own."""
    out = {1.0: r}
    for d in sorted(glob.glob(os.path.join(r.dir, "tokens-*"))):
        if os.path.exists(os.path.join(d, "settings.txt")):
            out[float(os.path.basename(d)[len("tokens-"):])] = Run(d, ARCHS)
    return out


def tokens_needed(points, target):
    """(log2 fraction, extrapolated) at which the piecewise-linear curve through POINTS [(log2 fraction, loss)],
    sorted by fraction, reaches TARGET; past the ends, the nearest segment's line. None with fewer than 2."""
    if len(points) < 2:
        return None
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if min(y0, y1) <= target <= max(y0, y1) and y0 != y1:
            return x0 + (target - y0) * (x1 - x0) / (y1 - y0), False
    (x0, y0), (x1, y1) = (points[-2], points[-1]) if target < points[-1][1] else (points[0], points[1])
    if y1 == y0:
        return None
    return x0 + (target - y0) * (x1 - x0) / (y1 - y0), True


def tokens_per_seed(r):
    """{seed: (log2 fraction, extrapolated)} of DIFF's tokens to the Transformer's full-budget loss."""
    bs = budgets(r)
    if len(bs) < 2:
        return {}
    full_t = final_losses(r, "transformer", r.lr.get("transformer", ""))
    curves = {}
    for f, rb in bs.items():
        for s, v in final_losses(rb, "diff", r.lr.get("diff", "")).items():
            curves.setdefault(s, []).append((math.log2(f), v))
    out = {}
    for s, pts in curves.items():
        if s in full_t and len(pts) == len(bs):
            got = tokens_needed(sorted(pts), full_t[s])
            if got:
                out[s] = got
    return out


def conversion(r, w):
    """The conversion section (phase 4: DIR/conversion and DIR/tokens-1.25), where it has run."""
    cd, td = os.path.join(r.dir, "conversion"), os.path.join(r.dir, "tokens-1.25")
    if not os.path.exists(os.path.join(cd, "settings.txt")):
        return
    rc = Run(cd, ("convdiff", "contransformer"))
    rs = Run(td, ARCHS) if os.path.exists(os.path.join(td, "settings.txt")) else None
    lt, ld = r.lr.get("transformer", ""), r.lr.get("diff", "")
    conv = final_losses(rc, "convdiff", lt)
    cont = final_losses(rc, "contransformer", lt)
    scratch = final_losses(rs, "diff", ld) if rs else {}
    extra = rc.steps * rc.tokens_per_step
    w("\n## A trained Transformer converted to DIFF (axolotl's recipe: `difftx convert --to-diff`)\n")
    w(f"The Transformer's seeds trained on for {extra:,} more tokens (a quarter of its budget, a fresh warmup and "
      f"cosine at its lr {lt}, the same batches both ways): **converted** to DIFF (each head a DIFF head whose "
      "second map starts silent, phased in by `--diff-warmup` over the first fifth: docs/huggingface.md), and "
      f"**continued** as the Transformer; beside them DIFF **from scratch** for the same total tokens at its lr "
      f"{ld}. The converted model keeps the Transformer's head count"
      + (f" ({params_of(rc, 'convdiff'):,} non-embedding parameters against the Transformer's "
         f"{params_of(rc, 'contransformer'):,})" if params_of(rc, "convdiff") and params_of(rc, "contransformer") else "")
      + ".\n")
    w("| model | seeds | final validation loss (mean [95% CI]) | per seed |")
    w("|---|---:|---|---|")
    for label, vs in (("converted to DIFF, trained on", conv), ("the Transformer, trained on", cont),
                      ("DIFF from scratch, the same total tokens", scratch)):
        w(f"| {label} | {len(vs)} | {fmt_ci(mean_ci(list(vs.values())), '{:.4f}')} | "
          + ", ".join(f"{v:.4f}" for _, v in sorted(vs.items())) + " |")
    w("\n| comparison (per seed) | difference [95% CI] | verdict |")
    w("|---|---|---|")
    for label, other, key in (("converted − continued", cont, "conversion-continue"),
                              ("converted − DIFF from scratch", scratch, "conversion-scratch")):
        per = paired(other, conv)
        ci = mean_ci(per)
        w(f"| {label} | {fmt_ci(ci, '{:+.4f}')} | {say(record(key, ci, t_p(per), per, -1, 'OPTIMAL.md'))} |")
    w("")


def write(r, command):
    LEDGER.clear()
    L = []
    w = L.append
    dim, steps = int(r.settings["sweep_dim"]), r.steps
    tokens = steps * r.tokens_per_step
    pt = params_of(r, "transformer")
    w("# One size trained properly: DIFF, its ablations and the Transformer at 20 tokens per parameter\n")
    w(f"Written by tools/optimal.py on {datetime.date.today()} from `{command}` (scripts/optimal.sh). Plain language "
      f"modelling (the State of the Union speeches) at width {dim}, {r.settings['layers']} layers, heads of "
      f"{r.settings['head_width']}, context {r.settings['seq']}, {r.settings['batch']} rows, {steps} steps: "
      f"{tokens:,} tokens" + (f", {tokens / pt:.1f} per non-embedding parameter of the Transformer ({pt:,})" if pt else "")
      + ". Each arch at its own learning rate (the lowest final validation loss of a sweep, seed 1). DIFF has H heads "
      "(values 2d), the Transformer and V2 2H (V2: 4H query heads). Differences are paired by seed (the same "
      "batches), 95% t intervals; verdicts by tools/stats.py's rule.\n")
    w("## Learning rates (seed 1, final validation loss)\n")
    for line in sweep_table(r, {a: NAME[a] for a in ARCHS}):
        w(line)
    w("\n## Validation loss at each arch's learning rate\n")
    loss = {a: final_losses(r, a, r.lr.get(a, "")) for a in ARCHS}
    w("| arch | lr | non-embedding parameters | seeds | final validation loss (mean [95% CI]) | per seed |")
    w("|---|---|---:|---:|---|---|")
    for a in ARCHS:
        vs, p = loss[a], params_of(r, a)
        w(f"| {NAME[a]} | {r.lr.get(a, '–')} | {f'{p:,}' if p else '–'} | {len(vs)} | "
          f"{fmt_ci(mean_ci(list(vs.values())), '{:.4f}')} | " + ", ".join(f"{v:.4f}" for _, v in sorted(vs.items()))
          + " |")
    w("\nThe decomposition of DIFF's deficit (each row per seed, the same batches):\n")
    w("| comparison | difference [95% CI] | the paper says | verdict |")
    w("|---|---|---|---|")
    for a, b, sign, key in (("diff", "transformer", -1, "optimal-loss"), ("diffnonorm", "transformer", 0, None),
                            ("diff", "diffnonorm", -1, "optimal-norm"), ("diff2", "transformer", -1, "optimal-v2")):
        per = paired(loss[b], loss[a])
        ci = mean_ci(per)
        t = (f"both at lr {r.lr.get(a)}" if r.lr.get(a) == r.lr.get(b) else
             f"{NAME[a]} at lr {r.lr.get(a, '?')}, {NAME[b]} at {r.lr.get(b, '?')}: each at its own best")
        v = say(record(key, ci, t_p(per), per, sign, "OPTIMAL.md", terms=t)) if key else "(no claim)"
        w(f"| {NAME[a]} − {NAME[b]} | {fmt_ci(ci, '{:+.4f}')} | {'lower' if sign < 0 else '–'} | {v} |")
    bs = budgets(r)
    w("\n## Tokens (paper Fig. 3b: the Transformer's loss with 63.7% of the tokens)\n")
    if len(bs) < 2:
        w("Not run yet: `make reproduce STAGE=optimal-tokens` trains DIFF and the Transformer at 1/4 and 1/2 of the "
          "tokens.\n")
        record("optimal-tokens", None, None, [], -1, "OPTIMAL.md")
    else:
        w("Separate cosine runs at each budget (the steps scaled, everything else the same), each arch at its lr. "
          "Final validation loss (mean [95% CI] over seeds):\n")
        w("| budget | tokens | " + " | ".join(NAME[a] for a in ("transformer", "diff")) + " |")
        w("|---|---:|---|---|")
        for f, rb in sorted(bs.items()):
            cells = [fmt_ci(mean_ci(list(final_losses(rb, a, r.lr.get(a, "")).values())), "{:.4f}")
                     for a in ("transformer", "diff")]
            w(f"| {f:g} | {rb.steps * rb.tokens_per_step:,} | " + " | ".join(cells) + " |")
        per = tokens_per_seed(r)
        xs = [v for _, (v, _) in sorted(per.items())]
        ci = mean_ci(xs)
        extra = sum(1 for v, e in per.values() if e)
        rec = record("optimal-tokens", ci, t_p(xs), xs, -1, "OPTIMAL.md",
                     terms=f"lr {r.lr.get('diff')} (DIFF) and {r.lr.get('transformer')} (Transformer)")
        w(f"\nPer seed, the tokens DIFF needs to reach the Transformer's full-budget loss, as log2 of the full budget "
          f"(0: the same tokens; the paper's 63.7% is {PAPER_TOKENS:+.2f}): "
          + ", ".join(f"{v:+.2f}{'*' if e else ''}" for _, (v, e) in sorted(per.items()))
          + (f" (* extrapolated past the budgets run: {extra} of {len(per)})" if extra else "")
          + f". Mean {fmt_ci(ci, '{:+.2f}')}: {say(rec)}.\n")
    conversion(r, w)
    with open(os.path.join(r.dir, "OPTIMAL.md.tmp"), "w") as f:
        f.write("\n".join(L) + "\n")
    os.replace(os.path.join(r.dir, "OPTIMAL.md.tmp"), os.path.join(r.dir, "OPTIMAL.md"))
    write_verdicts(r.dir)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--command", default="make reproduce STAGE=optimal")
    ap.add_argument("--choose-lr", action="store_true")
    ap.add_argument("--sweep-next", action="store_true")
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.run, "settings.txt")):
        sys.exit(f"optimal: {a.run}/settings.txt: no such file (not a run folder)")
    r = open_run(a.run)
    if a.choose_lr:
        scaling.choose_lr(r)
    elif a.sweep_next:
        scaling.sweep_next(r)
    else:
        write(r, a.command)


if __name__ == "__main__":
    main()
