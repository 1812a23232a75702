"""Intervals and verdicts shared by tools/report.py and tools/induction.py.

A verdict is computed, never typed: "held" only where the 95% interval lies
on the paper's side of zero, "did not hold" where it lies on the other
side, "not resolved" where it spans zero, or where it rests on fewer than
MIN_SEEDS seeds (two seeds can agree by chance to a zero-width interval:
the induction study's onsets did)."""
import math
import random
import statistics

# two-sided 95% t quantiles by degrees of freedom
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def t975(df):
    return T975.get(df, 1.96 + 2.4 / df)


def mean_ci(xs):
    """(mean, lo, hi, n) of the 95% t interval of the mean; ±inf with one value."""
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    if not xs:
        return None
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, float("-inf"), float("inf"), 1
    h = t975(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, m - h, m + h, len(xs)


def paired_ci(a, b):
    """The interval of the mean of b[k] − a[k] over the keys both dicts have."""
    keys = sorted(set(a) & set(b))
    return mean_ci([b[k] - a[k] for k in keys])


def bootstrap_ci(xs, stat, n=2000, seed=1):
    """(stat(xs), lo, hi): the percentile bootstrap 95% interval of stat over resamples of xs."""
    if not xs:
        return None
    rng = random.Random(seed)
    vals = sorted(stat([rng.choice(xs) for _ in xs]) for _ in range(n))
    return stat(xs), vals[int(0.025 * n)], vals[int(0.975 * n) - 1]


MIN_SEEDS = 3


def resolved(ci):
    """An interval that may decide: measured, and over at least MIN_SEEDS seeds when it is over seeds."""
    return ci is not None and (len(ci) < 4 or ci[3] >= MIN_SEEDS)


# Every verdict given a claim, in the order computed: [(claim, verdict, where)]. tools/report.py lists
# them at the top of the report, the claims that did not hold beside those that held.
LEDGER = []


def verdict(ci, paper_sign, claim=None, where=None):
    """paper_sign +1: the paper says the difference is positive; -1 negative. With a claim, the verdict also
    goes into LEDGER."""
    if ci is None:
        v = "not measured"
    elif not resolved(ci):
        v = f"not resolved ({ci[3]} seed{'s' if ci[3] != 1 else ''})"
    elif paper_sign > 0:
        v = "held" if ci[1] > 0 else "did not hold" if ci[2] < 0 else "not resolved"
    else:
        v = "held" if ci[2] < 0 else "did not hold" if ci[1] > 0 else "not resolved"
    if claim:
        LEDGER.append((claim, v, where))
    return v


def write_verdicts(d):
    """LEDGER as D/verdicts.json (atomically): a stage's verdicts for REPORT.md's summary (tools/report.py)."""
    import json
    import os
    with open(os.path.join(d, "verdicts.json.tmp"), "w") as f:
        json.dump([{"claim": c, "verdict": v, "where": w} for c, v, w in LEDGER], f, indent=1)
    os.replace(os.path.join(d, "verdicts.json.tmp"), os.path.join(d, "verdicts.json"))


def fmt_ci(ci, fmt="{:+.2f}"):
    if ci is None:
        return "n/a"
    m, lo, hi = ci[0], ci[1], ci[2]
    n = ci[3] if len(ci) > 3 else None
    if n == 1:
        return fmt.format(m) + " (1 seed)"
    return (fmt + " [" + fmt + ", " + fmt + "]").format(m, lo, hi) + (f" ({n} seeds)" if n else "")
