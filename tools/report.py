#!/usr/bin/python3
"""REPORT.md for `make reproduce` (scripts/reproduce.sh): every table of the
paper that the recipe measures, our numbers beside the paper's, the command,
the model config, and one sentence on whether the paper's claim held here.

The numbers come from the files scripts/reproduce.sh leaves in the run folder:
models/<arch>-d<dim>-s<seed>.{safetensors,jsonl} (training logs) and
eval/*.json (difftx eval). This script only aggregates (means, spreads over
seeds, a least-squares power-law fit) and draws the figures; every
measurement is made by difftx.

usage: tools/report.py --run DIR [--command CMD] [--seconds S] [--kept]
"""
import argparse
import datetime
import json
import math
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runs import finished_models, model_info, read_entries, read_log, read_settings  # noqa: E402
from stats import (CLAIMS, EXPLORATORY, LEDGER, N_PRIMARY, OURS, PRIMARY, bounded_diff_ci, bounded_diff_p,  # noqa: E402
                   direction, fmt_ci, fmt_p, gate, holds_every_seed, holm, mean_ci, paired,
                   paired_ci, record, say, t_p)

ARCHS = ("diff", "transformer")
NAME = {"diff": "DIFF", "transformer": "Transformer"}

# ---- the paper's numbers (spec §6; Ye et al., ICLR 2025)
PAPER_TABLE2 = {  # (N, R) -> (Transformer, DIFF), 4K context, 3B models
    (1, 1): (1.00, 1.00), (2, 2): (0.85, 0.92), (4, 2): (0.62, 0.84), (6, 2): (0.55, 0.85)}
PAPER_TABLE3 = {  # depth -> (answer Tr, answer DIFF, noise Tr, noise DIFF)
    0: (0.03, 0.27, 0.51, 0.01), 25: (0.03, 0.30, 0.54, 0.02), 50: (0.03, 0.31, 0.52, 0.02),
    75: (0.07, 0.32, 0.49, 0.02), 100: (0.09, 0.40, 0.49, 0.01)}
PAPER_TABLE5 = {  # (quantity, arch) -> top1, top2, top3, top10, top100, median
    ("logits", "transformer"): (318.0, 308.2, 304.9, 284.7, 251.5, 5.4),
    ("logits", "diff"): (38.8, 38.8, 37.3, 32.0, 27.4, 3.3),
    ("hidden", "transformer"): (3608.6, 3607.4, 3603.6, 3552.1, 2448.2, 0.6),
    ("hidden", "diff"): (1688.2, 1672.5, 1672.1, 1624.3, 740.9, 1.2)}
PAPER_FIG8 = {"diff": {16: 66.2, 8: 66.3, 6: 66.0, 4: 58.8},  # HellaSwag accuracy, %
              "transformer": {16: 63.4, 8: 62.7, 6: 58.9, 4: 33.9}}


def load(path):
    with open(path) as f:
        return json.load(f)


def mean_sd(xs):
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    if not xs:
        return float("nan"), float("nan")
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def pm(xs, fmt="{:.3f}"):
    m, s = mean_sd(xs)
    if math.isnan(m):
        return "n/a"
    return (fmt + " ± " + fmt).format(m, s) if len(xs) > 1 else fmt.format(m)


class Run:
    def __init__(self, d):
        self.dir = d
        self.settings = read_settings(os.path.join(d, "settings.txt"))
        self.models = {(a, int(dim), int(seed)): base  # (arch, dim, seed) -> base path
                       for (a, dim, seed), base in finished_models(d, r"(diff|transformer)-d(\d+)-s(\d+)").items()}
        self.dims = sorted({k[1] for k in self.models})
        self.seeds = sorted({k[2] for k in self.models})
        self.headline = self.dims[-1] if self.dims else None
        self.induction = warm_induction(self)
        ret = self.retrieves = retrieving(self)  # {arch: [seeds]} that retrieve, read once
        abilities = {"retrieve": {NAME[a]: (len(ret[a]), len([s for s in self.seeds if self.eval(f"needle-{a}-s{s}")]))
                                   for a in ARCHS}}
        if self.induction:
            abilities["formed induction"] = {NAME[a]: (sum(x.state == "formed" for (b, _, _), x in self.induction.items()
                                                    if b == a),
                                                sum(b == a for (b, _, _) in self.induction)) for a in ARCHS}
        self.abilities = abilities
        self.gate = gate(abilities)  # why no comparison of these models is one of architectures, or None

    def eval(self, name):
        p = os.path.join(self.dir, "eval", name + ".json")
        return load(p) if os.path.exists(p) else None

    def final_val(self, arch, dim, seed):
        base = self.models.get((arch, dim, seed))
        if not base:
            return None
        _, val = read_log(base + ".jsonl")
        return val[-1][1] if val else None


# ---------------------------------------------------------------- sections

def command(r, out, what, rel):
    """Appends the exact command scripts/reproduce.sh ran (its .cmd file)."""
    p = os.path.join(r.dir, rel + ".cmd")
    if os.path.exists(p):
        with open(p) as f:
            lines = f.read().strip().splitlines()
        if len(lines) == 1:
            out.append(f"*Command* ({what}): `{lines[0]}`\n")
        else:  # a model's warm-up, then its main phase
            out.append(f"*Commands* ({what}):\n\n```sh\n" + "\n".join(lines) + "\n```\n")


def section_models(r, out):
    s = r.settings
    out.append("## Models and recipe\n")
    out.append(f"Every model: {s.get('layers')} layers, vocab {s.get('vocab')}, context {s.get('seq')}, "
               f"batch {s.get('batch')} × {s.get('seq')} tokens, {s.get('steps')} AdamW steps "
               f"(lr {s.get('lr')}, warmup 5%, cosine to 0.1×, weight decay 0.1, clip 1.0), "
               f"so {int(s.get('steps', 0)) * int(s.get('batch', 0)) * int(s.get('seq', 0)):,} training tokens. "
               + (f"Before them, a warm-up of {s['warm_steps']} steps (context {s.get('warm_seq')}, "
                  f"{s.get('warm_batch')} rows) on random-id copy documents alone, where induction forms (or does "
                  "not: the next section says which), and the main phase starts from its weights; the warm-up's lr "
                  f"is {s.get('warm_lr_diff', s.get('lr'))} for DIFF and {s.get('warm_lr_transformer', s.get('lr'))} "
                  "for the Transformer, "
                  + ("each arch's best in the induction study. " if s.get("warm_lr_from") == "induction" else
                     "the main phase's (the induction study had not run when this report's models trained). ")
                  if int(s.get('warm_steps', 0) or 0) > 0 else "")
               + f"A fraction {s.get('needle_frac')} of the batch rows are synthetic multi-needle documents "
               f"(1–{s.get('needle_max')} needles, haystack from the training speeches)"
               + (f" and a fraction {s['copy_frac']} random-id copy documents"
                  if float(s.get('copy_frac', 0) or 0) > 0 else "")
               + ", the rest prose. DIFF has H heads of "
               "width d and the Transformer 2H heads of width d (the same projection shapes; DIFF adds the λ "
               "vectors and the shared sub-layer norm). Both archs of a pair share the seed: the same initial "
               "weight stream, batches and needle documents.\n")
    out.append("| dim | DIFF heads | Transformer heads | DIFF params (non-emb.) | Transformer params (non-emb.) |")
    out.append("|---|---|---|---|---|")
    for d in r.dims:
        cells = []
        for a in ARCHS:
            base = r.models.get((a, d, 1))
            if base:
                info = model_info(base)
                t, ne = info["params"], info["params_nonembed"]
                cells.append(f"{t:,} ({ne:,})")
            else:
                cells.append("n/a")
        out.append(f"| {d} | {heads_of(r, 'diff', d)} | {heads_of(r, 'transformer', d)} | {cells[0]} | {cells[1]} |")
    out.append("")


def warm_induction(r):
    """{(arch, dim, seed): induction.RunResult} of each finished model's copy-document warm-up, by the induction
    study's score and threshold (tools/induction.py: one definition of "formed"); {} without a warm-up."""
    s = r.settings
    if int(s.get("warm_steps", 0) or 0) <= 0:
        return {}
    import induction
    V, steps = int(s["vocab"]), int(s["warm_steps"])
    out = {}
    for (a, d, seed), base in sorted(r.models.items()):
        p = base + ".warm.jsonl"
        if os.path.exists(p):
            res = induction.RunResult(os.path.basename(base), induction.read_scores(p), steps, V)
            if res.complete:
                out[(a, d, seed)] = res
    return out


def section_warmup(r, out):
    """Whether each model's copy-document warm-up formed induction."""
    if not r.induction:
        return
    import induction
    V, steps = int(r.settings["vocab"]), int(r.settings["warm_steps"])
    out.append("## Induction warm-up\n")
    out.append(f"The induction score over the last 10% of the {steps} warm-up steps: the loss on each copy row's "
               "first period (unpredictable) less the loss on its repeats (predictable by looking back), in nats; "
               f"0 without induction, up to about ln V = {math.log(V):.2f}. Formed at ≥ ln V / 2, partly at ≥ "
               f"{induction.ONSET_NATS:g} (as in the induction study). The training loss beside it.\n")
    out.append("| dim | seed | Transformer score (loss) | DIFF score (loss) |")
    out.append("|---|---|---|---|")
    by = {}
    for (a, d, seed), res in r.induction.items():
        by.setdefault((d, seed), {})[a] = f"{res.final:.2f}, {res.state} ({res.final_loss:.2f})"
    for (d, seed), c in sorted(by.items()):
        out.append(f"| {d} | {seed} | {c.get('transformer', 'n/a')} | {c.get('diff', 'n/a')} |")
    out.append("")
    ind = r.abilities["formed induction"]
    out.append(f"Induction formed in {ind['DIFF'][0]} of {ind['DIFF'][1]} DIFF models and {ind['Transformer'][0]} of "
               f"{ind['Transformer'][1]} Transformers. Retrieval builds on it: the earlier recipe without this "
               "warm-up ([earlier/REPORT-2026-11-29.md](earlier/REPORT-2026-11-29.md)) formed no retrieval in any "
               "of its models (every needle cell 0.00).\n")
    section_gate(r, out)
    section_induction_study(r, out)


def section_gate(r, out):
    """The one gating rule (tools/stats.py gate()) as it applies to this stage's models: what they differ in, and
    that no comparison of them below is given a verdict about the architectures."""
    if not r.gate:
        return
    out.append(f"**These models differ in kind** ({r.gate}), so every comparison of them below, in retrieval, "
               "attention, outliers, low-bit attention, quantisation and loss alike, is reported as measured and "
               "judged *not resolved (confounded)*: a model that copies from its context and one that does not "
               "differ in what they learned, whatever the architectures would do with the same ability. The "
               "induction study below asks why; the scaling and V2 stages compare the architectures on plain "
               "language modelling, where no such ability is required of either.\n")


def section_induction_study(r, out):
    """The induction study's answers (make reproduce STAGE=induction), when its runs exist."""
    d = os.path.join(r.dir, "induction")
    # the full study's logs committed by scripts/induction.sh (another machine's runs), when of this run's settings
    logs = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "reproduce",
                        "induction-logs")
    own, theirs = os.path.join(d, "settings.txt"), os.path.join(logs, "settings.txt")
    if not os.path.exists(theirs) or (os.path.exists(own) and open(own).read() != open(theirs).read()):
        logs = None
    elif any(read_settings(theirs).get(k) != r.settings.get(k) for k in ("vocab", "layers")):
        logs = None  # another recipe's study (the quick report must not show the full one)
    if not os.path.exists(own) and not logs:
        out.append("Why the split, and whether the Transformer forms induction under another recipe, is the "
                   "induction study's question: `make reproduce STAGE=induction` (not run for this report).\n")
        return
    import induction
    st = induction.Study(d, logs)
    if not st.runs:
        out.append("The induction study (`make reproduce STAGE=induction`) has no finished run yet.\n")
        return
    out.append(f"### The induction study ({len(st.runs)} of {len(st.planned) or len(st.runs)} runs; "
               "every recipe, seed and curve in [induction/INDUCTION.md](induction/INDUCTION.md))\n")
    out += induction.findings(st, "####")


def heads_of(r, arch, dim):
    base = r.models.get((arch, dim, 1))
    return model_info(base)["n_heads"] if base else "?"


def include_stage(r, out, sub, md, heading, missing):
    """Another stage's write-up (DIR/sub/md, with its figure sub/sub.png), its headings one level down, and
    its verdicts (sub/verdicts.json, computed with the write-up) into the summary's ledger."""
    path = os.path.join(r.dir, sub, md)
    if not os.path.exists(path):
        out += missing
        return
    lines = open(path).read().splitlines()
    vpath = os.path.join(r.dir, sub, "verdicts.json")
    recs = json.load(open(vpath)) if os.path.exists(vpath) else []
    if any("tier" not in rec for rec in recs):  # written by an older tool: its verdicts follow another rule
        print(f"report: {vpath} is from an older tools/; scripts/report.sh writes it again", file=sys.stderr)
        recs = []
    LEDGER.extend(recs)
    out.append(heading)
    for line in lines[1:]:  # its title is the heading above
        if line.startswith("#"):
            line = "#" + line
        out.append(line.replace(f"]({sub}.png)", f"]({sub}/{sub}.png)"))
    out.append("")


# The stages whose write-ups REPORT.md takes in whole (include_stage): folder, file, the heading's title and
# STAGE where it ran, and where it did not, the heading and the sentence that says how to run it.
STAGE_WRITEUPS = {
    "scaling": ("scaling", "SCALING.md", "Scaling on plain language modelling", "scaling",
                "Scaling with parameters and tokens (paper Fig. 3a, 3b) and Table 6's slices",
                "On plain language modelling, in its own stage: `make reproduce STAGE=scaling`"),
    "claims": ("claims", "CLAIMS.md", "In-context learning, faithfulness, loss by position", "claims",
               "In-context learning, faithfulness, loss by position (paper Fig. 4, 6, 7; Table 4)",
               "Continued from this stage's models in their own stage: `make reproduce STAGE=claims-train`, then "
               "`STAGE=claims`"),
    "v2": ("v2", "V2.md", "DIFF V2 beside V1 and the Transformer", "v2", "DIFF V2 (spec §8)",
           "On plain language modelling, in its own stage: `make reproduce STAGE=v2-lr`, then `STAGE=v2-loss`, then "
           "`STAGE=v2`"),
    "recall": ("recall", "RECALL.md", "Associative recall with distractors", "recall",
               "Associative recall with distractors (the retrieval claims' mechanism)",
               "On multi-query associative recall, in its own stage: `make reproduce STAGE=recall-lr`, then "
               "`STAGE=recall`"),
    "recall-deep": ("recall-deep", "RECALL.md", "Associative recall at 4 layers", "recall-deep",
                    "Associative recall at 4 layers, where DIFF learns the task too",
                    "The recall stage at 4 layers, in its own stage: `make reproduce STAGE=recall-deep-lr`, then "
                    "`STAGE=recall-deep`"),
    "induction-time": ("induction-time", "INDUCTION_TIME.md", "Time to induction", "induction-time",
                       "Time to induction, beside a textbook GPT",
                       "Survival curves of induction's onset and formation, in its own stage: `make reproduce "
                       "STAGE=induction-time-lr`, then `STAGE=induction-time`"),
    "optimal": ("optimal", "OPTIMAL.md", "One size trained properly", "optimal",
                "One size at 20 tokens per parameter, with DIFF's ablations",
                "In its own stage: `make reproduce STAGE=optimal-lr`, `STAGE=optimal-seeds`, `STAGE=optimal`, then "
                "`STAGE=optimal-tokens`"),
}


def section_stage(r, out, key):
    """A stage's write-up (STAGE_WRITEUPS), or how to run it."""
    sub, md, title, stage, missing_title, how = STAGE_WRITEUPS[key]
    include_stage(r, out, sub, md, f"## {title} (`make reproduce STAGE={stage}`; [{sub}/{md}]({sub}/{md}))\n",
                  [f"## {missing_title}\n", f"{how} (not run for this report).\n"])


def section_lm(r, out):
    out.append(f"## Language modelling of the retrieval models (dim {r.headline}, {seeds_word(len(r.seeds))})\n")
    out.append("These models trained on the needle mixture, so their validation loss is not the scaling stage's "
               "plain language modelling (below); both archs saw the same batches.\n")
    out.append("| | Transformer | DIFF | DIFF − Transformer (per seed, 95% interval) |")
    out.append("|---|---|---|---|")
    val = {a: {s: r.final_val(a, r.headline, s) for s in r.seeds} for a in ARCHS}
    val = {a: {s: v for s, v in val[a].items() if v is not None} for a in ARCHS}
    ppl = {a: {s: (r.eval(f"ppl-{a}-s{s}") or {}).get("nll") for s in r.seeds} for a in ARCHS}
    ppl = {a: {s: v for s, v in ppl[a].items() if v is not None} for a in ARCHS}
    cv, cp = paired_ci(val["transformer"], val["diff"]), paired_ci(ppl["transformer"], ppl["diff"])
    out.append(f"| validation loss (training log) | {pm(list(val['transformer'].values()), '{:.4f}')} | "
               f"{pm(list(val['diff'].values()), '{:.4f}')} | {fmt_ci(cv, '{:+.4f}')} |")
    out.append(f"| NLL, held-out speeches (eval ppl) | {pm(list(ppl['transformer'].values()), '{:.4f}')} | "
               f"{pm(list(ppl['diff'].values()), '{:.4f}')} | {fmt_ci(cp, '{:+.4f}')} |")
    out.append("")
    per = paired(val["transformer"], val["diff"])
    rec = record("lm-retrieval", cv, t_p(per), per, -1, "Language modelling", r.gate)
    out.append(f"**Verdict** (paired t): the paper's claim (DIFF's loss lower) {say(rec)} on these models.\n")
    command(r, out, "perplexity, DIFF seed 1", "eval/ppl-diff-s1")


def needle_table(js):
    """{(n, r): (acc, lo, hi, all_acc)} of a needle JSON's Table 2 entries."""
    t = {}
    for e in js.get("table2", []):
        t[(e["n"], e["r"])] = (e["acc"], e.get("lo"), e.get("hi"), e.get("all_acc"))
    return t


def retrieving(r):
    """{arch: [seeds]} of the models that retrieve: N = 1 needle accuracy ≥ 0.5, unquantised."""
    return {a: [s for s in r.seeds if (needle_table(r.eval(f"needle-{a}-s{s}") or {}).get((1, 1)) or (0,))[0] >= 0.5]
            for a in ARCHS}


def seeds_word(n):
    return f"{n} seed" + ("" if n == 1 else "s")


def slope(xs, ys):
    """Least-squares slope of y on x."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else float("nan")


def section_needle(r, out, figs):
    out.append("## Multi-needle retrieval (paper Table 2, 4K context, 3B models)\n")
    tabs = {a: {s: needle_table(r.eval(f"needle-{a}-s{s}") or {}) for s in r.seeds} for a in ARCHS}
    keys = sorted({k for a in ARCHS for t in tabs[a].values() for k in t})
    if not keys:
        out.append("No needle results.\n")
        return
    some = r.eval(f"needle-diff-s{r.seeds[0]}") or {}
    out.append(f"Context {some.get('lengths')} tokens, {some.get('samples')} samples per depth × 5 depths per cell "
               "and seed; per-query accuracy averaged over depths, with each model's Wilson 95% interval. "
               "**Every seed** is a row: retrieval is a phase change a seed may or may not reach.\n")
    out.append("| N, R | paper Tr. / DIFF | " + " | ".join(f"Transformer s{s}" for s in r.seeds) + " | "
               + " | ".join(f"DIFF s{s}" for s in r.seeds) + " |")
    out.append("|---|---|" + "---|" * (2 * len(r.seeds)))
    for k in keys:
        p = PAPER_TABLE2.get(k, (None, None))
        cells = []
        for a in ("transformer", "diff"):
            for s in r.seeds:
                e = tabs[a][s].get(k)
                cells.append(f"{e[0]:.2f} [{e[1]:.2f}, {e[2]:.2f}]" if e and e[1] is not None else
                             f"{e[0]:.2f}" if e else "n/a")
        out.append(f"| N={k[0]}, R={k[1]} | {p[0] if p[0] is not None else '—'} / {p[1] if p[1] is not None else '—'} | "
                   + " | ".join(cells) + " |")
    out.append("")
    retrieves = r.retrieves
    out.append("Models that retrieve (N = 1 accuracy ≥ 0.5): " + "; ".join(
        f"{NAME[a]} {len(retrieves[a])} of {len(r.seeds)}" + (f" (seeds {', '.join(map(str, retrieves[a]))})"
                                                              if retrieves[a] else "") for a in ARCHS) + ".\n")
    # the claims: DIFF ahead (accuracy over the grid, per seed: bounded), and the gap growing with N (a slope: t)
    grid = {a: {s: statistics.fmean(t[k][0] for k in keys if k in t) for s, t in tabs[a].items() if t} for a in ARCHS}
    items = {a: {s: sum(e.get("queries") or 0 for e in (r.eval(f"needle-{a}-s{s}") or {}).get("table2", []))
                 for s in grid[a]} for a in ARCHS}
    cg = bounded_diff_ci(grid["transformer"], items["transformer"], grid["diff"], items["diff"])
    rg = record("needles", cg, bounded_diff_p(grid["transformer"], items["transformer"], grid["diff"], items["diff"]),
                paired(grid["transformer"], grid["diff"]), +1, "Multi-needle retrieval", r.gate)
    grow = {}
    for s in set(tabs["diff"]) & set(tabs["transformer"]):
        ks = [k for k in keys if k in tabs["diff"][s] and k in tabs["transformer"][s]]
        if len({k[0] for k in ks}) >= 2:
            grow[s] = slope([k[0] for k in ks], [tabs["diff"][s][k][0] - tabs["transformer"][s][k][0] for k in ks])
    per = [grow[s] for s in sorted(grow)]
    rs = record("needle-slope", mean_ci(per), t_p(per), per, +1, "Multi-needle retrieval", r.gate)
    out.append(f"**Verdicts**: DIFF − Transformer accuracy over the grid {fmt_ci(cg)} (per seed; an accuracy lies in "
               f"[0, 1], so a bounded interval: tools/stats.py): the paper's claim (DIFF ahead) {say(rg)}; the slope "
               f"of that gap against N {fmt_ci(rs['ci'], '{:+.3f}')} per needle (paired t): the claim (the gap grows "
               f"with N) {say(rs)}.\n")
    command(r, out, "DIFF seed 1; the same for each arch and seed", "eval/needle-diff-s1")
    hm = {a: r.eval(f"heatmap-{a}") for a in ARCHS}
    if all(hm.values()):
        figs["heatmap"] = hm
        g = hm["diff"]["cells"][0] if hm["diff"].get("cells") else {}
        out.append(f"Depth × length (N = {g.get('n')}, R = {g.get('r')}, seed-1 models): `needle_heatmap.png`.\n")
        out.append("![depth x length](needle_heatmap.png)\n")
        command(r, out, "the heatmap, DIFF", "eval/heatmap-diff")


def mass_stat(m):
    """The printed statistic of one map object: per layer normalised, then averaged over layers
    (older JSON has only the pooled one)."""
    return m.get("layer_normalized", m.get("normalized"))


def mass_rows(js, map_key="combined"):
    """{depth: {segment: share}} from an attn-mass JSON."""
    rows = {}
    for e in js.get("depths", []):
        if map_key in e:
            rows[e["depth"]] = mass_stat(e[map_key])
    return rows


def mass_all(js, group=None, map_key="combined"):
    """{segment: share} pooled over depths, for all prompts or one group ('retrieved', 'missed')."""
    e = (js.get("all_depths") or [{}])[0]
    if group:
        e = e.get(group, {})
    if not e.get("prompts", e.get("rows", 0)) or map_key not in e:
        return None
    return dict(mass_stat(e[map_key]), prompts=e.get("prompts"))


SEGS = (("answer", "answer"), ("context", "noise"), ("bos", "BOS"), ("query", "query"))


def section_mass(r, out):
    out.append("## Attention on the answer vs noise (paper Table 3)\n")
    js = {a: {s: r.eval(f"mass-{a}-s{s}") for s in r.seeds} for a in ARCHS}
    js = {a: {s: j for s, j in js[a].items() if j} for a in ARCHS}
    data = {a: {s: mass_rows(j) for s, j in js[a].items()} for a in ARCHS}
    depths = sorted({d for a in ARCHS for t in data[a].values() for d in t})
    if not depths:
        out.append("No attention-mass results.\n")
        return
    out.append("Attention of the last prompt position (the one that produces the answer) split into four segments: "
               "the answer needle, the rest of the context (noise), BOS and the query. Each attention row's four "
               "sums are divided by the row's total absolute weight, then averaged over heads and prompts per "
               "layer and over the layers, so every row and layer counts alike (DIFF's combined rows A1 − λA2 sum "
               "to 1 − λ, different per layer and near 0 where λ is near 1, and can be negative; a softmax row's "
               "shares are the plain ones). DIFF: the combined map, and A1 alone beside it. Mean ± sd over seeds; "
               "the paper's numbers in parentheses.\n")
    out.append("| depth | answer: Transformer | answer: DIFF | noise: Transformer | noise: DIFF |")
    out.append("|---|---|---|---|---|")
    for d in depths:
        p = PAPER_TABLE3.get(int(d), (None,) * 4)
        v = {(a, seg): [t[d][seg] for t in data[a].values() if d in t] for a in ARCHS for seg in ("answer", "context")}
        out.append(f"| {d:g}% | {pm(v[('transformer', 'answer')], '{:.2f}')} ({p[0]}) | "
                   f"{pm(v[('diff', 'answer')], '{:.2f}')} ({p[1]}) | "
                   f"{pm(v[('transformer', 'context')], '{:.2f}')} ({p[2]}) | "
                   f"{pm(v[('diff', 'context')], '{:.2f}')} ({p[3]}) |")
    out.append("")
    # every segment, all depths pooled: combined and A1-only, all prompts and split by retrieval
    out.append("Every segment, all depths pooled (mean over seeds; prompts: the number behind each row, summed "
               "over seeds):\n")
    out.append("| model, map | prompts | " + " | ".join(n for _, n in SEGS) + " |")
    out.append("|---|---|" + "---|" * len(SEGS))
    for a in ARCHS:
        maps = (("combined", "A1 − λA2"), ("a1", "A1 alone")) if a == "diff" else (("combined", "softmax"),)
        for mk, mname in maps:
            for group, gname in ((None, "all"), ("retrieved", "retrieved"), ("missed", "missed")):
                rows = [mass_all(j, group, mk) for j in js[a].values()]
                rows = [x for x in rows if x]
                if not rows:
                    continue
                n = sum(x["prompts"] or 0 for x in rows)
                cells = [pm([x[k] for x in rows], "{:.2f}") for k, _ in SEGS]
                out.append(f"| {NAME[a]}, {mname}, {gname} | {n} | " + " | ".join(cells) + " |")
    out.append("")
    # verdicts: per seed the mean over depths, DIFF − Transformer by seed; a share lies in [-1, 1] (a combined
    # weight can be negative): bounded intervals, items the prompts
    def per_seed(a, seg):
        return {s: statistics.fmean(t[d][seg] for d in t) for s, t in data[a].items() if t}

    prompts = {a: {s: (mass_all(j) or {}).get("prompts") for s, j in js[a].items()} for a in ARCHS}
    parts = []
    for seg, key, sign, what in (("answer", "mass-answer", +1, "more on the answer"),
                                 ("context", "mass-noise", -1, "less noise")):
        t, d = per_seed("transformer", seg), per_seed("diff", seg)
        ci = bounded_diff_ci(t, prompts["transformer"], d, prompts["diff"], -1.0, 1.0)
        rec = record(key, ci, bounded_diff_p(t, prompts["transformer"], d, prompts["diff"], -1.0, 1.0), paired(t, d),
                     sign, "Attention on the answer", r.gate)
        parts.append(f"share on the {'answer' if seg == 'answer' else 'noise'} {fmt_ci(ci)}: the claim ({what}) "
                     f"{say(rec)}")
    out.append("**Verdicts** (DIFF − Transformer, mean over depths, per seed; shares lie in [−1, 1], so bounded "
               "intervals): " + "; ".join(parts) + ".\n")
    command(r, out, "DIFF seed 1", "eval/mass-diff-s1")


STAT_KEYS = ("top1", "top2", "top3", "top10", "top100", "median")


def section_outliers(r, out):
    out.append("## Activation outliers (paper Table 5)\n")
    rows = []
    top1 = {}
    key = {"logits": "attention_logits", "hidden": "hidden_states"}
    for q, title in (("logits", "Attention logits"), ("hidden", "Hidden states")):
        for a in ("transformer", "diff"):
            vals = {s: (r.eval(f"outliers-{a}-s{s}") or {}).get(key[q]) for s in r.seeds}
            vals = {s: v for s, v in vals.items() if v}
            if not vals:
                continue
            cells = [pm([v[k] for v in vals.values()], "{:.1f}" if k != "median" else "{:.2f}") for k in STAT_KEYS]
            paper = PAPER_TABLE5[(q, a)]
            rows.append(f"| {NAME[a]} | {title} | " + " | ".join(
                f"{c} ({p})" for c, p in zip(cells, paper)) + " |")
            top1[(q, a)] = {s: v["top1"] for s, v in vals.items()}
    if not rows:
        out.append("No outlier results.\n")
        return
    some = r.eval(f"outliers-diff-s{r.seeds[0]}") or {}
    out.append(f"Over {some.get('tokens', '?')} held-out tokens per model (paper: 0.4M); |values| pooled over all "
               "layers, heads (both maps for DIFF) and causal positions; mean ± sd over seeds, paper in "
               "parentheses.\n")
    out.append("| Model | Activation | Top-1 | Top-2 | Top-3 | Top-10 | Top-100 | Median |")
    out.append("|---|---|---|---|---|---|---|---|")
    out.extend(rows)
    out.append("")
    parts = []
    for q, paper in (("logits", "8.2×"), ("hidden", "2.1×")):
        if (q, "diff") not in top1 or (q, "transformer") not in top1:
            continue
        # per seed log(Transformer top-1 / DIFF top-1): the claim is that it is positive
        logs = {s: math.log(top1[(q, "transformer")][s] / top1[(q, "diff")][s])
                for s in set(top1[(q, "transformer")]) & set(top1[(q, "diff")])}
        per = [logs[s] for s in sorted(logs)]
        ci = mean_ci(per)
        ratio = (f"{math.exp(ci[0]):.2f}× [{math.exp(ci[1]):.2f}, {math.exp(ci[2]):.2f}]"
                 if ci and ci[3] > 1 else f"{math.exp(ci[0]):.2f}× (1 seed)" if ci else "n/a")
        what = "attention logit" if q == "logits" else "hidden state"
        rec = record("top-logit" if q == "logits" else "top-hidden", ci, t_p(per), per, +1, "Activation outliers",
                     r.gate)
        parts.append(f"the Transformer's top {what} is {ratio} DIFF's (paper {paper}): the claim (fewer outliers "
                     f"with DIFF) {say(rec)}")
    out.append("**Verdicts** (the ratio's geometric mean over seeds, 95% interval of the log ratio, paired t): "
               + "; ".join(parts) + ".\n")
    command(r, out, "DIFF seed 1", "eval/outliers-diff-s1")


QUANT_BITS = (16, 8, 6, 4)
SCOPES = ("row", "tensor")


def quant_results(r):
    """{(arch, scope, bits): {seed: (ppl, needle acc)}}; 16 bits is unquantised (both scopes)."""
    res = {}
    for a in ARCHS:
        for sc in SCOPES:
            for b in QUANT_BITS:
                per = {}
                for s in r.seeds:
                    ppl = r.eval(f"quant16-ppl-{a}-s{s}" if b == 16 else f"quant{b}-{sc}-ppl-{a}-s{s}")
                    nd = r.eval(f"quant16-needle-{a}-s{s}" if b == 16 else f"quant{b}-{sc}-needle-{a}-s{s}")
                    acc = statistics.fmean(e["acc"] for e in nd["table2"]) if nd and nd.get("table2") else None
                    if ppl or acc is not None:
                        per[s] = (ppl.get("ppl") if ppl else None, acc)
                res[(a, sc, b)] = per
    return res


def section_quant(r, out, figs):
    out.append("## Low-bit attention logits (paper Fig. 8, HellaSwag accuracy)\n")
    res = quant_results(r)
    if not any(res.values()):
        out.append("No low-bit results.\n")
        return
    out.append("Dynamic absmax quantisation of the pre-softmax logits inside the attention kernel (z1 and z2 "
               "separately for DIFF), with one scale per head and query row (*row*) or per layer and map over the "
               "whole forward pass (*tensor*, where one outlier logit coarsens every other). Perplexity on the "
               "held-out speeches (the same tokens at every width) and needle accuracy (the Table 2 grid "
               "averaged; 8 and 6 bits: perplexity only), mean over seeds; the needle columns count only models "
               "that retrieve (N = 1 accuracy ≥ 0.5 unquantised). 16 = unquantised.\n")
    needle_ok = r.retrieves
    out.append("| bits | scope | Transformer ppl | DIFF ppl | Transformer needle acc | DIFF needle acc | "
               "paper HellaSwag Tr. / DIFF |")
    out.append("|---|---|---|---|---|---|---|")
    for b in QUANT_BITS:
        for sc in (SCOPES if b != 16 else ("—",)):
            key = (lambda a: (a, "row" if b == 16 else sc, b))
            cells = []
            for col in ("ppl", "acc"):
                for a in ("transformer", "diff"):
                    per = res[key(a)]
                    if col == "ppl":
                        cells.append(pm([v[0] for v in per.values() if v[0] is not None], "{:.2f}"))
                    elif b in (8, 6):
                        cells.append("—")
                    else:
                        xs = [per[s][1] for s in needle_ok[a] if s in per and per[s][1] is not None]
                        cells.append(pm(xs, "{:.2f}") if xs else "no model retrieves")
            out.append(f"| {b} | {sc} | " + " | ".join(cells) +
                       f" | {PAPER_FIG8['transformer'][b]} / {PAPER_FIG8['diff'][b]} |")
    out.append("")
    parts = []
    for sc in SCOPES:
        # per seed: log(ppl4 / ppl16) of DIFF − of the Transformer; the claim: negative (DIFF degrades less)
        def deg(a):
            q, u = res[(a, sc, 4)], res[(a, "row", 16)]
            return {s: math.log(q[s][0] / u[s][0]) for s in set(q) & set(u) if q[s][0] and u[s][0]}
        per = paired(deg("transformer"), deg("diff"))
        rec = record(f"attn4-{sc}", mean_ci(per), t_p(per), per, -1, "Low-bit attention logits", r.gate)
        parts.append(f"{sc} scope, 4-bit perplexity growth DIFF − Transformer (log ratio) "
                     f"{fmt_ci(rec['ci'], '{:+.4f}')}: the claim (DIFF degrades less) {say(rec)}")
    both = [s for s in needle_ok["diff"] if s in needle_ok["transformer"]]
    if both:
        parts.append(f"needle accuracy at 4 bits is compared on seeds {both}, where both archs retrieve")
    else:
        parts.append("the needle columns cannot test the claim: " + (
            "no model retrieves" if not any(needle_ok.values()) else
            "only " + " and ".join(f"{NAME[a]} seeds {needle_ok[a]}" for a in ARCHS if needle_ok[a]) + " retrieve"))
    out.append("**Verdicts** (per seed, paired t): " + "; ".join(parts) + ".\n")
    figs["quant"] = {a: {b: (statistics.fmean([v[0] for v in res[(a, "row", b)].values() if v[0]] or [float("nan")]),
                             statistics.fmean([v[1] for v in res[(a, "row", b)].values() if v[1] is not None]
                                              or [float("nan")]))
                         for b in QUANT_BITS} for a in ARCHS}
    out.append("![low-bit attention](quant.png)\n")
    command(r, out, "4-bit perplexity, row scope, DIFF seed 1", "eval/quant4-row-ppl-diff-s1")
    command(r, out, "4-bit needles, tensor scope, DIFF seed 1", "eval/quant4-tensor-needle-diff-s1")


WQ_SCHEMES = ("w8a16", "w8a8", "w4a16")


def wq_results(r):
    """{(arch, scheme): {seed: (ppl, needle acc)}}, scheme "fp32" the unquantised baseline on the same tokens."""
    res = {}
    for a in ARCHS:
        for q in ("fp32",) + WQ_SCHEMES:
            per = {}
            for s in r.seeds:
                ppl = r.eval(f"quant16-ppl-{a}-s{s}" if q == "fp32" else f"wq-{q}-ppl-{a}-s{s}")
                nd = r.eval(f"quant16-needle-{a}-s{s}" if q == "fp32" else f"wq-{q}-needle-{a}-s{s}")
                acc = statistics.fmean(e["acc"] for e in nd["table2"]) if nd and nd.get("table2") else None
                if ppl or acc is not None:
                    per[s] = (ppl.get("ppl") if ppl else None, acc)
            res[(a, q)] = per
    return res


def section_wquant(r, out):
    """Quantised models (difftx quantize): does DIFF lose less than the Transformer, especially under w8a8?"""
    res = wq_results(r)
    if not any(res[(a, q)] for a in ARCHS for q in WQ_SCHEMES):
        return
    out.append("## Quantised models (`difftx quantize`: int8 and 4-bit weights, int8 activations)\n")
    out.append("Each model quantised after training (docs/quantize.md): w8a16 int8 weights per output channel with "
               "bf16 activations; w8a8 the same weights with every linear input and the attention's q, k on static "
               "int8 grids (absmax ranges, where an outlier activation coarsens the grid of every other value); w4a16 "
               "the layers' weights 4-bit in groups of 32, the embedding and output int8. Calibration: 300 windows "
               "of the training tokens; weight clipping searched on them. Perplexity on the same held-out tokens as the unquantised baseline (fp32) and "
               "needle accuracy (the Table 2 grid averaged, on models that retrieve unquantised); mean ± sd over "
               "seeds, and the perplexity's growth over fp32 per seed.\n")
    ret = r.retrieves
    out.append("| weights | Transformer ppl | DIFF ppl | Transformer growth | DIFF growth | Transformer needle acc | "
               "DIFF needle acc |")
    out.append("|---|---|---|---|---|---|---|")

    def growth(a, q):
        qv, base = res[(a, q)], res[(a, "fp32")]
        return {s: math.log(qv[s][0] / base[s][0]) for s in set(qv) & set(base) if qv[s][0] and base[s][0]}

    for q in ("fp32",) + WQ_SCHEMES:
        cells = [pm([v[0] for v in res[(a, q)].values() if v[0] is not None], "{:.2f}") for a in ("transformer", "diff")]
        for a in ("transformer", "diff"):
            g = list(growth(a, q).values())
            pct = [100 * (math.exp(x) - 1) for x in g]
            cells.append("—" if q == "fp32" else "n/a" if not pct else f"{statistics.fmean(pct):+.2f}%" +
                         (f" ± {statistics.stdev(pct):.2f}%" if len(pct) > 1 else ""))
        for a in ("transformer", "diff"):
            xs = [res[(a, q)][s][1] for s in ret[a] if s in res[(a, q)] and res[(a, q)][s][1] is not None]
            cells.append(pm(xs, "{:.2f}") if xs else "no model retrieves")
        out.append(f"| {q} | " + " | ".join(cells) + " |")
    out.append("")
    parts = []
    for q in WQ_SCHEMES:
        per = paired(growth("transformer", q), growth("diff", q))
        rec = record(q, mean_ci(per), t_p(per), per, -1, "Quantised models", r.gate)
        parts.append(f"{q}: perplexity growth DIFF − Transformer (log ratio) {fmt_ci(rec['ci'], '{:+.4f}')}, the "
                     f"claim (DIFF loses less) {say(rec)}")
    both = [s for s in ret["diff"] if s in ret["transformer"]]
    if not both:
        parts.append("the needle columns cannot compare the archs: " + (
            "no model retrieves" if not any(ret.values()) else
            "only " + " and ".join(f"{NAME[a]} seeds {ret[a]}" for a in ARCHS if ret[a]) + " retrieve"))
    out.append("**Verdicts** (per seed, paired t; claims of ours, not the paper's: it quantises attention logits "
               "only): " + "; ".join(parts) + ".\n")
    command(r, out, "quantising, w8a8, DIFF seed 1", "eval/wq-w8a8-quantize-diff-s1")
    command(r, out, "its perplexity", "eval/wq-w8a8-ppl-diff-s1")
    section_wquant_methods(r, out, res)
    section_wquant_kinds(r, out)
    # the calibration set's size (seed-1 models, w8a8)
    s1 = r.seeds[0] if r.seeds else 1
    sizes = (16, 32, 100, 300, 1000)
    rows = {a: {n: (r.eval(f"calib{n}-w8a8-ppl-{a}-s{s1}") or {}).get("ppl") for n in sizes} for a in ARCHS}
    base = {a: (r.eval(f"quant16-ppl-{a}-s{s1}") or {}).get("ppl") for a in ARCHS}
    if any(v for a in ARCHS for v in rows[a].values()):
        out.append("**The calibration set's size** (w8a8, seed-1 models; deployment tools recommend at least 300 "
                   "samples): perplexity growth over fp32 by the number of calibration windows.\n")
        out.append("| windows | " + " | ".join(f"{NAME[a]}" for a in ("transformer", "diff")) + " |")
        out.append("|---|---|---|")
        for n in sizes:
            cells = [f"{100 * (rows[a][n] / base[a] - 1):+.2f}%" if rows[a][n] and base[a] else "n/a"
                     for a in ("transformer", "diff")]
            out.append(f"| {n} | " + " | ".join(cells) + " |")
        out.append("")
        for a in ("transformer", "diff"):
            got = [n for n in sizes if rows[a][n]]
            if len(got) == len(sizes) and base[a]:
                best = min(rows[a][n] for n in sizes)
                at300 = rows[a][300]
                out.append(f"{NAME[a]}: 300 windows give {100 * (at300 / base[a] - 1):+.2f}%, the best size "
                           f"{100 * (best / base[a] - 1):+.2f}%" + (" (300 is the best)" if at300 == best else "")
                           + "; 1000 windows " + ("improve on 300" if rows[a][1000] < at300 else "do not improve on 300")
                           + ".\n")


def section_wquant_methods(r, out, res):
    """w8a8 under each activation-range method: the verdict with each arch at its own best method."""
    methods = ("absmax", "percentile", "mse")

    def growth(a, meth):
        base = res[(a, "fp32")]
        g = {}
        for s in base:
            name = f"wq-w8a8-ppl-{a}-s{s}" if meth == "absmax" else f"wq-w8a8-{meth}-ppl-{a}-s{s}"
            v = (r.eval(name) or {}).get("ppl")
            if v and base[s][0]:
                g[s] = math.log(v / base[s][0])
        return g

    g = {(a, meth): growth(a, meth) for a in ARCHS for meth in methods}
    if not any(g[(a, meth)] for a in ARCHS for meth in methods if meth != "absmax"):
        return
    out.append("**w8a8's activation ranges** (docs/quantize.md, `--act-method`): perplexity growth over fp32, mean ± sd "
               "over seeds, for each way of choosing the static int8 ranges from the calibration set.\n")
    out.append("| method | Transformer | DIFF |")
    out.append("|---|---|---|")
    for meth in methods:
        cells = []
        for a in ("transformer", "diff"):
            pct = [100 * (math.exp(x) - 1) for x in g[(a, meth)].values()]
            cells.append("n/a" if not pct else f"{statistics.fmean(pct):+.2f}%" +
                         (f" ± {statistics.stdev(pct):.2f}%" if len(pct) > 1 else ""))
        out.append(f"| {meth} | " + " | ".join(cells) + " |")
    out.append("")
    best = {a: min((meth for meth in methods if g[(a, meth)]), key=lambda m: statistics.fmean(g[(a, m)].values()))
            for a in ARCHS if any(g[(a, meth)] for meth in methods)}
    if len(best) == len(ARCHS):
        per = paired(g[("transformer", best["transformer"])], g[("diff", best["diff"])])
        rec = record("w8a8-best", mean_ci(per), t_p(per), per, -1, "Quantised models", r.gate)
        out.append(f"Each arch at its best method (Transformer {best['transformer']}, DIFF {best['diff']}; chosen by the "
                   f"mean over the same seeds, for both alike): perplexity growth DIFF − Transformer (log ratio) "
                   f"{fmt_ci(rec['ci'], '{:+.4f}')}, the claim (DIFF loses less under w8a8) {say(rec)}.\n")


A8_KINDS = (("attn_in", "the attention's input (q, k, v projections)"), ("attn_out", "the attention's output (out "
            "projection)"), ("ffn_in", "the FFN's input (w1, w3)"), ("ffn_hidden", "the FFN's hidden state (w2)"),
            ("qk", "the attention's q and k"), ("output", "the output projection's input"))


def section_wquant_kinds(r, out):
    """Where w8a8 loses: each kind of input alone on its int8 grid (seed 1, a diagnostic, not a verdict)."""
    s1 = r.seeds[0] if r.seeds else 1
    base = {a: (r.eval(f"quant16-ppl-{a}-s{s1}") or {}).get("ppl") for a in ARCHS}
    rows = {a: {k: (r.eval(f"a8only-{k}-ppl-{a}-s{s1}") or {}).get("ppl") for k, _ in A8_KINDS} for a in ARCHS}
    if not any(v for a in ARCHS for v in rows[a].values()):
        return
    out.append("**Where w8a8 loses** (seed-1 models, absmax ranges; a diagnostic on one seed, not a verdict): "
               "perplexity growth over fp32 with one kind of input at a time on its int8 grid and every other kept "
               "bf16 (int8 weights throughout; `difftx quantize --a16-inputs`). The full w8a8 row puts them all on "
               "int8 at once.\n")
    out.append("| int8 input | Transformer | DIFF |")
    out.append("|---|---|---|")
    for k, what in A8_KINDS:
        cells = [f"{100 * (rows[a][k] / base[a] - 1):+.2f}%" if rows[a][k] and base[a] else "n/a"
                 for a in ("transformer", "diff")]
        out.append(f"| {what} | " + " | ".join(cells) + " |")
    full = {a: (r.eval(f"wq-w8a8-ppl-{a}-s{s1}") or {}).get("ppl") for a in ARCHS}
    out.append("| all of them (w8a8) | " + " | ".join(
        f"{100 * (full[a] / base[a] - 1):+.2f}%" if full[a] and base[a] else "n/a" for a in ("transformer", "diff")) + " |")
    out.append("")
    if all(rows["diff"][k] and rows["transformer"][k] and base["diff"] and base["transformer"] for k, _ in A8_KINDS):
        gap = {k: math.log(rows["diff"][k] / base["diff"]) - math.log(rows["transformer"][k] / base["transformer"])
               for k, _ in A8_KINDS}
        worst = max(gap, key=gap.get)
        out.append(f"The largest DIFF − Transformer difference comes from {dict(A8_KINDS)[worst]} "
                   f"({gap[worst]:+.4f} in log perplexity).\n")


def section_maps(r, out, figs):
    out.append("## Attention maps\n")
    maps = {a: os.path.join(r.dir, "eval", f"map-{a}.json") for a in ARCHS}
    if not all(os.path.exists(p) for p in maps.values()):
        out.append("No attention maps.\n")
        return
    figs["maps"] = maps
    out.append("The last layer's head 0 on a short needle prompt (seed-1 models): DIFF's two maps and their "
               "difference A1 − λA2, and the Transformer's map.\n")
    out.append("![attention maps](attn_map.png)\n")
    command(r, out, "DIFF; then `tools/plot_eval.py attn-map` on both archs' JSON", "eval/map-diff")


# ---------------------------------------------------------------- figures

EARLIER = "earlier"  # docs/reproduce/earlier: the reports of earlier recipes, kept with the commit that wrote them
EARLIER_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "reproduce", EARLIER)


def table_after(text, heading):
    """The rows (lists of cells) of the first Markdown table after HEADING in TEXT."""
    rows, seen = [], False
    for line in text[text.index(heading):].splitlines()[1:]:
        if line.startswith("|"):
            seen = True
            cells = [c.strip() for c in line.strip("|").split("|")]
            if not set("".join(cells)) <= set("-: "):
                rows.append(cells)
        elif seen:
            break
    return rows[1:]  # without the header


def earlier_findings():
    """The numbers "Earlier recipes" cites, read from the kept reports themselves (None where one is missing)."""
    def read(day):
        p = os.path.join(EARLIER_DIR, f"REPORT-{day}.md")
        return open(p).read() if os.path.exists(p) else None
    a, b = read("2026-11-29"), read("2026-11-30")
    if not a or not b:
        return None
    gaps = [float(c[2]) - float(c[1]) for c in table_after(a, "## Scaling with parameters")]
    lm = re.search(r"\| validation loss \(training log\) \| [^|]* \| [^|]* \| \+([0-9.]+) ±", a)
    needles = [row[i] for row in table_after(a, "## Multi-needle retrieval") for i in (2, 4, 5)]  # "(ours)"
    ind = re.search(r"Induction formed in (\d+) of (\d+) DIFF models and (\d+) of (\d+) Transformers", b)
    params = re.search(r"DIFF needs (\d+)% of the Transformer's non-embedding parameters", b)
    tokens = re.search(r"after an estimated [0-9,]+ tokens, (\d+)% of them", b)
    return {"gap_lo": min(gaps), "gap_hi": max(gaps), "dims": len(gaps), "lm": float(lm[1]),
            "none_retrieved": all(c.startswith("0.00") for c in needles), "induction": ind.groups(),
            "params": int(params[1]), "tokens": int(tokens[1])}


def section_earlier(out):
    """Earlier recipes whose results point the other way: stated, not dropped, each number read from a kept
    report (earlier_findings)."""
    f = earlier_findings()
    if not f:
        return
    out.append("## Earlier recipes whose results point the other way\n")
    out.append("Two earlier versions of this recipe wrote full reports, kept as they were written (each names the "
               "commit and command that made it), because a reader weighing the verdicts above should know them:\n")
    out.append(f"- [{EARLIER}/REPORT-2026-11-29.md]({EARLIER}/REPORT-2026-11-29.md): no copy warm-up, 50% needle "
               f"rows and 50% prose, one lr (3e-3) for both archs, {f['dims']} sizes. DIFF's validation loss trailed "
               f"the Transformer's at every size (by {f['gap_lo']:.3f} to {f['gap_hi']:.3f} nats; at the largest by "
               f"{f['lm']:.3f} over 3 seeds)" + (", and no model retrieved a needle (every cell 0.00)."
                                                   if f["none_retrieved"] else "."))
    d, dn, t, tn = f["induction"]
    out.append(f"- [{EARLIER}/REPORT-2026-11-30.md]({EARLIER}/REPORT-2026-11-30.md): the copy warm-up at one lr for "
               f"both archs, one seed per size below the largest. DIFF formed induction in {d} of {dn} warm-ups and "
               f"the Transformer in {t} of {tn}, and that report read DIFF needing {f['params']}% of the parameters "
               f"and {f['tokens']}% of the tokens off models trained on the needle mixture: models that differ in "
               "kind, which the gating rule now calls confounded. The scaling stage measures those two claims on "
               "plain language modelling, each arch at its own learning rate, 3 seeds per size.\n")


def lambda_stages(r):
    """[(stage, folder)] of the stages whose DIFF models the λ section reads."""
    return [("main", r.dir), ("scaling", os.path.join(r.dir, "scaling")), ("claims", os.path.join(r.dir, "claims")),
            ("v2", os.path.join(r.dir, "v2"))] + [
        (f"v2 {h}", os.path.join(r.dir, "v2", h)) for h in ("high", "high8", "high16")] + [
        ("recall", os.path.join(r.dir, "recall")), ("recall, 4 layers", os.path.join(r.dir, "recall-deep")),
        ("induction-time", os.path.join(r.dir, "induction-time")),
        ("optimal", os.path.join(r.dir, "optimal"))] + [
        (f"optimal {b}× tokens", os.path.join(r.dir, "optimal", f"tokens-{b}")) for b in ("0.25", "0.5", "1.25")] + [
        ("conversion", os.path.join(r.dir, "optimal", "conversion"))]


# The DIFF V1 models' names in every stage (convdiff: a Transformer converted to DIFF, the optimal stage's
# conversion); not a recall run's warm-up model (NAME.warm, kept where it trained, not in docs/reproduce:
# its λ is the start of NAME's trace)
LAMBDA_MODELS = r"((?:conv)?diff(?:nonorm)?-(?!.*\.warm$).+)"


def lambda_rows(r):
    """[(stage, model, [λ per layer])] of every finished DIFF V1 model of the report's stages (their difftx info
    records: the learned λ = exp(λq1·λk1) − exp(λq2·λk2) + λ_init of each layer)."""
    rows = []
    for stage, d in lambda_stages(r):
        for (name,), base in finished_models(d, LAMBDA_MODELS).items():
            p = base + ".info.json"
            if not os.path.exists(p):
                continue
            info = load(p)
            if info.get("arch") == "diff" and info.get("lambda"):
                rows.append((stage, name, info["lambda"]))
    return rows


def lambda_traces(r):
    """{stage: {model: [(step, [λ per layer])]}} from the training logs that carry λ (difftx train --log writes
    it on every step line of a DIFF run): a warm-up's log (NAME.warm.jsonl) first, the steps after it shifted
    on by its length."""
    out = {}
    for stage, d in lambda_stages(r):
        for (name,), base in finished_models(d, LAMBDA_MODELS).items():
            trace, shift = [], 0
            for part in (base + ".warm.jsonl", base + ".jsonl"):
                if not os.path.exists(part):
                    continue
                pts = [(s + shift, e["lambda"]) for s, e in read_entries(part) if isinstance(e.get("lambda"), list)]
                trace += pts
                if pts:
                    shift = pts[-1][0]
            if trace:  # the variant without the per-head norm apart: its λ is another story
                out.setdefault(stage + (", no per-head norm" if name.startswith("diffnonorm") else ""), {})[name] = trace
    return out


def fmt_lambda(x):
    return f"{x:.3f}" if abs(x) < 100 else f"{x:.2g}"


def section_lambda(r, out, figs):
    """The learned λ of every DIFF model, shown as they are, beside λ_init and what the official maintainers
    report for their models."""
    rows = lambda_rows(r)
    if not rows:
        return
    layers = max(len(l) for _, _, l in rows)
    out.append("## The learned λ\n")
    out.append("DIFF's λ per layer, λ = exp(λq1·λk1) − exp(λq2·λk2) + λ_init, of every DIFF model in this report "
               "(`difftx info --json`), as learned: nothing bounds it to (0, 1). The official code's maintainers "
               "report for their models most λ about 0.8, especially in deep layers, 0.2–0.4 in the first few, a "
               "few above 1, and none negative "
               "([microsoft/unilm#1699](https://github.com/microsoft/unilm/issues/1699)).\n")
    out.append("| stage | model | " + " | ".join(f"layer {i}" for i in range(layers)) + " |")
    out.append("|---|---|" + "---|" * layers)
    init = [0.8 - 0.6 * math.exp(-0.3 * i) for i in range(layers)]
    out.append("| | λ_init | " + " | ".join(f"{x:.3f}" for x in init) + " |")
    for stage, name, lam in rows:
        out.append(f"| {stage} | {name} | " + " | ".join(fmt_lambda(x) for x in lam) + " |")
    out.append("")
    vals = [(stage, x) for stage, _, lam in rows for x in lam]
    ordinary = [x for stage, x in vals if not stage.startswith("v2 high")]
    high = [x for stage, x in vals if stage.startswith("v2 high")]
    def count(xs):
        return (f"{sum(x < 0 for x in xs)} negative and {sum(x > 1 for x in xs)} above 1 of {len(xs)}"
                + (f" (from {min(xs):.3g} to {max(xs):.3g})" if xs else ""))
    out.append(f"At the stages' own learning rates: {count(ordinary)} layer values"
               + (f"; in the stability runs at 4–16× the Transformer's lr: {count(high)}" if high else "")
               + ". Unlike the maintainers' models, ours learn negative λ often: a layer with λ < 0 adds the second "
               "map instead of subtracting it. These are models of 1–3 DIFF heads trained on a few million tokens; "
               "the report does not say whether the difference comes from their size, their data or their "
               "learning rates. A λ far from 1 costs such a head little: its per-head norm rescales "
               "(A1 − λA2)V, so a large |λ| leaves the head computing ∓A2·V alone.\n")
    traces = lambda_traces(r)
    if not traces:
        out.append("λ over training is logged by every DIFF run since difftx wrote it on the log's step lines; no "
                   "stage in this report has such runs yet.\n")
        return
    figs["lambda"] = traces
    out.append("λ over training (every logged step of the runs whose logs carry it; ![λ over training](lambda.png)):\n")
    out.append("| stage | runs | left (0, 1) at some step | at the end | λ's range over training |")
    out.append("|---|---:|---:|---:|---|")
    for stage, runs in traces.items():
        left = sum(1 for t in runs.values() if any(not 0 < x < 1 for _, lam in t for x in lam))
        end = sum(1 for t in runs.values() if any(not 0 < x < 1 for x in t[-1][1]))
        xs = [x for t in runs.values() for _, lam in t for x in lam]
        out.append(f"| {stage} | {len(runs)} | {left} | {end} | {fmt_lambda(min(xs))} to {fmt_lambda(max(xs))} |")
    out.append("")


def section_regime(r, out):
    """How small the models and how short the runs are, beside the paper's, from the stages' kept records."""
    rows = []
    def span(lo, hi, fmt):
        return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else fmt.format(lo) + "–" + fmt.format(hi)

    def add(stage, d, pattern, tokens, lr_from, lr=None):
        """The finished models of D named by PATTERN (groups: arch, dim, [lr,] seed), each arch at LR[arch]."""
        models = {k: b for k, b in finished_models(d, pattern).items() if not lr or lr.get(k[0]) == k[2]}
        infos = [model_info(b) for b in models.values()]
        if not infos:
            return
        diff_heads = sorted({i["n_heads"] for (a, *_), i in zip(models, infos) if a == "diff"})
        ps = [i["params"] for i in infos]
        rows.append(f"| {stage} | {len(infos)} | {span(min(ps) / 1e6, max(ps) / 1e6, '{:.2f}')}M | "
                    f"{tokens / 1e6:.2f}M | {span(tokens / max(ps), tokens / min(ps), '{:.1f}')} | "
                    + (", ".join(map(str, diff_heads)) or "–") + f" | {lr_from} |")
    s = r.settings
    main_tokens = (int(s.get("warm_steps", 0) or 0) * int(s.get("warm_batch", 0) or 0) * int(s.get("warm_seq", 0) or 0)
                   + int(s["steps"]) * int(s["batch"]) * int(s["seq"]))
    add("main", r.dir, r"(diff|transformer)-d(\d+)-s(\d+)", main_tokens,
        "warm-up: each arch's best in the induction study; main phase: 3e-3 for both")
    for stage, sub, lr_from in (("scaling", "scaling", "a sweep at dim 128, seed 1, each arch's best"),
                                ("v2", "v2", "a sweep at dim 128, seed 1, each arch's best")):
        d = os.path.join(r.dir, sub)
        if os.path.exists(os.path.join(d, "settings.txt")):
            st = read_settings(os.path.join(d, "settings.txt"))
            lr = {}
            lp = os.path.join(d, "lr.txt")
            for line in open(lp) if os.path.exists(lp) else []:
                f = line.split()
                if len(f) == 2:
                    lr[f[0]] = f[1]
            add(stage, d, r"([a-z0-9]+)-d(\d+)-lr([0-9.e-]+)-s(\d+)", int(st["steps"]) * int(st["batch"]) * int(st["seq"]),
                lr_from, lr)
    if not rows:
        return
    out.append("## The regime\n")
    out.append("What the verdicts rest on: small models, short runs, few heads. The paper's scaling runs trained "
               "0.83–13.1B parameters on 10B tokens (0.8–12 tokens per parameter), its 3B models on 350B–1T "
               "(117–333); ours (models at the learning rate each stage compares them at; the claims stage continues "
               "the main stage's models):\n")
    out.append("| stage | models | parameters | training tokens | tokens per parameter | DIFF heads | learning rate "
               "from |")
    out.append("|---|---|---|---|---|---|---|")
    out += rows
    out.append("")
    out.append("Every learning rate was chosen on one seed at one size; where an arch's best lies at the edge of "
               "its sweep, or its loss stops falling with size, the stage's write-up says so.\n")


def draw(r, figs):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("report: matplotlib missing, no figures (scripts/setup.sh --plot)", file=sys.stderr)
        return
    tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plot_eval.py")
    if "heatmap" in figs:
        subprocess.run([sys.executable, tool, "needle-heatmap", os.path.join(r.dir, "eval", "heatmap-transformer.json"),
                        os.path.join(r.dir, "eval", "heatmap-diff.json"),
                        "--out", os.path.join(r.dir, "needle_heatmap.png")], check=False)
    if "quant" in figs:
        res = figs["quant"]
        bits = (16, 8, 6, 4)
        fig, ax = plt.subplots(1, 2, figsize=(10, 4))
        for a, c in (("transformer", "tab:blue"), ("diff", "tab:red")):
            ax[0].plot(bits, [res[a][b][0] or float("nan") for b in bits], "o-", color=c, label=NAME[a])
            ax[1].plot(bits, [res[a][b][1] if res[a][b][1] is not None else float("nan") for b in bits], "o-",
                       color=c, label=NAME[a])
        for x, t in zip(ax, ("perplexity (held-out)", "needle accuracy")):
            x.set_xticks(bits)
            x.invert_xaxis()
            x.set_xlabel("attention-logit bits")
            x.set_title(t)
            x.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(r.dir, "quant.png"), dpi=110)
        plt.close(fig)
    if "lambda" in figs:
        traces = figs["lambda"]
        cols = min(3, len(traces))  # a grid three panels wide: one row of nine is unreadable on a page
        rows = (len(traces) + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.4 * rows), squeeze=False)
        for ax in axes.flat[len(traces):]:
            ax.set_visible(False)
        for ax, (stage, runs) in zip(axes.flat, traces.items()):
            for i, t in enumerate(runs.values()):
                for l in range(len(t[0][1])):
                    ax.plot([s for s, _ in t], [lam[l] for _, lam in t], color=f"C{l % 10}", alpha=0.4, lw=0.8,
                            label=f"layer {l}" if i == 0 else None)
            ax.axhspan(0, 1, color="0.93", zorder=-1)
            if max(abs(x) for t in runs.values() for _, lam in t for x in lam) > 20:
                ax.set_yscale("symlog", linthresh=1)  # λ far outside (0, 1): its sign and order of magnitude
            ax.set_title(f"{stage}: {len(runs)} DIFF runs", fontsize=9)
            ax.set_xlabel("step")
            ax.set_ylabel("λ")
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(r.dir, "lambda.png"), dpi=110)
        plt.close(fig)
    if "maps" in figs:
        subprocess.run([sys.executable, tool, "attn-map", figs["maps"]["diff"], figs["maps"]["transformer"],
                        "--out", os.path.join(r.dir, "attn_map.png")], check=False)


TIER_TITLE = {
    PRIMARY: ("The paper's primary claims", f"its headline results; Holm's correction over the {N_PRIMARY} "
              "(a confounded or unmeasured claim counts with p = 1, so it never loosens the others')"),
    EXPLORATORY: ("The paper's other claims (exploratory)", "each tested at 0.05 uncorrected: read a single "
                  "*held* or *did not hold* among them as a lead, not a finding"),
    OURS: ("Claims of ours, not the paper's", "questions the paper does not ask, each at 0.05 uncorrected")}


def tally(recs):
    v = [r["final"] for r in recs]
    conf = sum(x.startswith("not resolved (confounded") for x in v)
    return (f"{sum(x == 'held' for x in v)} held, {sum(x == 'did not hold' for x in v)} did not hold, "
            f"{sum(x.startswith('not resolved') for x in v)} not resolved" + (f" ({conf} confounded)" if conf else "")
            + (f", {sum(x == 'not measured' for x in v)} not measured" if any(x == "not measured" for x in v) else ""))


def summary():
    """Every claim of the report in three tables, primary (corrected), exploratory and ours: what did not hold is
    listed as plainly as what held (the sections below give each its numbers)."""
    if not LEDGER:
        return []
    out = ["## Verdicts at a glance\n",
           "Every verdict is computed by tools/stats.py from the section named (docs/reproduce.md, \"How a verdict "
           "is reached\"): the difference per seed, two-sided at 0.05, t intervals for losses and log ratios and "
           "bounded intervals (Wilson at the seeds' effective sample size) for accuracies and shares; *not resolved* where the test does not "
           "reject, or fewer than 3 seeds were measured, or, *confounded*, where the models compared differ in an "
           "ability (retrieval, induction) whatever the interval. A *not resolved* whose direction holds in every "
           "seed says so.\n"]
    for tier in (PRIMARY, EXPLORATORY, OURS):
        recs = [r for r in LEDGER if r["tier"] == tier]
        if not recs:
            continue
        title, why = TIER_TITLE[tier]
        out.append(f"### {title}: {tally(recs)}\n")
        out.append(f"{why[0].upper() + why[1:]}.\n")
        out.append("| claim | difference [95% CI] | p | " + ("Holm p | " if tier == PRIMARY else "")
                   + "seeds on the claim's side | verdict | section |")
        out.append("|---|---|---|" + ("---|" if tier == PRIMARY else "") + "---|---|---|")
        reasons = {}
        for rec in recs:
            pro, _, n = direction(rec)
            v = rec["final"]
            if rec.get("gate"):  # the reason once under the table, a letter here
                reasons.setdefault(rec["gate"], "abcdefgh"[len(reasons) % 8])
                v = f"not resolved (confounded: {reasons[rec['gate']]})"
            v = f"**{v}**" + holds_every_seed(rec) + (f"; {rec['terms']}" if rec.get("terms") else "")
            out.append(f"| {rec['claim']} | {fmt_ci(rec['ci'], '{:+.3g}')} | {fmt_p(rec['p'])} | "
                       + (f"{fmt_p(rec.get('p_holm'))} | " if tier == PRIMARY else "")
                       + f"{pro} of {n} | {v} | {rec['where'] or ''} |")
        if tier == PRIMARY:  # the family's members no stage measured for this report: in Holm's family with p = 1
            seen = {r["key"] for r in recs}
            for key, (t, text) in CLAIMS.items():
                if t == PRIMARY and key not in seen:
                    out.append(f"| {text} | – | – | – | – | **not measured** (its stage has not run) | |")
        out.append("")
        for why, mark in reasons.items():
            out.append(f"Confounded ({mark}): {why}.\n")
    return out


def closing():
    """The closing paragraph, computed from the corrected verdicts alone: what this CPU-scale evidence says about
    the paper's claims, against them as prominently as for them."""
    prim = [r for r in LEDGER if r["tier"] == PRIMARY]
    expl = [r for r in LEDGER if r["tier"] == EXPLORATORY]
    seen = {r["key"] for r in prim}
    unmeasured = [text for key, (t, text) in CLAIMS.items() if t == PRIMARY and key not in seen]

    def kind(r):
        v = r.get("final", r["verdict"])
        return ("held" if v == "held" else "against" if v == "did not hold" else "confounded" if r.get("gate")
                else "seeds" if v.startswith("not resolved (") and "seed" in v else
                "unmeasured" if v == "not measured" else "open")

    def names(rs, k):
        return [r["claim"] for r in rs if kind(r) == k]

    def say_list(xs):
        return "; ".join(xs) if xs else "none"

    def n_were(n, were="were", was="was"):
        return f"{n} {was if n == 1 else were}"

    ours = [r for r in LEDGER if r["tier"] == OURS]
    held, against = names(prim, "held"), names(prim, "against")
    conf, open_ = names(prim, "confounded"), names(prim, "open") + names(prim, "seeds")
    unmeasured += names(prim, "unmeasured")
    eh, ea = names(expl, "held"), names(expl, "against")
    oh, oa = names(ours, "held"), names(ours, "against")
    out = ["### What this evidence says\n",
           f"Computed from the verdicts above. Of the paper's {N_PRIMARY} primary claims (Holm-corrected together), "
           f"**{len(held)} held** ({say_list(held)}) and **{len(against)} did not hold**, the difference going the "
           f"other way ({say_list(against)}); {n_were(len(open_))} measured without a decision ({say_list(open_)}); "
           f"{len(conf)} cannot be decided here because the models compared differ in an ability the comparison "
           f"needs ({say_list(conf)})"
           + (f"; {n_were(len(unmeasured), 'are', 'is')} not measured yet (their stages have not run: "
              f"{say_list(unmeasured)})" if unmeasured else "")
           + f". Of the {len(expl)} exploratory comparisons, each at 0.05 uncorrected, "
           f"{len(eh)} held and {len(ea)} did not hold"
           + (f"; of difftx's own {len(ours)} questions, {len(oh)} held ({say_list(oh)}) and {len(oa)} did not hold"
              if ours else "") + ". "
           + ("At this scale the evidence runs against the paper more often than for it. " if len(against) + len(ea)
              > len(held) + len(eh) else "At this scale the evidence runs for the paper more often than against it. "
              if len(held) + len(eh) > len(against) + len(ea) else "")
           + "These are models of a few million parameters or fewer, trained on a few million tokens on two CPU "
           "cores: a claim that did not hold here says that at this scale, under these recipes, the difference "
           "went the other way, not that it does at the paper's 0.8–13B parameters; a claim that held is evidence "
           "that the mechanism shows at small scale too.\n"]
    return out


def correct(out):
    """Holm's correction over the primary claims of the whole report, then the summary at the top; each
    section's words for a primary claim (stats.say before the correction: a pointer, in the stage write-ups too)
    become its corrected verdict."""
    before = [(rec, say(rec)) for rec in LEDGER if rec["tier"] == PRIMARY]
    holm(LEDGER)
    out[2:2] = summary() + (closing() if LEDGER else [])
    text = "\n".join(out)
    for rec, old in before:
        text = text.replace(old, say(rec), 1)
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", required=True)
    ap.add_argument("--command", default="make reproduce")
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--kept", action="store_true", help="the results were kept by earlier runs (make reproduce "
                    "STAGE=report): the header says so instead of naming this machine")
    args = ap.parse_args()
    r = Run(args.run)
    if not r.dims:
        sys.exit(f"report: no models under {args.run}/models")
    cpu = "?"
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    work = f"; {args.seconds / 60:.0f} min of work in all" if args.seconds else ""
    out = ["# difftx: the DIFF Transformer paper's measurements, reproduced on a CPU\n",
           (f"Written by `{args.command}` on {datetime.date.today().isoformat()} from the results that `make "
            "reproduce` and its stages measured and keep in docs/reproduce/ (each stage's write-up gives its machine "
            + (f"and time; the main stage's work took {args.seconds / 60:.0f} min on 2 cores" if args.seconds else
               "and time") + "), every comparison and verdict computed again. Every number below was measured by "
            "`difftx` on models trained by those stages; the paper's " if args.kept else
            f"Written by `{args.command}` on {datetime.date.today().isoformat()} ({os.cpu_count()} cores, {cpu}"
            f"{work}). Every number below was measured by `difftx` on models trained by the same command; the "
            "paper's ") +
           "numbers (Ye et al., ICLR 2025) come from 0.8–13B models trained on up to 1T tokens, ours from models "
           "of a few million parameters trained on a few million tokens, so what can be compared is the "
           "direction and the size of each gap, with its spread, not the absolute values.\n"]
    figs = {}
    section_models(r, out)
    section_regime(r, out)
    section_warmup(r, out)
    section_stage(r, out, "scaling")
    section_lm(r, out)
    section_needle(r, out, figs)
    section_mass(r, out)
    section_outliers(r, out)
    section_quant(r, out, figs)
    section_wquant(r, out)
    section_maps(r, out, figs)
    for key in ("claims", "v2", "recall", "recall-deep", "induction-time", "optimal"):
        section_stage(r, out, key)
    section_lambda(r, out, figs)
    section_earlier(out)
    out.append("## Commands\n")
    out.append("Everything above: `" + args.command + "` (scripts/reproduce.sh; its `--help` lists each step); "
               "`make reproduce STAGE=report` writes it again from the kept results alone (scripts/report.sh). "
               "Single measurements on any model: `difftx eval ppl|needle|attn-mass|outliers|attn-map --help`; "
               "the raw JSON of every evaluation is in the run folder's `eval/`.\n")
    text = correct(out)
    draw(r, figs)
    path = os.path.join(r.dir, "REPORT.md")
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
    print(f"report: {path}")


if __name__ == "__main__":
    main()
