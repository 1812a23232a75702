"""The recall stage's write-up (scripts/recall.sh, docs/reproduce.md "The recall stage"): multi-query
associative recall with distractors, DIFF against the Transformer at each arch's own learning rate, with
DIFF without the per-head norm and DIFF V2 beside them.

usage: tools/recall.py RUN --sweep-next      the runs that extend the lr sweep where a best lies at its edge
       tools/recall.py RUN --choose-lr       "arch lr" lines: each arch's best of the sweep
       tools/recall.py RUN --sensitivity     "arch lr" lines: where a chosen rate failed some seed, the
                                             highest rate tied with it on seed 1 (the tie-break's check)
       tools/recall.py RUN [--command CMD]   writes RUN/RECALL.md and RUN/verdicts.json

A model's numbers come from its `difftx eval recall` JSON (eval/recall-NAME.json: eval seed 1, the
reported episodes; eval/select-NAME.json: eval seed 777, the ones the learning rate is chosen on). A model
*learned the task* when its accuracy with no distractors is at least halfway from guessing to 1
(learned_threshold: a model that never retrieves can still guess among the context's values it has not
been asked about yet, which answers H_Q/Q of Q queries, 0.52 at 4 queries, 0.34 at 8). The comparisons follow tools/stats.py's rule: per-seed paired differences (the same seed,
the same batches of episodes), bounded intervals for accuracies and attention shares, the claims named in
stats.CLAIMS before the runs, and no verdict where the models compared differ in whether they learned.
"""
import glob
import json
import math
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stats  # noqa: E402
from scaling import lr_name  # noqa: E402

ARCHS = ["transformer", "diff", "diffnonorm", "diff2"]
LABEL = {"transformer": "Transformer", "diff": "DIFF", "diffnonorm": "DIFF, no per-head norm", "diff2": "DIFF V2"}
LEARNED = 0.5   # set by write() from the settings' query count (learned_threshold)
ANSWERS = 0.5   # attention is compared at the most distractors where every model answers this much
MAX_EXTEND = 2
NAME = re.compile(r"^(?P<arch>[a-z0-9]+)-lr(?P<lr>[0-9.e-]+)-s(?P<seed>\d+)$")


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def runs(d):
    """{(arch, lr, seed): {"test": json, "select": json}} of the finished runs (info record written)."""
    out = {}
    for info in glob.glob(os.path.join(d, "models", "*.info.json")):
        name = os.path.basename(info)[: -len(".info.json")]
        m = NAME.match(name)
        if not m:
            continue
        key = (m["arch"], m["lr"], int(m["seed"]))
        out[key] = {"test": load(os.path.join(d, "eval", f"recall-{name}.json")),
                    "select": load(os.path.join(d, "eval", f"select-{name}.json"))}
    return out


def diverged(j):
    return j is None or j.get("diverged")


def mean_acc(j):
    """Mean accuracy over the distractor counts (0 for a diverged run: the worst)."""
    if diverged(j):
        return 0.0
    return statistics.fmean(c["acc"] for c in j["counts"])


def lr_key(lr):
    return float(lr)


def sweep(r, arch):
    """[(lr, selection score)] of an arch's seed-1 runs, by lr."""
    return sorted(((lr, mean_acc(v["select"])) for (a, lr, s), v in r.items() if a == arch and s == 1),
                  key=lambda t: lr_key(t[0]))


def best_lr(r, arch):
    sw = sweep(r, arch)
    if not sw:
        return None
    top = max(score for _, score in sw)
    return min((lr for lr, score in sw if score == top), key=lr_key)  # ties: the lower lr


def sensitivity(r):
    """[(arch, lr)]: where an arch's chosen rate (the lowest of those tied at its best on seed 1) did not
    teach the task to every seed trained there, the highest rate tied with it, for the same seeds: a
    check of the tie-break, reported beside the verdicts and never in them (docs/reproduce.md)."""
    out = []
    for a in ARCHS:
        sw, b = sweep(r, a), best_lr(r, a)
        if not b:
            continue
        ms = {s: j for s, j in seeds_at(r, a, b).items() if s > 1}
        k, n = learned(ms)
        tied = [lr for lr, score in sw if score == max(x for _, x in sw) and lr != b]
        if n and k < n and tied:
            out.append((a, max(tied, key=lr_key)))
    return out


def sweep_next(r, base_lrs):
    """The (arch, lr) runs that extend the sweep: an arch whose best lies at an edge of what it was tried at,
    x2 or /2 beyond it, at most MAX_EXTEND beyond the base grid each way."""
    lo, hi = min(map(float, base_lrs)), max(map(float, base_lrs))
    out = []
    for a in ARCHS:
        sw = sweep(r, a)
        if not sw:
            continue
        b = best_lr(r, a)
        tried = [lr_key(lr) for lr, _ in sw]
        if lr_key(b) == min(tried) and min(tried) > lo / 2 ** MAX_EXTEND * 1.01 and len(sw) > 1:
            out.append((a, lr_name(min(tried) / 2)))
        elif lr_key(b) == max(tried) and max(tried) < hi * 2 ** MAX_EXTEND / 1.01 and len(sw) > 1:
            out.append((a, lr_name(max(tried) * 2)))
    return out


def settings(d):
    s = {}
    try:
        with open(os.path.join(d, "settings.txt")) as f:
            for tok in f.read().split():
                if "=" in tok:
                    k, v = tok.split("=", 1)
                    s[k] = v
    except OSError:
        pass
    return s


def seeds_at(r, arch, lr):
    return {s: v["test"] for (a, l_, s), v in r.items() if a == arch and l_ == lr and not diverged(v["test"])}


def count_of(j, d):
    for c in j["counts"]:
        if int(c["distractors"]) == d:
            return c
    return None


def acc_by_seed(models, d):
    acc, items = {}, {}
    for s, j in models.items():
        c = count_of(j, d)
        if c:
            acc[s], items[s] = c["acc"], c["n"]
    return acc, items


def share_by_seed(models, d, seg, mp="combined"):
    out, items = {}, {}
    for s, j in models.items():
        c = count_of(j, d)
        if c and c["all"]["answers"]:
            v = c["all"][mp]["per_distractor" if seg == "per_distractor" else seg]
            if v is not None and not (isinstance(v, float) and math.isnan(v)):
                out[s], items[s] = v, c["all"]["answers"]
    return out, items


def learned_threshold(queries):
    """Halfway from elimination guessing (H_Q / Q: the first query guesses among Q values, the next among
    the Q - 1 not yet asked, ...) to every query answered."""
    guess = sum(1 / i for i in range(1, queries + 1)) / queries
    return guess + (1 - guess) / 2


def learned(models):
    """(k, n): how many of these models learned the task (accuracy at 0 distractors >= LEARNED)."""
    k = sum(1 for j in models.values() if (count_of(j, 0) or {}).get("acc", 0) >= LEARNED)
    return k, len(models)


def fmt_ci(ci, f="{:.3f}"):
    if ci is None:
        return "–"
    m, lo, hi, n = ci
    if n < 2:
        return f.format(m) + " (1 seed)"
    return f"{f.format(m)} [{f.format(lo)}, {f.format(hi)}]"


def claim_prefix(st):
    """The claims' keys in stats.CLAIMS: recall-* at the stage's 2 layers, recall4-* at 4 (scripts/recall.sh
    --layers 4), each family named before its runs."""
    layers = int(st.get("layers", 2))
    key = "recall" if layers == 2 else f"recall{layers}"
    if key + "-acc" not in stats.CLAIMS:
        sys.exit(f"recall.py: no claims are named for the recall stage at {layers} layers (tools/stats.py CLAIMS)")
    return key


def write(d, command):
    r = runs(d)
    st = settings(d)
    counts = [int(x) for x in st.get("counts", "0,8,16,32").split(",")]
    global LEARNED
    LEARNED = learned_threshold(int(st.get("queries", 8)))
    lrs = {}
    for a in ARCHS:
        lr = best_lr(r, a)
        if lr:
            lrs[a] = lr
    models = {a: seeds_at(r, a, lrs[a]) for a in lrs}
    stats.LEDGER.clear()
    L = []
    w = L.append
    layers = int(st.get("layers", 2))
    w("# Associative recall with distractors: the mechanism behind the retrieval claims"
      + (f", at {layers} layers" if layers != 2 else "") + "\n")
    w(f"Command: `{command}` (scripts/recall.sh; docs/reproduce.md \"The recall stage\"; the task: "
      "docs/eval_recall.md). Settings: " + " ".join(f"{k}={v}" for k, v in st.items()) + ".\n")
    w("Each arch at its own learning rate, chosen on seed 1 by the mean accuracy over the distractor counts on "
      "the selection episodes (eval seed 777); every number below is on the reported episodes (eval seed 1, the "
      "same for every model). A model *learned the task* when it answers at least "
      f"{LEARNED:.0%} of the queries with no distractors: halfway from what guessing among the values not yet "
      "asked about answers to all of them.\n")
    def accuracy_table(rows):
        """| arch | lr | seeds | learned | accuracy per count | of each (arch, lr, models)."""
        w("| arch | learning rate | seeds | learned the task | "
          + " | ".join(f"accuracy, {c} distractors" for c in counts) + " |")
        w("|---|---|---:|---:|" + "---:|" * len(counts))
        for a, lr, ms in rows:
            k, n = learned(ms)
            cells = []
            for c in counts:
                acc, items = acc_by_seed(ms, c)
                cells.append(fmt_ci(stats.bounded_mean_ci([acc[x] for x in sorted(acc)],
                                                          [items[x] for x in sorted(acc)])))
            w(f"| {LABEL[a]} | {lr} | {len(ms)} | {k} of {n} | " + " | ".join(cells) + " |")

    accuracy_table([(a, lrs[a], models[a]) for a in ARCHS if a in models])
    # other learning rates trained past seed 1 (a sensitivity check named in docs/reproduce.md): reported
    # beside the chosen ones, never in a verdict
    extra = sorted({(a, lr) for (a, lr, s) in r if s > 1 and a in lrs and lr != lrs[a]},
                   key=lambda t: (ARCHS.index(t[0]), lr_key(t[1])))
    if extra:
        w("\nThe same at a learning rate the rule did not choose (a sensitivity check, in no verdict):\n")
        accuracy_table([(a, lr, seeds_at(r, a, lr)) for a, lr in extra])
        for a, lr in extra:
            k, n = learned(seeds_at(r, a, lr))
            k0, n0 = learned(models.get(a, {}))
            if n and k == n and k0 < n0:
                w(f"\n{LABEL[a]} learned the task in every seed at {lr} ({k} of {n}) and in {k0} of {n0} at "
                  f"{lrs[a]}, the rate the rule chose (the lowest of those tied on seed 1): a verdict below "
                  f"confounded by {LABEL[a]}'s models not learning comes from the rule's tie-break, not from "
                  "the architecture.")
    w("\nThe sweep (seed 1, selection episodes, mean accuracy over the counts):\n")
    w("| arch | " + " | ".join("lr " + lr for lr in sorted({lr for (a, lr, s) in r if s == 1}, key=lr_key)) + " |")
    all_lrs = sorted({lr for (a, lr, s) in r if s == 1}, key=lr_key)
    w("|---|" + "---:|" * len(all_lrs))
    for a in ARCHS:
        row = dict(sweep(r, a))
        if row:
            w(f"| {LABEL[a]} | " + " | ".join(f"{row[lr]:.3f}" if lr in row else "" for lr in all_lrs) + " |")

    # where each query looks
    w("\n## Where the query looks\n")
    w("The attention row of each query's key position: its share on the answer pair and on one distractor pair "
      "(the distractors' share over their number), the combined map (A1 − λ·A2 for DIFF), averaged over heads, "
      "queries and episodes per layer, then over layers; mean over seeds [95% interval].\n")
    w("| arch | distractors | answer | per distractor | answer ÷ per distractor |")
    w("|---|---:|---:|---:|---:|")
    def attention_rows(label, ms):
        for c in counts:
            ans, ai = share_by_seed(ms, c, "answer")
            per, pi = share_by_seed(ms, c, "per_distractor")
            ks = sorted(ans)
            ca = stats.bounded_mean_ci([ans[s] for s in ks], [ai[s] for s in ks], -1, 1)
            cp = stats.bounded_mean_ci([per[s] for s in sorted(per)], [pi[s] for s in sorted(per)], -1, 1) if c else None
            ratio = (statistics.fmean(ans[s] / per[s] for s in ks if s in per and per[s] > 0)
                     if c and any(s in per and per[s] > 0 for s in ks) else float("nan"))
            w(f"| {label} | {c} | {fmt_ci(ca)} | {fmt_ci(cp, '{:.4f}') if c else '–'} | "
              f"{'–' if math.isnan(ratio) else f'{ratio:.1f}'} |")

    for a in ARCHS:
        if a in models:
            attention_rows(LABEL[a], models[a])
    for a, lr in extra:  # the tie-break's check, in no verdict
        attention_rows(f"{LABEL[a]} at {lr} (the tie-break's check)", seeds_at(r, a, lr))

    # the claims
    w("\n## Verdicts\n")
    w("Each a per-seed paired difference (the same seed: the same batches), tools/stats.py's rule. Accuracy is "
      f"compared at the most distractors ({max(counts)}); attention at the most distractors where every model of "
      "both archs learned the task (else confounded: a difference between a model that retrieves and one that "
      "does not is not one of architectures).\n")
    dmax = max(counts)
    where = "recall" if layers == 2 else f"recall, {layers} layers"

    def gate_of(a, b):
        """Why A and B cannot be compared: stats.gate where some models learned the task and others did not,
        and here also where none did (the stage compares retrieval, which a model that has not learned the
        task does not do)."""
        la, lb = learned(models.get(a, {})), learned(models.get(b, {}))
        g = stats.gate({"learned the task": {LABEL[a]: la, LABEL[b]: lb}})
        if g is None and (la[0] < la[1] or lb[0] < lb[1]):
            g = (f"{la[0]} of {la[1]} {LABEL[a]} and {lb[0]} of {lb[1]} {LABEL[b]} models learned the task "
                 f"(at least {LEARNED:.0%} with no distractors): the comparison needs every one to")
        return g

    def acc_claim(key, a, b):
        if a not in models or b not in models:
            return None
        x, xi = acc_by_seed(models[a], dmax)
        y, yi = acc_by_seed(models[b], dmax)
        ci = stats.bounded_diff_ci(x, xi, y, yi)
        p = stats.bounded_diff_p(x, xi, y, yi)
        terms = None if lrs[a] == lrs[b] else f"lr {lrs[b]} ({LABEL[b]}) and {lrs[a]} ({LABEL[a]}), each its own best"
        return stats.record(key, ci, p, stats.paired(x, y), +1, where, gate_of(a, b), terms)

    def share_claim(key, a, b, seg, sign):
        if a not in models or b not in models:
            return None
        ok = [c for c in counts if c > 0 and learned_at(models[a], c) and learned_at(models[b], c)]
        g = gate_of(a, b)
        c = max(ok) if ok else dmax
        if not ok and not g:
            g = f"no distractor count where every model of both archs answers at least {ANSWERS:.0%}"
        x, xi = share_by_seed(models[a], c, seg)
        y, yi = share_by_seed(models[b], c, seg)
        ci = stats.bounded_diff_ci(x, xi, y, yi, -1, 1)
        p = stats.bounded_diff_p(x, xi, y, yi, -1, 1)
        terms = f"at {c} distractors" + ("" if lrs[a] == lrs[b] else f"; lr {lrs[b]} and {lrs[a]}, each its own best")
        return stats.record(key, ci, p, stats.paired(x, y), sign, where, g, terms)

    def learned_at(ms, c):
        return all((count_of(j, c) or {}).get("acc", 0) >= ANSWERS for j in ms.values()) and bool(ms)

    k = claim_prefix(st)
    recs = [acc_claim(k + "-acc", "transformer", "diff"),
            share_claim(k + "-answer", "transformer", "diff", "answer", +1),
            share_claim(k + "-noise", "transformer", "diff", "per_distractor", -1),
            acc_claim(k + "-v2-acc", "transformer", "diff2"),
            acc_claim(k + "-norm-acc", "diffnonorm", "diff")]
    w("| claim | difference (B − A), mean [95% interval] | seeds | verdict | terms |")
    w("|---|---:|---:|---|---|")
    for rec in recs:
        if rec is None:
            continue
        w(f"| {rec['claim']} | {fmt_ci(rec['ci'], '{:+.3f}')} | {rec['ci'][3] if rec['ci'] else 0} | "
          f"{stats.say(rec)}{' — ' + rec['gate'] if rec.get('gate') else ''} | {rec.get('terms') or ''} |")
    with open(os.path.join(d, "RECALL.md.tmp"), "w") as f:
        f.write("\n".join(L) + "\n")
    os.replace(os.path.join(d, "RECALL.md.tmp"), os.path.join(d, "RECALL.md"))
    stats.write_verdicts(d)


def main():
    if len(sys.argv) < 3 and not (len(sys.argv) == 2 and os.path.isdir(sys.argv[1])):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    d = sys.argv[1]
    r = runs(d)
    if len(sys.argv) > 2 and sys.argv[2] == "--sweep-next":
        base = settings(d).get("lrs", "").split()
        base = [x for x in re.split(r"[ ,]", " ".join(base)) if x] or ["1e-3"]
        for a, lr in sweep_next(r, base):
            print(a, lr)
    elif len(sys.argv) > 2 and sys.argv[2] == "--sensitivity":
        global LEARNED
        LEARNED = learned_threshold(int(settings(d).get("queries", 8)))
        for a, lr in sensitivity(r):
            print(a, lr)
    elif len(sys.argv) > 2 and sys.argv[2] == "--choose-lr":
        for a in ARCHS:
            lr = best_lr(r, a)
            if lr:
                print(a, lr)
    else:
        cmd = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--command" else "make reproduce STAGE=recall"
        write(d, cmd)
        print(os.path.join(d, "RECALL.md"))


if __name__ == "__main__":
    main()
