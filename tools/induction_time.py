"""The induction-time stage's write-up (scripts/induction_time.sh; docs/reproduce.md "The induction-time
stage"): when does induction form, DIFF against difftx's Transformer and a textbook GPT, each at its own
learning rate, as times to an event censored at the run's end.

usage: tools/induction_time.py RUN --choose-lr        "arch lr" lines: each arch's best of the sweep (seed 1)
       tools/induction_time.py RUN [--command CMD]   writes RUN/INDUCTION_TIME.md, induction-time.png and
                                                      verdicts.json

Runs are RUN/models/ARCH-lrLR-sSEED.jsonl (difftx train's log, or tools/gpt_torch.py's with the same fields;
a run counts once its log reaches the last step). The induction score per step is copy_first − copy_repeat
(tools/induction.py); two events, each the first step at which the score's 20-step moving mean reaches its
level: **onset** at 1 nat, **formed** at ln V / 2 (half of perfect copying). A run whose score never
reaches a level is censored at its last step. The learning rate of each arch is chosen on seed 1 alone (the
earliest formation, then the earliest onset, then the highest final score), and the comparisons use seeds
2 and up only, so the choice does not favour the seeds compared. Each comparison: Kaplan–Meier curves,
the two-sided log-rank test (its p decides, at 0.05: tools/stats.py's rule, the claims of ours named in
stats.CLAIMS before the runs), and the difference in restricted mean time to the event up to the run's end
with a 95% interval (its sign gives the direction; positive = the first arch named is later).
"""
import argparse
import glob
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stats  # noqa: E402
from induction import ONSET_NATS, first_step, read_scores  # noqa: E402
from runs import read_settings  # noqa: E402

ARCHS = ["diff", "transformer", "gpt"]
LABEL = {"diff": "DIFF (difftx)", "transformer": "Transformer (difftx, LLaMA-style)",
         "gpt": "textbook GPT (PyTorch: learned positions, LayerNorm, GELU)"}
NAME = re.compile(r"^(?P<arch>[a-z0-9]+)-lr(?P<lr>[0-9.e-]+)-s(?P<seed>\d+)$")


def lr_key(lr):
    return float(lr)


class Run:
    def __init__(self, pts, steps, vocab):
        self.steps = steps
        self.complete = bool(pts) and pts[-1][0] >= steps
        self.onset = first_step(pts, ONSET_NATS)
        self.formed = first_step(pts, math.log(vocab) / 2)
        tail = max(1, len(pts) // 10)
        self.final = sum(f - r for _, _, f, r in pts[-tail:]) / tail if pts else float("nan")

    def time(self, event):
        """(step, 1) where EVENT ("onset" or "formed") happened, else (the run's length, 0): censored."""
        t = getattr(self, event)
        return (t, 1) if t is not None else (self.steps, 0)


def runs(d):
    """{(arch, lr, seed): Run} of the finished runs."""
    st = read_settings(os.path.join(d, "settings.txt"))
    steps, vocab = int(st["steps"]), int(st["vocab"])
    out = {}
    for p in glob.glob(os.path.join(d, "models", "*.jsonl")):
        m = NAME.match(os.path.basename(p)[: -len(".jsonl")])
        if not m:
            continue
        r = Run(read_scores(p), steps, vocab)
        if r.complete:
            out[(m["arch"], m["lr"], int(m["seed"]))] = r
    return out


def choose_lr(r, arch):
    """Seed 1's best lr of ARCH: the earliest formation, then the earliest onset, then the highest final
    score (runs that never form or start count at the run's length)."""
    tried = [(lr, run) for (a, lr, s), run in r.items() if a == arch and s == 1]
    if not tried:
        return None
    return min(tried, key=lambda x: (x[1].time("formed")[0], x[1].time("onset")[0], -x[1].final,
                                     lr_key(x[0])))[0]


def sample(r, arch, lr, event):
    """(times, events, seeds) of ARCH at LR over seeds 2 and up."""
    seeds = sorted(s for (a, l_, s) in r if a == arch and l_ == lr and s >= 2)
    ts = [r[(arch, lr, s)].time(event) for s in seeds]
    return [t for t, _ in ts], [e for _, e in ts], seeds


def km_text(times, events, steps):
    """The Kaplan–Meier curve's median time (or '> steps')."""
    for t, s in stats.kaplan_meier(times, events):
        if s <= 0.5:
            return str(t)
    return f"> {steps}"


def write(d, command):
    r = runs(d)
    st = read_settings(os.path.join(d, "settings.txt"))
    steps, vocab = int(st["steps"]), int(st["vocab"])
    lrs = {a: choose_lr(r, a) for a in ARCHS}
    stats.LEDGER.clear()
    L = []
    w = L.append
    w("# Time to induction: DIFF, difftx's Transformer and a textbook GPT\n")
    w(f"Command: `{command}` (scripts/induction_time.sh; docs/reproduce.md \"The induction-time stage\"). "
      "Settings: " + " ".join(f"{k}={v}" for k, v in st.items()) + ".\n")
    w(f"Every run trains on copy documents alone (the same rows for the same seed, in difftx and in PyTorch) and "
      f"logs the induction score per step (copy_first − copy_repeat). Events: **onset**, the first step where "
      f"the score's 20-step mean reaches {ONSET_NATS:g} nat; **formed**, where it reaches ln V / 2 = "
      f"{math.log(vocab) / 2:.2f} (half of perfect copying). A run without the event is censored at step "
      f"{steps}. Each arch's learning rate is chosen on seed 1 (earliest formation, then onset, then final "
      "score); the comparisons use seeds 2 and up only.\n")
    w("## The sweep (seed 1)\n")
    all_lrs = sorted({lr for (a, lr, s) in r if s == 1}, key=lr_key)
    w("Each cell: formed at step / onset at step / final score (nats); – where not reached.\n")
    w("| arch | " + " | ".join(f"lr {lr}" for lr in all_lrs) + " | chosen |")
    w("|---|" + "---|" * len(all_lrs) + "---|")
    for a in ARCHS:
        cells = []
        for lr in all_lrs:
            run = r.get((a, lr, 1))
            cells.append("" if run is None else
                         f"{run.formed if run.formed is not None else '–'} / "
                         f"{run.onset if run.onset is not None else '–'} / {run.final:.2f}")
        w(f"| {LABEL[a]} | " + " | ".join(cells) + f" | {lrs[a] or '–'} |")
    w("\n## Each arch at its own learning rate (seeds 2 and up)\n")
    w("| arch | lr | seeds | formed (of seeds) | median step formed (KM) | started (of seeds) | median onset (KM) "
      "| mean final score |")
    w("|---|---|---:|---:|---:|---:|---:|---:|")
    for a in ARCHS:
        if not lrs[a]:
            continue
        tf, ef, seeds = sample(r, a, lrs[a], "formed")
        to, eo, _ = sample(r, a, lrs[a], "onset")
        if not seeds:
            w(f"| {LABEL[a]} | {lrs[a]} | 0 | | | | | |")
            continue
        fin = sum(r[(a, lrs[a], s)].final for s in seeds) / len(seeds)
        w(f"| {LABEL[a]} | {lrs[a]} | {len(seeds)} | {sum(ef)} | {km_text(tf, ef, steps)} | {sum(eo)} | "
          f"{km_text(to, eo, steps)} | {fin:.2f} |")
    w("\n![Kaplan–Meier curves: the share of runs without the event, by step](induction-time.png)\n")
    w("\n## Verdicts\n")
    w("Each a log-rank test of two arms (two-sided, 0.05; its p decides), with the difference in restricted mean "
      f"time to the event up to step {steps} (B − A, steps; 95% normal interval from Greenwood-type variances): "
      "claims of ours, not the paper's, each at 0.05 uncorrected.\n")
    w("| claim | A | B | restricted mean time, B − A [95%] | log-rank p | verdict |")
    w("|---|---|---|---:|---:|---|")
    for key, a, b, event in (("induction-onset", "diff", "transformer", "onset"),
                             ("induction-formed", "diff", "transformer", "formed"),
                             ("induction-gpt", "gpt", "transformer", "formed")):
        if not (lrs.get(a) and lrs.get(b)):
            continue
        ta, ea, sa = sample(r, a, lrs[a], event)
        tb, eb, sb = sample(r, b, lrs[b], event)
        if not ta or not tb:
            continue
        ci = stats.rmst_diff((ta, ea), (tb, eb), steps)
        _, p = stats.logrank(ta, ea, tb, eb)
        common = sorted(set(sa) & set(sb))
        per_seed = [r[(b, lrs[b], s)].time(event)[0] - r[(a, lrs[a], s)].time(event)[0] for s in common]
        terms = f"lr {lrs[a]} ({a}) and {lrs[b]} ({b}), each its own best"
        rec = stats.record(key, ci, p, per_seed, +1, "induction-time", None, terms)
        w(f"| {rec['claim']} | {LABEL[a]} | {LABEL[b]} | {stats.fmt_ci(ci, '{:+.0f}')} | {stats.fmt_p(p)} | "
          f"{stats.say(rec)} |")
    with open(os.path.join(d, "INDUCTION_TIME.md.tmp"), "w") as f:
        f.write("\n".join(L) + "\n")
    os.replace(os.path.join(d, "INDUCTION_TIME.md.tmp"), os.path.join(d, "INDUCTION_TIME.md"))
    stats.write_verdicts(d)
    plot(d, r, lrs, steps)


def plot(d, r, lrs, steps):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("induction_time: matplotlib is missing (scripts/setup.sh --plot): no figure", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, event in zip(axes, ("onset", "formed")):
        for i, a in enumerate(ARCHS):
            if not lrs.get(a):
                continue
            t, e, seeds = sample(r, a, lrs[a], event)
            if not seeds:
                continue
            xs, ys = [0], [1.0]
            for tt, s in stats.kaplan_meier(t, e):
                xs += [tt, tt]
                ys += [ys[-1], s]
            xs.append(steps)
            ys.append(ys[-1])
            ax.plot(xs, ys, color=f"C{i}", label=f"{a} (lr {lrs[a]}, {len(seeds)} seeds)")
        ax.set_xlim(0, steps)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("step")
        ax.set_ylabel(f"share of runs without {event}")
        ax.set_title(f"time to {event}", fontsize=10)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(d, "induction-time.png.tmp.png"), dpi=110)
    os.replace(os.path.join(d, "induction-time.png.tmp.png"), os.path.join(d, "induction-time.png"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--choose-lr", action="store_true")
    ap.add_argument("--command", default="make reproduce STAGE=induction-time")
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.run, "settings.txt")):
        sys.exit(f"induction_time: {a.run}/settings.txt: no such file (not a run folder)")
    if a.choose_lr:
        r = runs(a.run)
        for arch in ARCHS:
            lr = choose_lr(r, arch)
            if lr:
                print(arch, lr)
        return
    write(a.run, a.command)


if __name__ == "__main__":
    main()
