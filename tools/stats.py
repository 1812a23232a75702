"""Intervals, tests and verdicts: the one rule every write-up of `make
reproduce` follows (docs/reproduce.md, "How a verdict is reached").

- Every claim of the paper the recipe measures is named once, in CLAIMS,
  with its tier: *primary* (the paper's headline claims, corrected together
  with Holm's method), *exploratory* (the paper's other claims, each at 95%
  uncorrected, labelled so) or *ours* (claims the paper does not make).
- A claim's number is a per-seed difference (the same seed: the same
  batches), and its test two-sided at 0.05: a paired t interval and test for
  unbounded quantities (losses, log ratios, counts), and for quantities
  bounded in [lo, hi] (accuracies, rates, attention shares) each arch's mean
  over seeds gets a Wilson interval at the effective sample size its seeds
  allow (the Korn-Graubard recipe for clustered proportions: the binomial
  variance over the variance the seeds show, at most the items measured,
  scaled by (z / t)^2 for the seeds' degrees of freedom), and so does the
  mean of the paired per-seed differences, on [-(hi-lo), hi-lo]: no such
  interval leaves its bounds, and the pairing (the same seed, the same
  batches) is kept.
- *held* only where the test rejects on the paper's side (the interval, or
  for a primary claim the Holm-adjusted p, excludes no difference),
  *did not hold* where it rejects on the other side, *not resolved*
  otherwise, or where fewer than MIN_SEEDS seeds were measured (two seeds can
  agree by chance to a zero-width interval), or, *confounded*, where the
  models compared differ in an ability the recipe was to give them all
  (retrieval, induction): a difference between a model that can copy from
  its context and one that cannot is not a difference of architectures.
  A confounded or unmeasured primary claim stays in Holm's family with p = 1,
  so gating can never loosen the correction of the others.
"""
import json
import math
import os
import statistics

MIN_SEEDS = 3
ALPHA = 0.05

# ---------------------------------------------------------------- distributions (no scipy on a bare Debian)


def _betacf(a, b, x):
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        de = d * c
        h *= de
        if abs(de - 1.0) < 1e-15:
            break
    return h


def betainc(a, b, x):
    """I_x(a, b), the regularized incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t, df):
    """P(T <= t) for Student's t with df degrees of freedom."""
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def norm_cdf(z):
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def _ppf(cdf, q):
    """The q quantile of a continuous, symmetric distribution by bisection."""
    lo, hi = -1e3, 1e3
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if cdf(mid) < q:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def t_ppf(q, df):
    return _ppf(lambda t: t_cdf(t, df), q)


def norm_ppf(q):
    return _ppf(norm_cdf, q)


def t975(df):
    """The two-sided 95% quantile of t with df degrees of freedom (4.303 for 2)."""
    return t_ppf(0.975, df)


# ---------------------------------------------------------------- unbounded quantities: t


def _finite(xs):
    return [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]


def mean_ci(xs, alpha=ALPHA):
    """(mean, lo, hi, n) of the t interval of the mean; ±inf with one value; None with none."""
    xs = _finite(xs)
    if not xs:
        return None
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, float("-inf"), float("inf"), 1
    h = t_ppf(1 - alpha / 2, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, m - h, m + h, len(xs)


def t_p(xs):
    """The two-sided p of the t test that the mean of xs is 0 (1 with fewer than two values)."""
    xs = _finite(xs)
    if len(xs) < 2:
        return 1.0
    m, sd = statistics.fmean(xs), statistics.stdev(xs)
    if sd == 0:
        return 1.0 if m == 0 else 0.0
    t = m / (sd / math.sqrt(len(xs)))
    return 2.0 * (1.0 - t_cdf(abs(t), len(xs) - 1))


def paired(a, b):
    """[b[k] − a[k]] over the keys both dicts have, in key order."""
    return [b[k] - a[k] for k in sorted(set(a) & set(b)) if a[k] is not None and b[k] is not None]


def paired_ci(a, b):
    """The t interval of the mean of b[k] − a[k] over the keys both dicts have."""
    return mean_ci(paired(a, b))


# ---------------------------------------------------------------- bounded quantities: Wilson at the seeds' sample size


def wilson(p, n, z):
    """The Wilson score interval of a proportion p observed over n (may be fractional) items."""
    if n <= 0:
        return 0.0, 1.0
    z2 = z * z
    den = 1 + z2 / n
    mid = (p + z2 / (2 * n)) / den
    half = z * math.sqrt(max(p * (1 - p), 0.0) / n + z2 / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


def bounded_mean_ci(xs, items, lo=0.0, hi=1.0, alpha=ALPHA):
    """(mean, lo, hi, n) of the mean over seeds of values in [LO, HI], each measured on items[i] items
    (module docstring); the interval never leaves [LO, HI]. One seed: ±inf, as mean_ci."""
    pairs = [(x, n) for x, n in zip(xs, items) if x is not None]
    if not pairs:
        return None
    S = len(pairs)
    m = statistics.fmean(x for x, _ in pairs)
    if S < 2:
        return m, float("-inf"), float("inf"), 1
    u = [min(1.0, max(0.0, (x - lo) / (hi - lo))) for x, _ in pairs]
    p = min(1.0, max(0.0, statistics.fmean(u)))
    v = statistics.variance(u) / S
    total = sum(n for _, n in pairs if n)
    n_eff = p * (1 - p) / v if v > 0 else math.inf
    if total:
        n_eff = min(n_eff, total)
    if math.isinf(n_eff):  # no spread and no item counts: nothing says how precise the mean is
        return m, m, m, S
    z, t = norm_ppf(1 - alpha / 2), t_ppf(1 - alpha / 2, S - 1)
    wl, wh = wilson(p, n_eff * (z / t) ** 2, z)
    return m, lo + (hi - lo) * wl, lo + (hi - lo) * wh, S


def bounded_diff_ci(a, a_items, b, b_items, lo=0.0, hi=1.0, alpha=ALPHA):
    """The interval of the mean over seeds of b[k] − a[k], per-seed dicts of values in [LO, HI] with their item
    counts (dicts of the same keys): the paired differences lie in [−(HI−LO), HI−LO] and get bounded_mean_ci's
    interval there, each seed's difference resting on the fewer of its two models' items."""
    keys = sorted(k for k in set(a) & set(b) if a[k] is not None and b[k] is not None)
    if not keys:
        return None
    items = [min((x for x in (a_items.get(k), b_items.get(k)) if x), default=None) for k in keys]
    return bounded_mean_ci([b[k] - a[k] for k in keys], items, -(hi - lo), hi - lo, alpha)


def bounded_diff_p(a, a_items, b, b_items, lo=0.0, hi=1.0):
    """The two-sided p of bounded_diff_ci: the smallest alpha at which its interval excludes 0."""
    ci = bounded_diff_ci(a, a_items, b, b_items, lo, hi)
    if ci is None or ci[3] < 2:
        return 1.0
    excludes = lambda al: (lambda c: c[1] > 0 or c[2] < 0)(bounded_diff_ci(a, a_items, b, b_items, lo, hi, al))
    if not excludes(1 - 1e-9):
        return 1.0
    if excludes(1e-12):
        return 0.0
    l, h = 1e-12, 1 - 1e-9  # excludes(h) and not excludes(l): the intervals narrow as alpha grows
    for _ in range(60):
        mid = math.sqrt(l * h) if h < 0.5 else 0.5 * (l + h)
        if excludes(mid):
            h = mid
        else:
            l = mid
    return h


# ---------------------------------------------------------------- times to an event, censored

def kaplan_meier(times, events):
    """[(t, S(t))] at each distinct event time of a right-censored sample: TIMES the step each unit's event
    happened or its observation ended, EVENTS 1 where the event happened (0: censored at that time)."""
    out, s = [], 1.0
    for t in sorted({t for t, e in zip(times, events) if e}):
        at_risk = sum(1 for u in times if u >= t)
        d = sum(1 for u, e in zip(times, events) if e and u == t)
        s *= 1 - d / at_risk
        out.append((t, s))
    return out


def logrank(t1, e1, t2, e2):
    """The two-sided log-rank test of two right-censored samples: (chi-square on 1 df, p). Tied times are
    handled as Mantel's hypergeometric variance does. p = 1 where no event happened in either."""
    o_minus_e, var = 0.0, 0.0
    for t in sorted({t for t, e in zip(t1 + t2, e1 + e2) if e}):
        n1 = sum(1 for u in t1 if u >= t)
        n2 = sum(1 for u in t2 if u >= t)
        d1 = sum(1 for u, e in zip(t1, e1) if e and u == t)
        d = d1 + sum(1 for u, e in zip(t2, e2) if e and u == t)
        n = n1 + n2
        o_minus_e += d1 - d * n1 / n
        if n > 1:
            var += d * (n1 / n) * (n2 / n) * (n - d) / (n - 1)
    if var <= 0:
        return 0.0, 1.0
    chi2 = o_minus_e ** 2 / var
    return chi2, math.erfc(math.sqrt(chi2 / 2))


def rmst(times, events, tau):
    """(restricted mean time to the event up to TAU, its variance): the area under the Kaplan–Meier curve on
    [0, tau], with the Greenwood-type variance Σ A_j² d_j / (n_j (n_j − d_j)) over the event times t_j < tau
    (A_j the area from t_j to tau). A unit censored at tau without its event counts as tau."""
    km = [(t, s) for t, s in kaplan_meier(times, events) if t <= tau]
    area, prev_t, prev_s = 0.0, 0.0, 1.0
    for t, s in km:
        area += prev_s * (t - prev_t)
        prev_t, prev_s = t, s
    area += prev_s * (tau - prev_t)
    var = 0.0
    for i, (t, s) in enumerate(km):
        if t >= tau:
            continue
        rest = sum(km[j][1] * ((km[j + 1][0] if j + 1 < len(km) else tau) - km[j][0]) for j in range(i, len(km)))
        at_risk = sum(1 for u in times if u >= t)
        d = sum(1 for u, e in zip(times, events) if e and u == t)
        if at_risk > d:
            var += rest ** 2 * d / (at_risk * (at_risk - d))
    return area, var


def rmst_diff(a, b, tau, alpha=ALPHA):
    """RMST(b) − RMST(a) up to TAU, each sample (times, events), with a normal (1 − alpha) interval:
    (mean, lo, hi, n) with n the smaller sample's size."""
    ma, va = rmst(a[0], a[1], tau)
    mb, vb = rmst(b[0], b[1], tau)
    d, se = mb - ma, math.sqrt(va + vb)
    z = norm_ppf(1 - alpha / 2)
    return d, d - z * se, d + z * se, min(len(a[0]), len(b[0]))


# ---------------------------------------------------------------- the claims and their verdicts

PRIMARY, EXPLORATORY, OURS = "primary", "exploratory", "ours"

# Every claim a write-up may judge: key -> (tier, text). The primary ones are the paper's headline results
# (its abstract and introduction, the numbers it leads with: ~65% of the parameters or tokens, 0.85 vs 0.55 on
# six needles, a top attention logit of 38.8 vs 318, about 25 points at 4-bit attention), fixed here before
# the comparisons they judge were recomputed; the 4-bit claim at row scope (one scale per head and query row),
# the granularity the low-bit section measures first. The paper's other claims are exploratory. Ours are
# questions the paper does not ask (weight quantisation; answering "none").
CLAIMS = {
    "params": (PRIMARY, "DIFF needs fewer parameters for the same loss (Fig. 3a)"),
    "tokens": (PRIMARY, "DIFF needs fewer training tokens for the same loss (Fig. 3b)"),
    "needles": (PRIMARY, "DIFF retrieves more needles (Table 2)"),
    "top-logit": (PRIMARY, "DIFF's top attention logit is smaller (Table 5)"),
    "attn4-row": (PRIMARY, "DIFF loses less with 4-bit attention logits, row scope (Fig. 8)"),
    # the recall stage's (docs/reproduce.md "The recall stage"), named before its runs: the retrieval claims'
    # mechanism on a task both archs learn
    "recall-acc": (PRIMARY, "DIFF answers more associative-recall queries among the most distractors (Table 2's analogue)"),
    "recall-answer": (PRIMARY, "DIFF's queries put more attention on the answer pair (Table 3's analogue)"),
    # the recall stage at 4 layers (docs/reproduce.md "The recall stage", "At 4 layers"), named 2026-12-04
    # before its runs, after DIFF learned the task in 0 of 8 seeds at 2 layers: the same claims where it may
    "recall4-acc": (PRIMARY, "DIFF answers more associative-recall queries among the most distractors, 4 layers "
                             "(Table 2's analogue)"),
    "recall4-answer": (PRIMARY, "DIFF's queries put more attention on the answer pair, 4 layers (Table 3's "
                                "analogue)"),
    # the optimal stage's (docs/reproduce.md "The optimal stage"), named before its runs: one size at 20 tokens
    # per non-embedding parameter, each arch at its own learning rate, 6 seeds
    "optimal-loss": (PRIMARY, "DIFF's loss is lower at one size trained to 20 tokens per parameter (Fig. 3a at one "
                              "size)"),
    "optimal-tokens": (PRIMARY, "DIFF reaches the Transformer's loss with fewer tokens (Fig. 3b at one size)"),
    "ar-hits": (EXPLORATORY, "DIFF's loss is lower on AR hits (Table 6)"),
    "ar-others": (EXPLORATORY, "DIFF's loss is lower on the other tokens (Table 6)"),
    "lm-retrieval": (EXPLORATORY, "DIFF's loss is lower (the retrieval models)"),
    "needle-slope": (EXPLORATORY, "DIFF's retrieval lead grows with the number of needles (Table 2)"),
    "mass-answer": (EXPLORATORY, "DIFF puts more attention on the answer (Table 3)"),
    "mass-noise": (EXPLORATORY, "DIFF puts less attention on the noise (Table 3)"),
    "top-hidden": (EXPLORATORY, "DIFF's top hidden state is smaller (Table 5)"),
    "attn4-tensor": (EXPLORATORY, "DIFF loses less with 4-bit attention logits, tensor scope (Fig. 8)"),
    "icl6": (EXPLORATORY, "DIFF is more accurate at many-shot in-context classification (Fig. 6, 6 classes)"),
    "icl16": (EXPLORATORY, "DIFF is more accurate at many-shot in-context classification (Fig. 6, 16 classes)"),
    "order-random-6": (EXPLORATORY, "DIFF is less sensitive to the order of demonstrations (Fig. 7, random, 6 classes)"),
    "order-grouped-6": (EXPLORATORY,
                        "DIFF is less sensitive to the order of demonstrations (Fig. 7, grouped, 6 classes)"),
    "order-random-16": (EXPLORATORY,
                        "DIFF is less sensitive to the order of demonstrations (Fig. 7, random, 16 classes)"),
    "order-grouped-16": (EXPLORATORY,
                         "DIFF is less sensitive to the order of demonstrations (Fig. 7, grouped, 16 classes)"),
    "halluc-qa": (EXPLORATORY,
                  "DIFF answers from the context where it contradicts what the model knows (Table 4, QA)"),
    "halluc-precision": (EXPLORATORY,
                         "DIFF lists fewer numbers that are not in the context (Table 4, summarisation)"),
    "halluc-exact": (EXPLORATORY,
                     "DIFF's lists are accurate and free of hallucination more often (Table 4, summarisation)"),
    "pos-main": (EXPLORATORY, "DIFF's loss is lower over the whole context (Fig. 4, main context)"),
    "pos-long": (EXPLORATORY, "DIFF's loss is lower over the whole context (Fig. 4, long context)"),
    "v2-loss": (EXPLORATORY, "V2's loss is lower than the Transformer's (DIFF V2: 0.02–0.03 at 1T tokens)"),
    "v2-lin-loss": (EXPLORATORY, "λ without the sigmoid: higher loss than V2 (DIFF V2)"),
    "v2-none-loss": (EXPLORATORY, "no λ: higher loss than V2 (DIFF V2)"),
    "v2-spikes-tr": (EXPLORATORY, "V2 has fewer gradient spikes than the Transformer at a large lr (DIFF V2)"),
    "v2-spikes-v1": (EXPLORATORY, "V2 has fewer gradient spikes than V1 at a large lr (DIFF V2)"),
    "v2-lin-spikes": (EXPLORATORY, "λ without the sigmoid is less stable than V2 (DIFF V2)"),
    "v2-diverge": (EXPLORATORY, "V2 diverges less often than the Transformer at a large lr (DIFF V2)"),
    "v2-logits": (EXPLORATORY, "V2's largest attention logits are smaller than the Transformer's (DIFF V2)"),
    "v2-hidden": (EXPLORATORY, "V2's largest hidden values are smaller than the Transformer's (DIFF V2)"),
    "optimal-norm": (EXPLORATORY, "DIFF's loss is lower with its per-head norm than without (Table 6's GroupNorm "
                                  "ablation, at 20 tokens per parameter)"),
    "optimal-v2": (EXPLORATORY, "V2's loss is lower than the Transformer's at 20 tokens per parameter (DIFF V2)"),
    "recall-noise": (EXPLORATORY, "DIFF's queries put less attention on each distractor pair (Table 3's analogue)"),
    "recall-v2-acc": (EXPLORATORY, "V2 answers more associative-recall queries than the Transformer (DIFF V2)"),
    "recall-norm-acc": (EXPLORATORY, "DIFF answers more associative-recall queries with its per-head norm than "
                                     "without (Table 6's GroupNorm ablation)"),
    "recall4-noise": (EXPLORATORY, "DIFF's queries put less attention on each distractor pair, 4 layers (Table "
                                   "3's analogue)"),
    "recall4-v2-acc": (EXPLORATORY, "V2 answers more associative-recall queries than the Transformer, 4 layers "
                                    "(DIFF V2)"),
    "recall4-norm-acc": (EXPLORATORY, "DIFF answers more associative-recall queries with its per-head norm than "
                                      "without, 4 layers (Table 6's GroupNorm ablation)"),
    "conversion-continue": (OURS, "a trained Transformer converted to DIFF and trained on ends lower than the "
                                  "Transformer trained on for the same tokens"),
    "conversion-scratch": (OURS, "a trained Transformer converted to DIFF and trained on ends lower than DIFF "
                                 "trained from scratch for the same total tokens"),
    "w8a16": (OURS, "DIFF loses less when quantised w8a16"),
    "w8a8": (OURS, "DIFF loses less when quantised w8a8"),
    "w4a16": (OURS, "DIFF loses less when quantised w4a16"),
    "w8a8-best": (OURS, "DIFF loses less under w8a8, each arch at its best activation ranges"),
    "halluc-none": (OURS, "DIFF answers \"none\" where the context does not hold the answer"),
    # the induction-time stage's (docs/reproduce.md "The induction-time stage"), named before its runs: times to
    # an event, censored at the run's end, each arch at its own learning rate
    "induction-onset": (OURS, "DIFF's induction starts sooner than the Transformer's (time to a 1-nat score)"),
    "induction-formed": (OURS, "DIFF forms induction sooner than the Transformer (time to ln V / 2)"),
    "induction-gpt": (OURS, "a textbook GPT forms induction sooner than difftx's LLaMA-style Transformer (time to "
                            "ln V / 2)"),
}
N_PRIMARY = sum(t == PRIMARY for t, _ in CLAIMS.values())

# Every claim recorded, in the order computed (dicts: module docstring, record()); tools/report.py merges the
# stages' (their verdicts.json), corrects the primary ones and lists them all at the top of REPORT.md.
LEDGER = []


def gate(abilities):
    """Why the models compared cannot be compared as architectures, or None. ABILITIES: {ability: {arch: (k,
    n)}}, k of arch's n models having it, the ability a verb phrase ("formed induction"). Confounded where the
    models differ in an ability: some have it and some lack it (within an arch or across the two)."""
    parts = []
    for ability, by in abilities.items():
        have = {a: kn for a, kn in by.items() if kn[1]}
        if have and not (all(k == n for k, n in have.values()) or all(k == 0 for k, _ in have.values())):
            parts.append(" and ".join(f"{k} of {n} {a}" for a, (k, n) in have.items()) + f" models {ability}")
    return "; ".join(parts) or None


def direction(rec):
    """(on the paper's side, against it, seeds) of a claim's per-seed differences."""
    xs = rec.get("per_seed") or []
    s = rec["sign"]
    return sum(x * s > 0 for x in xs), sum(x * s < 0 for x in xs), len(xs)


def _verdict(rec, p):
    if rec["ci"] is None:
        return "not measured"
    if rec.get("gate"):
        return f"not resolved (confounded: {rec['gate']})"
    n = rec["ci"][3]
    if n < MIN_SEEDS:
        return f"not resolved ({n} seed{'s' if n != 1 else ''})"
    if p < ALPHA:
        return "held" if rec["ci"][0] * rec["sign"] > 0 else "did not hold"
    return "not resolved"


def resolved(ci):
    """An interval that may decide: measured, and over at least MIN_SEEDS seeds when it is over seeds."""
    return ci is not None and (len(ci) < 4 or ci[3] >= MIN_SEEDS)


def decides(rec):
    """Whether the claim's test may decide (measured, not confounded, enough seeds)."""
    return rec["ci"] is not None and not rec.get("gate") and rec["ci"][3] >= MIN_SEEDS


def record(key, ci, p, per_seed, sign, where, gate_reason=None, terms=None):
    """A claim's test, into LEDGER: CI (mean, lo, hi, n) of the difference, its two-sided P, the per-seed
    differences, the paper's SIGN (+1: it says the difference is positive), the section it is in, why it is
    confounded (gate()) and the terms of the comparison (learning rates, parameters) where they differ."""
    tier, text = CLAIMS[key]
    rec = {"key": key, "claim": text, "tier": tier, "where": where, "ci": list(ci) if ci else None,
           "p": p if ci else None, "per_seed": list(per_seed or []), "sign": sign, "gate": gate_reason,
           "terms": terms}
    rec["verdict"] = _verdict(rec, p if p is not None else 1.0)
    LEDGER.append(rec)
    return rec


def holm(recs):
    """Holm's step-down over the primary claims of RECS (a full family of N_PRIMARY: a claim not measured,
    confounded or on too few seeds counts with p = 1): sets each one's p_holm and its final verdict."""
    prim = [r for r in recs if r["tier"] == PRIMARY]
    ps = sorted(((r["p"] if decides(r) and r["p"] is not None else 1.0), i) for i, r in enumerate(prim))
    m = max(N_PRIMARY, len(prim))
    running = 0.0
    for j, (p, i) in enumerate(ps):
        running = max(running, min(1.0, (m - j) * p))
        prim[i]["p_holm"] = running
        prim[i]["final"] = _verdict(prim[i], running)
    for r in recs:
        if r["tier"] != PRIMARY:
            r["final"] = r["verdict"]


def holds_every_seed(rec):
    """'; every seed on the paper's side (3 of 3)' where a not-resolved claim's seeds all agree (for a claim of
    ours: the claim's side)."""
    pro, con, n = direction(rec)
    if n < 2 or not rec.get("final", rec["verdict"]).startswith("not resolved"):
        return ""
    whose = "the claim" if rec["tier"] == OURS else "the paper"
    if pro == n:
        return f"; every seed on {whose}'s side ({n} of {n})"
    if con == n:
        return f"; every seed against {whose} ({n} of {n})"
    return ""


def say(rec):
    """The verdict as a section writes it beside its numbers (a confounded one without its reason, which the
    section gives once). A primary claim before correction (a stage's own write-up) points to REPORT.md, which
    corrects the family and writes the final one here instead."""
    if rec["tier"] == PRIMARY and "final" not in rec:
        v = "not resolved (confounded)" if rec.get("gate") and rec["ci"] is not None else rec["verdict"]
        return (f"**{v}** before correction (p = {fmt_p(rec['p'])}; a primary claim: REPORT.md gives "
                f"its verdict after Holm's correction over the {N_PRIMARY}){holds_every_seed(rec)}")
    v = "not resolved (confounded)" if rec.get("gate") and rec["ci"] is not None else rec.get("final", rec["verdict"])
    if rec["tier"] == PRIMARY:
        return (f"**{v}** (primary: Holm-adjusted p = {fmt_p(rec.get('p_holm'))} over {N_PRIMARY} claims)"
                + holds_every_seed(rec))
    return f"**{v}**" + (" (ours, not the paper's)" if rec["tier"] == OURS else "") + holds_every_seed(rec)


def fmt_p(p):
    if p is None:
        return "n/a"
    return "< 0.0001" if p < 1e-4 else f"{p:.4f}" if p < 0.01 else f"{p:.3f}"


def write_verdicts(d):
    """LEDGER as D/verdicts.json (atomically): a stage's claims for REPORT.md (tools/report.py)."""
    with open(os.path.join(d, "verdicts.json.tmp"), "w") as f:
        json.dump(LEDGER, f, indent=1)
    os.replace(os.path.join(d, "verdicts.json.tmp"), os.path.join(d, "verdicts.json"))


def fmt_ci(ci, fmt="{:+.2f}"):
    if ci is None:
        return "n/a"
    m, lo, hi = ci[0], ci[1], ci[2]
    n = ci[3] if len(ci) > 3 else None
    if n == 1:
        return fmt.format(m) + " (1 seed)"
    return (fmt + " [" + fmt + ", " + fmt + "]").format(m, lo, hi) + (f" ({n} seeds)" if n else "")
