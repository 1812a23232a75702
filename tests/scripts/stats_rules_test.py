"""tools/stats.py's one rule and tools/report.py's use of it (run by stats_rules_test.sh): the t distribution
against closed forms, bounded intervals that never leave their bounds (and a p that agrees with them), the
gate that makes a floor-hit comparison confounded whatever its interval, Holm's correction flipping exactly the
verdicts it should (and not Bonferroni's), and a report written from hand-made results where a Transformer that
never retrieves makes the needle claim confounded, not held."""
import json
import re
import math
import os
import random
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import stats  # noqa: E402

passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL stats_rules_{name}" + (f": {detail}" if detail else ""))


def close(a, b, tol):
    return abs(a - b) <= tol


# ---- the t distribution against closed forms (df 1: Cauchy; df 2: t / (2 sqrt(2 + t^2)) + 1/2)
for t in (-30.0, -4.303, -1.0, -0.1, 0.0, 0.5, 2.0, 9.9):
    check(f"t_cdf_df1_{t}", close(stats.t_cdf(t, 1), 0.5 + math.atan(t) / math.pi, 1e-10))
    check(f"t_cdf_df2_{t}", close(stats.t_cdf(t, 2), 0.5 + t / (2 * math.sqrt(2 + t * t)), 1e-10))
check("t975_df2", close(stats.t975(2), 4.302653, 1e-5), stats.t975(2))
check("t975_df10", close(stats.t975(10), 2.228139, 1e-5), stats.t975(10))
check("z975", close(stats.norm_ppf(0.975), 1.959964, 1e-5))
# the p of the t test: t = 3 on df 2 gives 2 (1 - F(3)) = 1 - 3 / sqrt(11)
xs = [1.0, 2.0, 3.0]  # mean 2, sd 1: t = 2 sqrt(3)
check("t_p", close(stats.t_p(xs), 1 - 2 * math.sqrt(3) / math.sqrt(2 + 12), 1e-9), stats.t_p(xs))
# an interval excludes 0 exactly when p < 0.05
rng = random.Random(7)
agree = True
for _ in range(300):
    xs = [rng.gauss(rng.uniform(-1, 1), rng.uniform(0.05, 1)) for _ in range(rng.randint(2, 6))]
    ci = stats.mean_ci(xs)
    agree &= (ci[1] > 0 or ci[2] < 0) == (stats.t_p(xs) < 0.05)
check("t_interval_and_p_agree", agree)

# ---- bounded intervals: inside [lo, hi] whatever the values, seeds and items
inside = True
for _ in range(2000):
    S = rng.randint(2, 5)
    kind = rng.random()
    vals = [0.0] * S if kind < 0.1 else [1.0] * S if kind < 0.2 else [rng.random() ** rng.choice((1, 4)) for _ in range(S)]
    items = [rng.choice((None, 1, 10, 250, 5000)) for _ in range(S)]
    ci = stats.bounded_mean_ci(vals, items)
    inside &= 0.0 <= ci[1] <= ci[0] + 1e-12 and ci[0] - 1e-12 <= ci[2] <= 1.0
    a = {k: rng.random() for k in range(S)}
    b = {k: rng.random() ** 3 for k in range(S)}
    it = {k: rng.choice((1, 50, 500)) for k in range(S)}
    d = stats.bounded_diff_ci(a, it, b, it)
    inside &= -1.0 <= d[1] <= d[2] <= 1.0
    s = stats.bounded_mean_ci([2 * v - 1 for v in vals], items, -1.0, 1.0)
    inside &= -1.0 <= s[1] and s[2] <= 1.0
check("bounded_never_leaves_its_bounds", inside)
# a floor: three models at 0 of 250 each; the interval starts at 0 and is not of zero width
fl = stats.bounded_mean_ci([0.0, 0.0, 0.0], [250, 250, 250])
check("floor_interval", fl[1] == 0.0 and 0.0 < fl[2] < 0.05, fl)
# the retrieval gap of the report (0.95, 0.55, 0.78 against a floor): a t interval runs past 1, the bounded one not
t = stats.mean_ci([0.95, 0.55, 0.78])
b = stats.bounded_diff_ci({1: 0, 2: 0, 3: 0}, {1: 250, 2: 250, 3: 250}, {1: 0.95, 2: 0.55, 3: 0.78},
                          {1: 250, 2: 250, 3: 250})
check("t_runs_past_1_bounded_does_not", t[2] > 1 and b[2] < 1, (t, b))
# the bounded p agrees with its interval
agree = True
for _ in range(100):
    S = 3
    a = {k: rng.random() * 0.5 for k in range(S)}
    b = {k: min(1.0, a[k] + rng.uniform(-0.1, 0.4)) for k in range(S)}
    it = {k: 200 for k in range(S)}
    ci, p = stats.bounded_diff_ci(a, it, b, it), stats.bounded_diff_p(a, it, b, it)
    agree &= (ci[1] > 0 or ci[2] < 0) == (p < 0.05)
check("bounded_interval_and_p_agree", agree)
# paired: differences that agree across seeds decide though each arch's seeds spread
a, b = {1: 0.60, 2: 0.55, 3: 0.50}, {1: 0.50, 2: 0.44, 3: 0.41}
it = {k: 1000 for k in a}
check("bounded_is_paired", stats.bounded_diff_ci(a, it, b, it)[2] < 0)

# ---- the gate: a floor-hit comparison is confounded whatever its interval
reason = stats.gate({"retrieve": {"DIFF": (3, 3), "Transformer": (0, 3)}})
check("gate_reason", reason == "3 of 3 DIFF and 0 of 3 Transformer models retrieve", reason)
check("gate_alike", stats.gate({"retrieve": {"DIFF": (3, 3), "Transformer": (3, 3)}}) is None)
check("gate_none_have_it", stats.gate({"retrieve": {"DIFF": (0, 3), "Transformer": (0, 3)}}) is None)
check("gate_mixed_within_an_arch", stats.gate({"retrieve": {"DIFF": (2, 3), "Transformer": (3, 3)}}) is not None)
stats.LEDGER.clear()
rec = stats.record("needles", b, 0.001, [0.95, 0.55, 0.78], +1, "test", reason)
check("gated_not_held", rec["verdict"] == f"not resolved (confounded: {reason})", rec["verdict"])
check("gated_say", "**not resolved (confounded)**" in stats.say(rec), stats.say(rec))
rec = stats.record("ar-hits", (0.1, 0.05, 0.15, 2), 0.01, [0.1, 0.1], -1, "test")
check("two_seeds_do_not_decide", rec["verdict"] == "not resolved (2 seeds)", rec["verdict"])


# ---- Holm: the step-down flips exactly the verdicts it should
def primaries(ps, gated=()):
    stats.LEDGER.clear()
    keys = [k for k, (tier, _) in stats.CLAIMS.items() if tier == stats.PRIMARY]
    for k, p in zip(keys, ps):
        stats.record(k, (0.1, 0.01, 0.2, 3), p, [0.1, 0.1, 0.1], +1, "test", "floor" if k in gated else None)
    stats.record("ar-hits", (0.1, 0.01, 0.2, 3), 0.02, [0.1, 0.1, 0.1], +1, "test")  # exploratory: uncorrected
    stats.holm(stats.LEDGER)
    return [r["final"] for r in stats.LEDGER], [r.get("p_holm") for r in stats.LEDGER]


keys = [k for k, (tier, _) in stats.CLAIMS.items() if tier == stats.PRIMARY]
N = stats.N_PRIMARY
check("eleven_primary", len(keys) == 11 == N, keys)
final, ph = primaries([0.001, 0.02, 0.03, 0.04, 0.2, 0.5, 0.6, 0.7, 0.8, 0.9, 0.9])
check("holm_flips", final[:N] == ["held"] + ["not resolved"] * 10, final)
check("holm_adjusted", [round(x, 4) for x in ph[:N]] == [0.011, 0.2, 0.27, 0.32] + [1.0] * 7, ph)
check("exploratory_uncorrected", final[N] == "held" and ph[N] is None, (final[N], ph[N]))
# Holm rejects where Bonferroni would not (the largest p times 11 is 0.12)
final, _ = primaries([0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009, 0.010, 0.0109])
check("holm_not_bonferroni", final[:N] == ["held"] * N, final)
# a confounded primary counts with p = 1: it never loosens the others (0.02 is adjusted by 11, not by 10)
final, ph = primaries([0.0001, 0.02] + [0.9] * 9, gated=("params",))
check("gated_in_family", ph[0] == 1.0 and final[0].startswith("not resolved (confounded") and
      close(ph[1], 0.22, 1e-12) and final[1] == "not resolved", (final, ph))
# the inline words: before the correction a pointer, after it the corrected verdict
stats.LEDGER.clear()
rec = stats.record("params", (0.3, 0.2, 0.4, 3), 0.02, [0.3, 0.3, 0.3], -1, "test")
before = stats.say(rec)
stats.holm(stats.LEDGER)
after = stats.say(rec)
check("say_before", "before correction" in before and "did not hold" in before, before)
check("say_after", after.startswith("**not resolved** (primary: Holm-adjusted p = 0.220 over 11 claims)"), after)
check("every_seed_note", "every seed against the paper (3 of 3)" in after, after)

# ---- a report from hand-made results: the Transformer never retrieves, so the needle claim is confounded
with tempfile.TemporaryDirectory() as d:
    os.makedirs(os.path.join(d, "models"))
    os.makedirs(os.path.join(d, "eval"))
    open(os.path.join(d, "settings.txt"), "w").write(
        "vocab=64 seq=32 batch=2 steps=10 layers=2 dims=16 lr=3e-3 needle_frac=0.6 copy_frac=0.2 needle_max=2 "
        "samples=5 warm_steps=0\n")
    for a in ("diff", "transformer"):
        for s in (1, 2, 3):
            base = os.path.join(d, "models", f"{a}-d16-s{s}")
            json.dump({"arch": a, "params": 1000, "params_nonembed": 500, "n_heads": 1 if a == "diff" else 2,
                       **({"lambda": [0.5, -0.2]} if a == "diff" else {})}, open(base + ".info.json", "w"))
            log = [{"step": 10, "val_loss": 4.0 + 0.01 * s}]
            if a == "diff" and s == 1:  # λ logged over training, with a warm-up before it: leaves (0, 1) at step 9
                open(base + ".warm.jsonl", "w").write(json.dumps({"step": 4, "loss": 5.0, "lambda": [0.2, 0.4]}) + "\n")
                # the warm-up's own model, where the run trained: the start of this run's trace, not a model
                json.dump({"arch": "diff", "params": 1000, "n_heads": 1, "lambda": [0.2, 0.4]},
                          open(base + ".warm.info.json", "w"))
                log = [{"step": 5, "loss": 4.5, "lambda": [0.6, -0.1]}, {"step": 10, "loss": 4.1, "lambda": [0.5, 0.3]}]
            open(base + ".jsonl", "w").write("".join(json.dumps(e) + "\n" for e in log))
            acc = {"diff": (0.95, 0.55, 0.78)[s - 1], "transformer": 0.0}[a]
            json.dump({"lengths": [24], "samples": 5, "table2": [
                {"n": n, "r": 1, "acc": acc, "lo": 0, "hi": 1, "queries": 250} for n in (1, 2)]},
                open(os.path.join(d, "eval", f"needle-{a}-s{s}.json"), "w"))
    # a Transformer converted to DIFF (the optimal stage's conversion): its λ is reported too
    os.makedirs(os.path.join(d, "optimal", "conversion", "models"))
    json.dump({"arch": "diff", "params": 1000, "params_nonembed": 500, "n_heads": 2, "lambda": [0.25, 0.75]},
              open(os.path.join(d, "optimal", "conversion", "models", "convdiff-d16-lr1e-2-s1.info.json"), "w"))
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "report.py"), "--run", d],
                         capture_output=True, text=True)
    check("report_runs", out.returncode == 0, out.stderr[-500:])
    text = open(os.path.join(d, "REPORT.md")).read() if out.returncode == 0 else ""
    row = [line for line in text.splitlines() if line.startswith("| DIFF retrieves more needles (Table 2) |")]
    check("report_needles_confounded", len(row) == 1 and "**not resolved (confounded: a)**" in row[0] and
          "**held**" not in row[0], row)
    check("report_confound_reason",
          "Confounded (a): 3 of 3 DIFF and 0 of 3 Transformer models retrieve." in text)
    check("report_three_tables", all(h in text for h in ("### The paper's primary claims", "### The paper's other "
                                                          "claims (exploratory)")), "")
    check("report_lambda", "| main | diff-d16-s1 | 0.500 | -0.200 |" in text)
    check("report_lambda_trace", "| main | 1 | 1 | 0 | -0.100 to 0.600 |" in text,
          [line for line in text.splitlines() if line.startswith("| main | 1")])
    check("report_lambda_no_warm_model", "diff-d16-s1.warm" not in text)
    check("report_lambda_converted", "| conversion | convdiff-d16-lr1e-2-s1 | 0.250 | 0.750 |" in text)
    # the closing paragraph: counts from the verdicts, the unmeasured primaries named, counts of one singular
    closing = [line for line in text.splitlines() if line.startswith("Computed from the verdicts above.")]
    check("report_closing", len(closing) == 1 and "not measured yet (their stages have not run: " in closing[0]
          and not re.search(r"\b1 were\b|\b0 are not measured", closing[0]), closing)
    check("report_lambda_plot", os.path.exists(os.path.join(d, "lambda.png")) or "matplotlib" in out.stderr, "")
    # the interval of the needle difference stays inside [-1, 1]
    cell = row[0].split("|")[2] if row else ""
    lo_hi = [float(x) for x in cell.split("[")[1].split("]")[0].split(",")] if "[" in cell else [9, 9]
    check("report_needle_interval_bounded", -1 <= lo_hi[0] <= lo_hi[1] <= 1, cell)

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
