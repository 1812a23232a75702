#!/usr/bin/python3
"""Draws the loss curves of several `difftx train --log` runs into one PNG.

usage: tools/plot_loss.py [options] OUT.png RUN.jsonl[:LABEL] [RUN.jsonl[:LABEL] ...]

Each run gets one colour: its training loss raw (faint) and smoothed with an
exponential moving average (solid), and its validation losses as markers joined
by a dashed line. The x axis is tokens seen (step x tokens per step) when
--tokens-per-step is given, otherwise the optimizer step.

The log format is that of docs/training.md: one JSON object per line, per step
{"step","loss","lr","grad_norm","tokens_per_s","elapsed_s"}, per validation
{"step","val_loss","elapsed_s"}, plus checkpoint and "resumed_from" lines. A
null loss (not finite), a line cut off by a kill, and unknown lines are
skipped; after a "resumed_from" line at step S the entries logged after S by
the interrupted process are dropped (the resumed run logs them again).

options:
  --tokens-per-step N  x axis in tokens: step x N (e.g. batch x seq x accum)
  --ema A              smoothing factor of the training-loss EMA; by default
                       2/(w+1) with w = steps/30 (a window of ~3% of the run,
                       so the smoothed line lags little); 0 turns the smoothed
                       line off and draws the raw loss solid
  --log-y              logarithmic y axis
  --title TEXT         the figure's title
  --dpi N              resolution of the PNG (150)

Needs only python3 and matplotlib (Debian: python3-matplotlib, installed by
scripts/setup.sh --plot). Exit status: 0 written, 1 a run that cannot be read
or holds no losses, 2 bad usage.
"""
import json
import math
import os
import sys


def usage_error(msg):
    print(f"plot_loss: {msg}", file=sys.stderr)
    print("usage: tools/plot_loss.py [options] OUT.png RUN.jsonl[:LABEL] ...  (--help)",
          file=sys.stderr)
    sys.exit(2)


def fail(msg):
    print(f"plot_loss: {msg}", file=sys.stderr)
    sys.exit(1)


def finite(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def split_run(arg):
    """RUN.jsonl[:LABEL] -> (path, label). A ':' belongs to the label only when
    the whole argument is not an existing file (so 'a:b.jsonl' still works)."""
    if os.path.exists(arg) or ":" not in arg:
        path, label = arg, None
    else:
        path, label = arg.rsplit(":", 1)
    if not label:
        label = os.path.splitext(os.path.basename(path))[0]
    return path, label


def read_run(path):
    """Returns (train, val): dicts step -> loss, in the order that counts."""
    try:
        f = open(path, "r", encoding="utf-8", errors="replace")
    except FileNotFoundError:
        fail(f"{path}: no such file")
    except OSError as e:
        fail(f"{path}: cannot read: {e.strerror}")
    train, val = {}, {}
    bad = 0
    with f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                bad += 1  # a line cut off by a kill (only the last one, normally)
                continue
            if not isinstance(obj, dict) or not finite(obj.get("step")):
                continue
            step = int(obj["step"])
            if "resumed_from" in obj:
                # The resumed run continues after `step`: what the killed
                # process logged past it is superseded.
                for d in (train, val):
                    for s in [s for s in d if s > step]:
                        del d[s]
                continue
            if "loss" in obj:
                if finite(obj["loss"]):
                    train[step] = float(obj["loss"])
                else:
                    train.pop(step, None)
            if "val_loss" in obj and finite(obj["val_loss"]):
                val[step] = float(obj["val_loss"])
    if bad:
        print(f"plot_loss: {path}: skipped {bad} line(s) that are not JSON", file=sys.stderr)
    return train, val


def ema(values, alpha):
    out, m = [], None
    for v in values:
        m = v if m is None else (1 - alpha) * m + alpha * v
        out.append(m)
    return out


def main(argv):
    opts = {"tokens_per_step": None, "ema": None, "log_y": False, "title": None, "dpi": 150}
    pos = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            print(__doc__.strip())
            return 0
        if a == "--log-y":
            opts["log_y"] = True
        elif a in ("--tokens-per-step", "--ema", "--title", "--dpi"):
            if i + 1 >= len(argv):
                usage_error(f"{a} needs a value")
            v = argv[i + 1]
            i += 1
            try:
                if a == "--tokens-per-step":
                    opts["tokens_per_step"] = int(v)
                    if opts["tokens_per_step"] <= 0:
                        raise ValueError
                elif a == "--ema":
                    opts["ema"] = float(v)
                    if not 0 <= opts["ema"] <= 1:
                        raise ValueError
                elif a == "--dpi":
                    opts["dpi"] = int(v)
                    if opts["dpi"] <= 0:
                        raise ValueError
                else:
                    opts["title"] = v
            except ValueError:
                usage_error(f"bad value for {a}: {v!r}")
        elif a.startswith("--"):
            usage_error(f"unknown option {a}")
        else:
            pos.append(a)
        i += 1
    if len(pos) < 2:
        usage_error("need an output PNG and at least one run")
    out, runs = pos[0], [split_run(a) for a in pos[1:]]
    if not out.lower().endswith(".png"):
        usage_error(f"{out}: the output must be a .png file")

    data = []
    for path, label in runs:
        train, val = read_run(path)
        if not train and not val:
            fail(f"{path}: no training or validation losses in it")
        data.append((label, train, val))

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail(f"matplotlib is missing in {sys.executable} (Debian's /usr/bin/python3 has it once scripts/setup.sh "
             "--plot installed python3-matplotlib: run tools/plot_loss.py itself, or /usr/bin/python3 "
             "tools/plot_loss.py)")

    tps = opts["tokens_per_step"]
    scale = (lambda s: s * tps) if tps else (lambda s: s)
    fig, ax = plt.subplots(figsize=(9, 5.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, (label, train, val) in enumerate(data):
        c = colors[k % len(colors)]
        if train:
            steps = sorted(train)
            xs = [scale(s) for s in steps]
            ys = [train[s] for s in steps]
            alpha = opts["ema"]
            if alpha is None:
                alpha = min(1.0, 2 / (max(1.0, len(ys) / 30) + 1))
            if alpha > 0:
                ax.plot(xs, ys, color=c, alpha=0.2, linewidth=0.8)
                ax.plot(xs, ema(ys, alpha), color=c, linewidth=1.6,
                        label=f"{label} train (EMA {alpha:.2g})")
            else:
                ax.plot(xs, ys, color=c, linewidth=1.2, label=f"{label} train")
        if val:
            steps = sorted(val)
            xs = [scale(s) for s in steps]
            ys = [val[s] for s in steps]
            ax.plot(xs, ys, color=c, linestyle="--", linewidth=1.0, marker="o", markersize=5,
                    markeredgecolor="black", markeredgewidth=0.6,
                    label=f"{label} validation (final {ys[-1]:.3f})")
    ax.set_xlabel("tokens seen" if tps else "step")
    ax.set_ylabel("cross-entropy loss (nats/token)")
    if opts["log_y"]:
        ax.set_yscale("log")
    if tps:
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
            lambda x, _: f"{x / 1e6:g}M" if abs(x) >= 1e6 else (f"{x / 1e3:g}k" if abs(x) >= 1e3 else f"{x:g}")))
    ax.set_title(opts["title"] or "training and validation loss")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=opts["dpi"])
    except OSError as e:
        fail(f"{out}: cannot write: {e.strerror}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
