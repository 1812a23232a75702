#!/usr/bin/python3
"""The induction study's analysis (scripts/induction.sh; make reproduce
STAGE=induction): reads every run's training log, computes the induction
score per step, and writes DIR/INDUCTION.md (and induction.png) with the
answers to the study's questions, each computed from the numbers here.

The score. A copy row holds L random ids repeated (16 <= L <= 32); its first
L positions are unpredictable (the loss there is about ln V whatever the
model does), its later positions are predictable by looking back L tokens.
The training log gives per step copy_first (the mean loss on the first L
positions of the step's copy rows) and copy_repeat (on the rest). The
induction score is copy_first − copy_repeat in nats: 0 without induction,
close to ln V (8.3) with perfect copying.

Per run: the final score (mean over the last 10% of steps); induction
formed when it is at least ln V / 2, partly when at least 1; the onset, the
first step at which the score's 20-step moving mean reaches 1 nat.

Comparisons between two recipes use the seeds both ran (the same seed gives
both the same copy documents): the mean of the per-seed differences with a
95% t interval (n − 1 degrees of freedom). An effect is called only when the
interval excludes 0; otherwise it is "not resolved". With one seed nothing is
resolved.

usage: tools/induction.py DIR [--command CMD] [--seconds S]
"""
import argparse
import datetime
import glob
import math
import os
import re
import statistics
import sys

ONSET_NATS = 1.0
WINDOW = 20

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runs import read_entries, read_settings  # noqa: E402
from stats import MIN_SEEDS, fmt_ci, mean_ci, resolved  # noqa: E402


def read_scores(path):
    """[(step, loss, first, repeat)] of a training log's steps that had copy rows."""
    return [(s, e["loss"], e["copy_first"], e["copy_repeat"]) for s, e in read_entries(path)
            if e.get("loss") is not None and e.get("copy_first") is not None and e.get("copy_repeat") is not None]


def read_elapsed(path):
    """The training time a log reports at its last step (seconds; 0 when it has none)."""
    e = read_entries(path)
    return e[-1][1].get("elapsed_s", 0.0) if e else 0.0


def first_step(pts, nats):
    """The first step at which the induction score's WINDOW-step moving mean reaches NATS (None: never), of
    read_scores' points."""
    score = [f - r for _, _, f, r in pts]
    for i in range(WINDOW - 1, len(score)):
        if statistics.fmean(score[i - WINDOW + 1:i + 1]) >= nats:
            return pts[i][0]
    return None


class RunResult:
    def __init__(self, name, pts, steps, vocab):
        self.name = name
        self.complete = bool(pts) and pts[-1][0] >= steps
        self.steps = steps
        score = [f - r for _, _, f, r in pts]
        tail = max(1, len(pts) // 10)
        self.final = statistics.fmean(score[-tail:]) if pts else float("nan")
        self.final_loss = statistics.fmean(l for _, l, _, _ in pts[-tail:]) if pts else float("nan")
        self.onset = first_step(pts, ONSET_NATS)
        half = math.log(vocab) / 2
        self.state = "formed" if self.final >= half else "partly" if self.final >= ONSET_NATS else "not formed"
        self.curve = [(s, f - r) for s, _, f, r in pts]

    def onset_or_end(self):
        """The onset, or the run's length when induction never started (censored)."""
        return self.onset if self.onset is not None else self.steps


def parse_name(name):
    """'transformer-wide-subln-lr3e-3-s2' -> ('transformer-wide-subln-lr3e-3', 2)."""
    m = re.match(r"(.+)-s(\d+)$", name)
    return (m[1], int(m[2])) if m else (name, 0)


class Study:
    def __init__(self, d, logs=None):
        """d: the run folder; logs: the committed logs of an earlier machine's runs (settings.txt and
        runs.txt there stand in for d's when d has none, as on a fresh machine)."""
        self.dir = d
        def pick(name):
            own = os.path.join(d, name)
            return own if os.path.exists(own) or not logs else os.path.join(logs, name)
        self.settings = read_settings(pick("settings.txt"))
        self.vocab = int(self.settings.get("vocab", 4096))
        self.steps = int(self.settings["steps"])
        self.long_factor = int(self.settings.get("long_factor", 4))
        self.planned = []
        rp = pick("runs.txt")
        if os.path.exists(rp):
            self.planned = [l.split()[0] for l in open(rp) if l.strip()]
        self.runs, self.paths = {}, {}  # name -> RunResult, its log
        for p in sorted(glob.glob(os.path.join(d, "models", "*.jsonl"))):
            name = os.path.basename(p)[: -len(".jsonl")]
            steps = self.steps * (self.long_factor if "-long-" in name else 1)
            r = RunResult(name, read_scores(p), steps, self.vocab)
            if r.complete and os.path.exists(os.path.join(d, "models", name + ".safetensors")):
                self.runs[name] = r
                self.paths[name] = p
        # runs finished on an earlier machine: their committed logs (scripts/induction.sh)
        for p in sorted(glob.glob(os.path.join(logs, "*.jsonl.gz")) if logs else []):
            name = os.path.basename(p)[: -len(".jsonl.gz")]
            if name in self.runs:
                continue
            steps = self.steps * (self.long_factor if "-long-" in name else 1)
            r = RunResult(name, read_scores(p), steps, self.vocab)
            if r.complete:
                self.runs[name] = r
                self.paths[name] = p
        self.recipes = {}  # recipe -> {seed: RunResult}
        for name, r in self.runs.items():
            rec, seed = parse_name(name)
            self.recipes.setdefault(rec, {})[seed] = r

    def group(self, recipe):
        return self.recipes.get(recipe, {})

    def training_seconds(self):
        """The finished runs' training time, as their logs report it (one thread each), whatever machines
        and sessions they ran in."""
        return sum(read_elapsed(p) for p in self.paths.values())


def paired(study, a, b, key):
    """Mean and 95% t interval of key(b) − key(a) over the seeds both recipes ran."""
    ga, gb = study.group(a), study.group(b)
    seeds = sorted(set(ga) & set(gb))
    return mean_ci([key(gb[s]) - key(ga[s]) for s in seeds])


def effect_words(ci, better_if_positive=True):
    """'raises' / 'lowers' when the interval excludes 0, else 'not resolved'."""
    if ci is None:
        return "not run yet"
    m, lo, hi, n = ci
    if not resolved(ci):
        return f"not resolved ({n} seed{'s' if n != 1 else ''})"
    if lo > 0:
        return "raises it" if better_if_positive else "delays it"
    if hi < 0:
        return "lowers it" if better_if_positive else "brings it sooner"
    return "not resolved" + (" (one seed)" if n < 2 else "")


def recipe_row(study, rec):
    g = study.group(rec)
    if not g:
        return None
    finals = [r.final for r in g.values()]
    formed = sum(r.state == "formed" for r in g.values())
    onsets = [r.onset for r in g.values() if r.onset is not None]
    never = sum(r.onset is None for r in g.values())
    m = statistics.fmean(finals)
    sd = statistics.stdev(finals) if len(finals) > 1 else 0.0
    on = (f"{statistics.median(onsets):.0f}" if onsets else "never") + (f" ({never} never)" if onsets and never else "")
    loss = statistics.fmean(r.final_loss for r in g.values())
    return rec, len(g), formed, m, sd, on, loss


LABEL = {
    "diff": "DIFF (H heads of d, subln, λ_init schedule)",
    "transformer": "Transformer (2H heads of d)",
    "diff-nosubln": "DIFF − subln (Table 6 − GroupNorm)",
    "diff-li0.8": "DIFF, λ_init = 0.8",
    "diff-li0.5": "DIFF, λ_init = 0.5",
    "transformer-subln": "Transformer + subln (2H heads of d)",
    "transformer-wide": "Transformer, H heads of 2d",
    "transformer-wide-subln": "Transformer, H heads of 2d, + subln (Table 6 + GroupNorm)",
    "diff-gpt2": "DIFF, GPT-2 init",
    "transformer-gpt2": "Transformer, GPT-2 init",
    "transformer-long": "Transformer, 4× the steps",
}


def label(rec):
    m = re.match(r"(.+)-lr([0-9.e-]+)$", rec)
    base, lr = (m[1], m[2]) if m else (rec, "?")
    return LABEL.get(base, base), lr


def recipe_order(study):
    """DIFF first, then by name without the lr, then by the lr's value."""
    def key(rec):
        m = re.match(r"(.+)-lr([0-9.e-]+)$", rec)
        base, lr = (m[1], float(m[2])) if m else (rec, 0.0)
        return (not rec.startswith("diff"), base, lr)
    return sorted(study.recipes, key=key)


def sweep_done(study):
    """Every run of the learning-rate sweep (both archs, every lr and seed) has finished."""
    want = [n for n in study.planned if re.match(r"(diff|transformer)-lr[0-9.e-]+-s\d+$", n)]
    return bool(want) and all(n in study.runs for n in want)


def best_lr(study, arch):
    """The learning rate of the sweep with the highest mean final score (then the earliest median onset)."""
    best = None
    for rec, g in study.recipes.items():
        m = re.match(rf"{arch}-lr([0-9.e-]+)$", rec)
        if not m or not g:
            continue
        score = statistics.fmean(r.final for r in g.values())
        onset = statistics.median(r.onset_or_end() for r in g.values())
        key = (score, -onset)
        if best is None or key > best[0]:
            best = (key, m[1])
    return best[1] if best else None


def findings(study, h="##"):
    """The answers (markdown lines), headed at level h: INDUCTION.md's, and REPORT.md's summary."""
    V = study.vocab
    out = []
    order = recipe_order(study)
    # Q1: under which recipe does the Transformer form induction?
    out.append(h + " Under which recipe does the Transformer form induction?\n")
    tf = [(rec, recipe_row(study, rec)) for rec in order if rec.startswith("transformer")]
    tf = [(rec, row) for rec, row in tf if row]
    formed_any = [(rec, row) for rec, row in tf if row[2] > 0]
    formed_all = [(rec, row) for rec, row in tf if row[2] == row[1] and row[1] >= 2]
    if not tf:
        out.append("No Transformer run is done yet.\n")
    elif formed_all:
        out.append("**In every seed:** " + "; ".join(f"{label(r)[0]} at lr {label(r)[1]} ({row[2]}/{row[1]})"
                                                    for r, row in formed_all) + ".\n")
    if tf and formed_any:
        some = [(r, row) for r, row in formed_any if (r, row) not in formed_all]
        if some:
            out.append("**In some seeds:** " + "; ".join(f"{label(r)[0]} at lr {label(r)[1]} ({row[2]}/{row[1]})"
                                                        for r, row in some) + ".\n")
    if tf and not formed_any:
        out.append("**Under none of the recipes run here**: no Transformer run formed induction (final score "
                   f"≥ {math.log(V) / 2:.2f}). The best: " +
                   max((f"{label(r)[0]} at lr {label(r)[1]}, final score {row[3]:.2f}" for r, row in tf),
                       key=lambda t: float(t.rsplit(" ", 1)[1])) + ".\n")
    # Q2: each arch's best lr, and whether the shared 3e-3 is fair
    out.append(h + " Each architecture at its own best learning rate\n")
    bd, bt = best_lr(study, "diff"), best_lr(study, "transformer")
    if bd and bt:
        c = paired(study, f"transformer-lr{bt}", f"diff-lr{bd}", lambda r: r.final)
        text = (f"Best of the sweep (highest mean final score): DIFF lr {bd}, Transformer lr {bt}. DIFF at its best "
                f"minus the Transformer at its best: final score {fmt_ci(c)}; DIFF's advantage "
                f"{'holds' if c and c[1] > 0 else 'is reversed' if c and c[2] < 0 else 'is not resolved'}"
                " when each arch gets its own learning rate.")
        shared = "3e-3"
        fair = []
        for arch, b in (("diff", bd), ("transformer", bt)):
            if b == shared:
                fair.append(f"{arch} is at its best at {shared}")
            else:
                c2 = paired(study, f"{arch}-lr{b}", f"{arch}-lr{shared}", lambda r: r.final)
                verdict = ("one seed: not resolved" if c2 and c2[3] < 2 else
                           "within the interval of its best" if c2 and c2[1] <= 0 <= c2[2] else "worse than its best")
                fair.append(f"{arch} at {shared} vs its best {b}: {fmt_ci(c2)} ({verdict})")
        out.append(text + " The shared lr 3e-3 of the reproduction: " + "; ".join(fair) + ".\n")
        lrs = sorted(study.settings.get("lrs", "").split(), key=float)
        edge = [n for n, b in (("DIFF", bd), ("the Transformer", bt)) if lrs and b in (lrs[0], lrs[-1])]
        if edge:
            out.append("**The sweep does not bracket** the best learning rate of " + " and ".join(edge) +
                       " (it lies at the sweep's edge): that arch may form induction better still outside it.\n")
    else:
        out.append("The sweep is not done for both architectures yet.\n")
    # Q3: which component of DIFF makes it form sooner?
    out.append(h + " Which component of DIFF makes it form sooner?\n")
    out.append("Each row changes one thing and measures the change in the final score and in the onset step "
               "(per-seed differences, 95% t interval; runs that never start count as onset = the run's length). "
               f"A change is called only when its interval excludes 0 and rests on at least {MIN_SEEDS} seeds. These "
               "are the study's own questions, not claims of the paper: each row is its own test at 0.05, "
               "uncorrected for the two dozen in the table (exploratory, as the report's verdict table calls such "
               "tests).\n")
    out.append("| change | final score | effect on induction | onset step | effect on the onset |")
    out.append("|---|---|---|---|---|")
    comps = [
        ("the differential attention itself: Transformer → DIFF", "transformer-lr3e-3", "diff-lr3e-3"),
        ("remove DIFF's per-head norm", "diff-lr3e-3", "diff-nosubln-lr3e-3"),
        ("give the Transformer a per-head norm", "transformer-lr3e-3", "transformer-subln-lr3e-3"),
        ("the Transformer's heads: 2H of d → H of 2d", "transformer-lr3e-3", "transformer-wide-lr3e-3"),
        ("H heads of 2d, + per-head norm", "transformer-wide-lr3e-3", "transformer-wide-subln-lr3e-3"),
        ("DIFF λ_init: schedule → 0.8", "diff-lr3e-3", "diff-li0.8-lr3e-3"),
        ("DIFF λ_init: schedule → 0.5", "diff-lr3e-3", "diff-li0.5-lr3e-3"),
        ("GPT-2 init, Transformer, lr 1e-3", "transformer-lr1e-3", "transformer-gpt2-lr1e-3"),
        ("GPT-2 init, Transformer, lr 3e-3", "transformer-lr3e-3", "transformer-gpt2-lr3e-3"),
        ("GPT-2 init, DIFF, lr 3e-3", "diff-lr3e-3", "diff-gpt2-lr3e-3"),
        ("4× the steps, Transformer, lr 1e-3", "transformer-lr1e-3", "transformer-long-lr1e-3"),
        ("4× the steps, Transformer, lr 3e-3", "transformer-lr3e-3", "transformer-long-lr3e-3"),
    ]
    findings, onsets = [], []
    for what, a, b in comps:
        cf = paired(study, a, b, lambda r: r.final)
        co = paired(study, a, b, lambda r: r.onset_or_end())
        out.append(f"| {what} | {fmt_ci(cf)} | {effect_words(cf)} | {fmt_ci(co, '{:+.0f}')} | "
                   f"{effect_words(co, better_if_positive=False)} |")
        if not resolved(cf):
            cf = None
        if not resolved(co):
            co = None
        if cf and cf[1] > 0:
            findings.append(f"{what}: the final score rises by {cf[0]:.2f} nats")
        elif cf and cf[2] < 0:
            findings.append(f"{what}: the final score falls by {-cf[0]:.2f} nats")
        if co and co[3] >= 2 and co[2] < 0 and what != comps[0][0]:
            onsets.append((co[0], what))
    out.append("")
    if findings:
        out.append("**Resolved here:** " + "; ".join(findings) + ".\n")
    else:
        out.append("**Nothing is resolved yet** at 95% with the seeds done.\n")
    if onsets:
        m, what = min(onsets)
        out.append(f"**The single change that brings the onset soonest** (of those resolved, the whole DIFF-vs-"
                   f"Transformer row aside): {what}, by {-m:.0f} steps.\n")
    out += factorial(study, h)
    return out


def factorial(study, h):
    """The differential attention and the per-head norm as the two factors of a 2×2 design at lr 3e-3
    (Transformer, Transformer + subln, DIFF − subln, DIFF): each alone, both, and their interaction
    (both − each alone + neither, per seed), with the formed counts."""
    cells = {("no", "no"): "transformer-lr3e-3", ("no", "yes"): "transformer-subln-lr3e-3",
             ("yes", "no"): "diff-nosubln-lr3e-3", ("yes", "yes"): "diff-lr3e-3"}
    groups = {k: study.group(v) for k, v in cells.items()}
    seeds = sorted(set.intersection(*[set(g) for g in groups.values()]))
    if not seeds:
        return []
    score = {k: {s: g[s].final for s in seeds} for k, g in groups.items()}
    none = score[("no", "no")]

    def gain(k):
        return mean_ci([score[k][s] - none[s] for s in seeds])

    inter = mean_ci([score[("yes", "yes")][s] - score[("yes", "no")][s] - score[("no", "yes")][s] + none[s]
                     for s in seeds])
    formed = {k: sum(groups[k][s].state == "formed" for s in seeds) for k in cells}
    out = [h + " The differential and the per-head norm, alone and together\n",
           "The two components as the factors of a 2×2 design at lr 3e-3 (the same seeds in every cell): the "
           "Transformer (2H heads of d) has neither, the Transformer + subln the norm alone, DIFF − subln the "
           "differential alone, DIFF both. The interaction is both − differential alone − norm alone + neither, "
           "per seed: above 0 when the two together do more than the sum of each alone.\n",
           "| differential | per-head norm | final score (mean) | formed | gain over neither |",
           "|---|---|---|---|---|"]
    for k in (("no", "no"), ("no", "yes"), ("yes", "no"), ("yes", "yes")):
        m = statistics.fmean(score[k].values())
        out.append(f"| {k[0]} | {k[1]} | {m:.2f} | {formed[k]}/{len(seeds)} | "
                   + ("—" if k == ("no", "no") else fmt_ci(gain(k))) + " |")
    out.append(f"| | interaction | | | {fmt_ci(inter)} |")
    out.append("")
    alone = [k for k in (("no", "yes"), ("yes", "no")) if formed[k] > 0]
    text = []
    if not alone and formed[("yes", "yes")] == len(seeds):
        text.append("**Neither component alone forms induction here; together they do** (in every seed)")
    elif alone:
        text.append("A component alone forms induction in some seeds: " + ", ".join(
            ("the per-head norm" if k[1] == "yes" else "the differential") + f" ({formed[k]}/{len(seeds)})"
            for k in alone))
    if resolved(inter) and inter[1] > 0:
        text.append(f"the interaction is {inter[0]:+.2f} nats [{inter[1]:+.2f}, {inter[2]:+.2f}]: the two are "
                    "superadditive, so neither explains DIFF's advantage alone")
    elif resolved(inter) and inter[2] < 0:
        text.append(f"the interaction is {inter[0]:+.2f} nats: the two are subadditive (they overlap)")
    else:
        text.append(f"the interaction ({fmt_ci(inter)}) is not resolved")
    out.append("; ".join(text) + ".\n")
    return out


def write(study, command, seconds):
    V = study.vocab
    out = ["# The induction study: why DIFF forms induction in the copy warm-up and the Transformer does not\n",
           f"Written by `{command}` on {datetime.date.today().isoformat()} ({os.cpu_count()} cores; the runs' "
           f"training took {study.training_seconds() / 3600:.1f} h of one core each, by their logs"
           + (f", {seconds / 60:.0f} min of this machine's time" if seconds else "") + "), by tools/induction.py from "
           "the training logs; every verdict below is computed from the numbers in this file.\n"]
    s = study.settings
    out.append("## Setup\n")
    out.append(f"Every run: copy documents alone (`difftx train --copy-frac 1`: L random ids, 16 ≤ L ≤ 32, "
               f"repeated to fill {s.get('seq')} tokens), {s.get('batch')} rows per step, {study.steps} steps "
               f"(the long runs {study.long_factor}×), vocab {V}, dim {s.get('dim')}, {s.get('layers')} layers, "
               f"FFN {s.get('ffn')}, AdamW with 10% warmup and cosine decay to 0.1×, one thread. DIFF has H heads "
               "of q/k width d (values 2d), the Transformer 2H heads of d: the same projection shapes. "
               "`scripts/induction.sh --list` prints every run's flags.\n")
    out.append(f"**The induction score** is copy_first − copy_repeat (training log, per step): the loss on the "
               f"first L positions of the step's copy rows, which nothing can predict, less the loss on the "
               f"repeats, which looking back L tokens predicts. 0 without induction, up to ln V = {math.log(V):.2f}. "
               f"Per run: the final score (last 10% of steps); *formed* when at least ln V / 2 = "
               f"{math.log(V) / 2:.2f}, *partly* when at least {ONSET_NATS:g}; the onset, the first step where the "
               f"score's {WINDOW}-step mean reaches {ONSET_NATS:g} nat.\n")
    done, planned = len(study.runs), len(study.planned) or len(study.runs)
    if done < planned:
        missing = [n for n in study.planned if n not in study.runs]
        out.append(f"**{done} of {planned} runs are done**; the rest (" + ", ".join(missing[:8])
                   + (", …" if len(missing) > 8 else "") + ") continue when the same command runs again. "
                   "Comparisons below use only the runs that are done.\n")
    out.append("## Every recipe\n")
    out.append("| recipe | lr | seeds | formed | final score (mean ± sd) | median onset step | final loss |")
    out.append("|---|---|---|---|---|---|---|")
    order = recipe_order(study)
    for rec in order:
        row = recipe_row(study, rec)
        if not row:
            continue
        name, lr = label(rec)
        _, n, formed, m, sd, on, loss = row
        out.append(f"| {name} | {lr} | {n} | {formed}/{n} | {m:.2f} ± {sd:.2f} | {on} | {loss:.2f} |")
    out.append("")

    out += findings(study)
    # figure
    png = draw(study)
    if png:
        out.append(f"![induction score per step, mean over seeds]({os.path.basename(png)})\n")
    path = os.path.join(study.dir, "INDUCTION.md")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(out))
    os.replace(path + ".tmp", path)
    return path


def draw(study):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    recs = [r for r in sorted(study.recipes) if r.endswith("lr3e-3") and "-long-" not in r]
    if not recs:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for rec in recs:
        g = study.group(rec)
        steps = sorted({s for r in g.values() for s, _ in r.curve})
        by = [dict(r.curve) for r in g.values()]
        ys = [statistics.fmean(c[s] for c in by if s in c) for s in steps]
        sm = [statistics.fmean(ys[max(0, i - WINDOW + 1):i + 1]) for i in range(len(ys))]
        ax.plot(steps, sm, label=f"{label(rec)[0]} ({len(g)} seeds)",
                ls="-" if rec.startswith("diff") else "--")
    ax.set_xlabel("step")
    ax.set_ylabel("induction score (nats, 20-step mean)")
    ax.set_title("copy warm-up at lr 3e-3")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    path = os.path.join(study.dir, "induction.png")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--command", default="make reproduce STAGE=induction")
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--logs", default=None, help="a folder of committed gzipped logs of finished runs")
    ap.add_argument("--best-lr", action="store_true",
                    help="print each arch's best learning rate of the sweep ('ARCH LR' lines; exit 1 until the "
                         "sweep is done): the main stage's warm-up uses it")
    args = ap.parse_args()
    have = [x for x in (args.dir, args.logs) if x and os.path.exists(os.path.join(x, "settings.txt"))]
    st = Study(args.dir, args.logs) if have else None
    if args.best_lr:
        if not st or not sweep_done(st):
            sys.exit(1)
        for arch in ("diff", "transformer"):
            print(arch, best_lr(st, arch))
        return
    if not st or not st.runs:
        sys.exit(f"induction: no finished runs under {args.dir}/models")
    os.makedirs(args.dir, exist_ok=True)
    print("induction: " + write(st, args.command, args.seconds))


if __name__ == "__main__":
    main()
