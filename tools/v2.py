#!/usr/bin/python3
"""The V2 stage's analysis (scripts/v2.sh; make reproduce STAGE=v2): DIFF V2
beside DIFF V1 and the Transformer, and V2's cheap ablations, on plain
language modelling under the scaling stage's recipe. Writes DIR/V2.md with
every verdict computed from the numbers here (tools/stats.py's rules).

- Learning rate: each arch's final validation loss at every lr of the sweep
  (seed 1); its best is the lr of its other runs (--choose-lr prints them,
  --sweep-next the lrs to add while a best lies at the edge).
- Loss: the final validation loss of each arch at its own lr, 3 seeds; per
  seed (the same seed: the same batches) V2 − Transformer, V2 − V1 and each
  ablation − V2, 95% t intervals.
- Stability: every arch at 4x the Transformer's lr (DIR/high), then, while
  the Transformer stays stable there (no seed diverged), at 8x (DIR/high8)
  and 16x (DIR/high16). A gradient-norm spike is a step after the warm-up
  whose pre-clip norm exceeds SPIKE x the median of the WINDOW steps before
  it; per run the count, the largest ratio, and whether the loss became
  non-finite (a diverged run). The verdicts come from one multiple only: the
  first at which the Transformer is unstable, else the highest that ran.
- Outliers: `difftx eval outliers` of each model at its own lr: the largest
  |attention logit| and |hidden value| (Table 5's Top-1), compared as log10
  ratios per seed.
- Retrieval (make reproduce STAGE=v2-needle): V2 trained under the main
  stage's retrieval recipe beside that stage's DIFF and Transformer models
  (MAIN, default DIR's parent folder): multi-needle accuracy over the grid
  per seed, how many seeds retrieve, and the attention on the answer. V2
  claims nothing about retrieval, so these are reported without verdicts.

usage: tools/v2.py DIR [--command CMD] [--main MAIN]
       tools/v2.py DIR --choose-lr | --sweep-next
       tools/v2.py DIR --unstable MULT   "yes" when the Transformer diverged in a
                                         seed at MULT x its lr, "no" when none of
                                         its 3 seeds did, "unfinished" before
"""
import argparse
import datetime
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runs import read_entries, read_settings  # noqa: E402
from scaling import Run, choose_lr, final_losses, lr_name, runs_at, sweep_next, sweep_table  # noqa: E402
from report import mass_all, needle_table  # noqa: E402
from runs import model_info  # noqa: E402
from stats import (LEDGER, bounded_diff_ci, bounded_diff_p, bounded_mean_ci, fmt_ci, mean_ci, paired,  # noqa: E402
                   paired_ci, record, say, t_p, write_verdicts)

ARCHS = ("transformer", "diff", "diff2", "diff2lin", "diff2none")
NAME = {"transformer": "Transformer", "diff": "DIFF V1", "diff2": "DIFF V2", "diff2lin": "V2, λ without sigmoid",
        "diff2none": "V2, no λ"}
SPIKE, WINDOW = 3.0, 50


def open_run(d):
    return Run(d, ARCHS)


MULTS = (4, 8, 16)  # the stability phase's multiples of the Transformer's lr, in the order they run
N_SEEDS = 3


def high_lr(r, mult):
    return lr_name(mult * float(r.lr["transformer"]))


def high_dir(mult):
    return "high" if mult == MULTS[0] else f"high{mult}"


def open_high(r, mult):
    """The stability runs at MULT x the Transformer's lr, or None before they started."""
    d = os.path.join(r.dir, high_dir(mult))
    return Run(d, ARCHS) if os.path.exists(os.path.join(d, "settings.txt")) else None


def transformer_unstable(r, mult):
    """True when a seed of the Transformer diverged at MULT, False when all N_SEEDS finished
    without, None while some have not finished."""
    if "transformer" not in r.lr:
        return None
    rh = open_high(r, mult)
    runs = runs_at(rh, "transformer", high_lr(r, mult)) if rh else {}
    res = [spikes(rh.runs[k], r.steps // 20) for k in runs.values()]
    if any(x[3] for x in res):
        return True
    done = sum(rh.final_val(k) is not None for k in runs.values()) if rh else 0
    return False if done >= N_SEEDS else None


def deciding_mult(r):
    """The multiple whose runs give the stability verdicts (module docstring), or None."""
    ran = [m for m in MULTS if "transformer" in r.lr and open_high(r, m)]
    for m in ran:
        if transformer_unstable(r, m):
            return m
    return ran[-1] if ran else None


def spikes(base, warmup):
    """(count, largest ratio, last step, diverged) of one run's gradient norms (module docstring)."""
    norms = [(s, e["grad_norm"]) for s, e in read_entries(base + ".jsonl") if e.get("grad_norm") is not None]
    count, worst = 0, 1.0
    for i, (s, g) in enumerate(norms):
        if s <= warmup or i < WINDOW:
            continue
        med = statistics.median(x for _, x in norms[i - WINDOW:i])
        if not math.isfinite(g) or (med > 0 and g > SPIKE * med):
            count += 1
            worst = max(worst, g / med if med > 0 and math.isfinite(g) else math.inf)
    info = base + ".info.json"
    diverged = os.path.exists(info) and json.load(open(info)).get("diverged", False)
    return count, worst, norms[-1][0] if norms else 0, diverged


STABILITY_CLAIMS = [("diff2", "transformer", -1, "spikes", "v2-spikes-tr"), ("diff2", "diff", -1, "spikes", "v2-spikes-v1"),
                    ("diff2lin", "diff2", +1, "spikes", "v2-lin-spikes"),
                    ("diff2", "transformer", -1, "diverged", "v2-diverge")]


def params_of(r, arch):
    """Non-embedding parameters of ARCH's runs (all sizes alike at the stage's one size), or None."""
    for (a, d, lr, s), base in sorted(r.runs.items()):
        if a == arch:
            return model_info(base)["params_nonembed"]
    return None


def terms(r, a, b, lr=None):
    """The terms of a comparison of A with B, beside its verdict: the learning rate of each (LR: the one both
    ran at) and A's parameters against B's where they differ."""
    pa, pb = params_of(r, a), params_of(r, b)
    if lr:
        t = f"both at lr {lr}"
    elif r.lr.get(a) == r.lr.get(b):
        t = f"both at lr {r.lr.get(a)}"
    else:
        t = (f"{NAME[a]} at lr {r.lr.get(a, '?')}, {NAME[b]} at {r.lr.get(b, '?')}: each at its own best of the "
             "sweep, so the comparison is of each at its best")
    if pa and pb and pa != pb:
        t += f"; {NAME[a]} has {100 * (pa / pb - 1):+.1f}% non-embedding parameters ({pa:,} vs {pb:,})"
    return t


def stability_comparisons(r, w, mult, decide, spk, div, loss):
    """Writes (through W) the paired comparisons at multiple MULT: the paper's claims (verdicts only at DECIDE,
    the deciding multiple: module docstring), then V2's final loss against the others' there (no claim). A
    divergence is a run's 0 or 1: a bounded quantity (tools/stats.py)."""
    w(f"\n| comparison at {mult or '–'}x (per seed) | difference [95% CI] | paper | verdict |")
    w("|---|---|---|---|")
    lr = high_lr(r, mult) if mult and "transformer" in r.lr else None
    for a, b, sign, what, key in STABILITY_CLAIMS:
        x, y = div.get(b, {}), div.get(a, {})
        if what == "spikes":
            ci, p = paired_ci(spk.get(b, {}), spk.get(a, {})), t_p(paired(spk.get(b, {}), spk.get(a, {})))
            per = paired(spk.get(b, {}), spk.get(a, {}))
        else:
            ones = {s: 1 for s in set(x) | set(y)}
            ci, p, per = bounded_diff_ci(x, ones, y, ones), bounded_diff_p(x, ones, y, ones), paired(x, y)
        t = terms(r, a, b, lr)
        v = (say(record(key, ci, p, per, sign, "V2.md stability", terms=t)) + f" ({t})" if mult == decide
             else f"(verdicts at {decide}x)")
        w(f"| {NAME[a]} − {NAME[b]}: {what} per run | {fmt_ci(ci, '{:+.2f}')} | {'fewer' if sign < 0 else 'more'} "
          f"| {v} |")
    # how well each arch still trains at that lr: measured, no claim of the paper's to judge
    for a, b in [("diff2", "transformer"), ("diff2", "diff")] if loss else []:
        ci = paired_ci(loss.get(b, {}), loss.get(a, {}))
        w(f"| {NAME[a]} − {NAME[b]}: final validation loss | {fmt_ci(ci, '{:+.4f}')} | – | (no claim) |")


def outliers(r, key):
    p = os.path.join(r.dir, "eval", "outliers-" + os.path.basename(r.runs[key]) + ".json")
    if not os.path.exists(p):
        return None
    j = json.load(open(p))
    return j["attention_logits"]["top1"], j["hidden_states"]["top1"]


def load_eval(main, name):
    p = os.path.join(main, "eval", name + ".json")
    return json.load(open(p)) if os.path.exists(p) else None


def section_retrieval(main, w):
    """V2 under the main stage's retrieval recipe (module docstring), from MAIN/eval."""
    archs = ("transformer", "diff", "diff2")
    seeds = (1, 2, 3)
    w("\n## Retrieval under the main stage's recipe (`make reproduce STAGE=v2-needle`)\n")
    tabs = {a: {s: needle_table(load_eval(main, f"needle-{a}-s{s}") or {}) for s in seeds} for a in archs}
    if not any(tabs["diff2"].values()):
        w("Not yet run: `make reproduce STAGE=v2-needle` trains V2 under the main stage's recipe (copy warm-up, "
          "then 60% multi-needle rows) beside that stage's DIFF and Transformer models and evaluates its "
          "needles and attention on the answer.")
        return
    keys = sorted({k for a in archs for t in tabs[a].values() for k in t})
    grid = {a: {s: statistics.fmean(t[k][0] for k in keys if k in t) for s, t in tabs[a].items() if t} for a in archs}
    queries = {a: {s: sum(e.get("queries") or 0 for e in (load_eval(main, f"needle-{a}-s{s}") or {}).get("table2", []))
                   for s in grid[a]} for a in archs}
    one = {a: {s: t[(1, 1)][0] for s, t in tabs[a].items() if (1, 1) in t} for a in archs}
    sp = os.path.join(main, "settings.txt")
    ms = read_settings(sp) if os.path.exists(sp) else {}
    size = f"dim {ms['dims'].split()[-1]}, context {ms['seq']}, {ms['layers']} layers; " if ms.get("dims") else ""
    w(f"The main stage's models ({size}docs/reproduce.md \"The main stage\") and V2 "
      "trained the same way (the same warm-up on copy documents, the same needle mixture, the same seeds: the "
      "same batches), V2 with the Transformer's 2H heads as output heads. Needle accuracy per query averaged "
      "over the Table 2 grid (N, R) and depths, per seed; a model retrieves when its N = 1 accuracy is at least "
      "0.5. The paper makes no retrieval claim for V2, so the differences carry no verdict.\n")
    w("The answer's share of the last prompt position's attention (`difftx eval attn-mass`, all depths, the "
      "main stage's statistic) is shown for the combined weights and for each differential map alone: a combined "
      "weight A1 − λ·A2 can be negative, and a negative share on the answer means the head subtracts the "
      "answer's value, a sign out_proj can carry either way.\n")
    w("| arch | seeds | accuracy over the grid, per seed | N = 1 accuracy, per seed | retrieve | answer share: "
      "combined | A1 | A2 |")
    w("|---|---:|---|---|---:|---|---|---|")
    for a in archs:
        shares = {}
        for mk in ("combined", "a1", "a2"):  # a combined share lies in [-1, 1]: tools/stats.py's bounded interval
            ms = [m for m in (mass_all(load_eval(main, f"mass-{a}-s{s}") or {}, None, mk) for s in seeds) if m]
            shares[mk] = fmt_ci(bounded_mean_ci([m["answer"] for m in ms], [m["prompts"] for m in ms], -1.0, 1.0),
                                "{:.3f}") if ms else "–"
        w(f"| {NAME[a]} | {len(grid[a])} | " + (", ".join(f"{grid[a][s]:.2f}" for s in sorted(grid[a])) or "–")
          + " | " + (", ".join(f"{one[a][s]:.2f}" for s in sorted(one[a])) or "–") + " | "
          + (f"{sum(v >= 0.5 for v in one[a].values())} of {len(one[a])}" if one[a] else "–") + " | "
          + " | ".join(shares[mk] for mk in ("combined", "a1", "a2")) + " |")
    w("\n| comparison (accuracy over the grid, per seed) | difference [95% CI] | verdict |")
    w("|---|---|---|")
    for a, b in (("diff2", "transformer"), ("diff2", "diff")):
        ci = bounded_diff_ci(grid[b], queries[b], grid[a], queries[a])
        w(f"| {NAME[a]} − {NAME[b]} | {fmt_ci(ci, '{:+.3f}')} | (no claim) |")


def write(r, command, main=None):
    out = []
    w = out.append
    dim, steps = int(r.settings["sweep_dim"]), r.steps
    w("# DIFF V2 beside DIFF V1 and the Transformer\n")
    w(f"Written by tools/v2.py on {datetime.date.today()} from `{command}` (scripts/v2.sh). Plain language "
      f"modelling (the State of the Union speeches, no needle or copy rows) under the scaling stage's recipe at "
      f"dim {dim}: {r.settings['layers']} layers, context {r.settings['seq']}, {r.settings['batch']} rows, "
      f"{steps} steps, each arch at its own learning rate (the lowest final validation loss of a sweep, seed 1). "
      "The Transformer has 2H heads of width d, DIFF V1 H heads (values 2d), V2 the Transformer's 2H heads as "
      "output heads (4H query heads, λ per token: the matched comparison of the DIFF V2 write-up, with more "
      "query and λ weights). Per seed the same batches for every arch; differences are paired by seed, 95% t "
      "intervals (bounded ones for rates and shares); a verdict is *held* only where the test rejects on the paper's "
      "side (tools/stats.py). The V2 write-up's claims are exploratory here, each at 0.05 uncorrected, and each "
      "verdict carries its terms: the two archs' learning rates and V2's extra parameters.\n")
    # learning rates
    w("## Learning rates (seed 1, final validation loss)\n")
    for line in sweep_table(r, {a: NAME[a] for a in ARCHS}):
        w(line)
    # loss
    w("\n## Validation loss at each arch's learning rate\n")
    loss = {a: final_losses(r, a, r.lr.get(a, "")) for a in ARCHS}
    w("| arch | lr | seeds | final validation loss (mean [95% CI]) | per seed |")
    w("|---|---|---:|---|---|")
    for a in ARCHS:
        vs = loss[a]
        w(f"| {NAME[a]} | {r.lr.get(a, '–')} | {len(vs)} | {fmt_ci(mean_ci(list(vs.values())), '{:.4f}')} | "
          + ", ".join(f"{v:.4f}" for _, v in sorted(vs.items())) + " |")
    w("\n| comparison (per seed) | difference [95% CI] | paper | verdict |")
    w("|---|---|---|---|")
    comps = [("diff2", "transformer", -1, "v2-loss"), ("diff2", "diff", 0, None), ("diff2lin", "diff2", +1, "v2-lin-loss"),
             ("diff2none", "diff2", +1, "v2-none-loss")]
    for a, b, sign, key in comps:
        per, t = paired(loss[b], loss[a]), terms(r, a, b)
        ci = mean_ci(per)
        v = say(record(key, ci, t_p(per), per, sign, "V2.md loss", terms=t)) + f" ({t})" if key else "(no claim)"
        w(f"| {NAME[a]} − {NAME[b]} | {fmt_ci(ci, '{:+.4f}')} | {'lower' if sign < 0 else 'higher' if sign else '–'} "
          f"| {v} |")
    # stability
    decide = deciding_mult(r)
    w("\n## Stability at high learning rates\n")
    if decide and transformer_unstable(r, decide):
        why = f" (here {decide}x, where the Transformer diverged)"
    elif decide:
        base = list(loss["transformer"].values())
        hi = list(final_losses(open_high(r, decide), "transformer", high_lr(r, decide)).values())
        rise = (f"; its final validation loss there is {statistics.mean(hi):.2f} against {statistics.mean(base):.2f} "
                "at its own lr" if hi and base else "")
        why = (f" (here {decide}x, where the Transformer still did not diverge{rise}: the paper's premise, a "
               "learning rate at which it diverges, was not reached, so these comparisons measure spikes in runs "
               "that all finished)")
    else:
        why = ""
    w(f"Every arch at 4x the Transformer's own lr, then at 8x and 16x while the Transformer stays stable (none of "
      f"its {N_SEEDS} seeds diverged), {N_SEEDS} seeds each. A spike: a step after the warm-up ({steps // 20} "
      f"steps) whose pre-clip gradient norm exceeds {SPIKE:g}x the median of the {WINDOW} steps before it. "
      "Diverged: the loss became non-finite (the run stops there). The verdicts below come from one multiple: "
      "the first at which a seed of the Transformer diverged, else the highest that ran" + why + ".")
    judged = False
    for mult in MULTS:
        rh = open_high(r, mult) if "transformer" in r.lr else None
        if mult != MULTS[0] and not rh:
            continue
        hi = high_lr(r, mult) if "transformer" in r.lr else None
        w(f"\n### {mult}x the Transformer's lr ({hi or 'not yet run'})\n")
        w("| arch | seeds | spikes per run | largest ratio | diverged | final validation loss |")
        w("|---|---:|---|---|---:|---|")
        m_spk, m_div, m_loss = {}, {}, {}
        for a in ARCHS:
            runs = runs_at(rh, a, hi) if hi and rh else {}
            res = {s: spikes(rh.runs[k], steps // 20) for s, k in runs.items()}
            m_spk[a] = {s: x[0] for s, x in res.items()}
            m_div[a] = {s: int(x[3]) for s, x in res.items()}
            m_loss[a] = final_losses(rh, a, hi) if runs else {}
            worst = max((x[1] for x in res.values()), default=float("nan"))
            w(f"| {NAME[a]} | {len(res)} | " + (", ".join(str(m_spk[a][s]) for s in sorted(m_spk[a])) or "–")
              + " | " + ("–" if math.isnan(worst) else f"{worst:.1f}x") + f" | {sum(m_div[a].values())} | "
              + (fmt_ci(mean_ci(list(m_loss[a].values())), "{:.4f}") if m_loss[a] else "–") + " |")
        if not any(m_spk.values()):
            w("\nNo run at this multiple has finished yet (`make reproduce STAGE=v2` runs it).")
        else:  # verdicts at the deciding multiple; the others shown as measured
            stability_comparisons(r, w, mult, decide, m_spk, m_div, m_loss)
            judged |= mult == decide
    if not judged:  # nothing to judge yet: every claim is "not measured"
        stability_comparisons(r, w, decide, decide, {}, {}, {})
    # outliers
    w("\n## Activation outliers at each arch's learning rate (Table 5's Top-1)\n")
    w("| arch | seeds | top-1 attention logit | top-1 hidden value |")
    w("|---|---:|---|---|")
    top = {}
    for a in ARCHS:
        o = {s: outliers(r, k) for s, k in runs_at(r, a, r.lr.get(a, "")).items()}
        top[a] = {s: x for s, x in o.items() if x}
        w(f"| {NAME[a]} | {len(top[a])} | " + (fmt_ci(mean_ci([x[0] for x in top[a].values()]), "{:.1f}") if top[a]
                                               else "–") + " | "
          + (fmt_ci(mean_ci([x[1] for x in top[a].values()]), "{:.1f}") if top[a] else "–") + " |")
    w("\n| comparison (log10 of the ratio, per seed) | attention logits [95% CI] | verdict | hidden [95% CI] | verdict |")
    w("|---|---|---|---|---|")
    for a, b in [("diff2", "transformer"), ("diff2", "diff")]:
        cells = []
        for i, key in ((0, "v2-logits"), (1, "v2-hidden")):
            lb, la = ({s: math.log10(x[i]) for s, x in top[c].items()} for c in (b, a))
            ci = paired_ci(lb, la)
            cells += [fmt_ci(ci, "{:+.3f}"), say(record(key, ci, t_p(paired(lb, la)), paired(lb, la), -1, "V2.md outliers",
                                                       terms=terms(r, a, b))) if b == "transformer" else "(no claim)"]
        w(f"| {NAME[a]} / {NAME[b]} | " + " | ".join(cells) + " |")
    w(f"\nTerms: {terms(r, 'diff2', 'transformer')}.")
    section_retrieval(main or os.path.dirname(os.path.abspath(r.dir)), w)
    path = os.path.join(r.dir, "V2.md")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(out) + "\n")
    os.replace(path + ".tmp", path)
    write_verdicts(r.dir)  # for the report's summary (tools/report.py)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--command", default="make reproduce STAGE=v2")
    ap.add_argument("--main", help="the main stage's folder (default: DIR's parent)")
    ap.add_argument("--choose-lr", action="store_true")
    ap.add_argument("--sweep-next", action="store_true")
    ap.add_argument("--unstable", type=int, metavar="MULT", choices=MULTS)
    a = ap.parse_args()
    r = open_run(a.dir)
    if a.unstable:
        u = transformer_unstable(r, a.unstable)
        print("unfinished" if u is None else "yes" if u else "no")
    elif a.choose_lr:
        choose_lr(r)
    elif a.sweep_next:
        sweep_next(r)
    else:
        write(r, a.command, a.main)
        print(f"wrote {os.path.join(a.dir, 'V2.md')}; verdicts: "
              + ", ".join(r["verdict"] for r in LEDGER))


if __name__ == "__main__":
    main()
