#!/usr/bin/python3
"""Draws the figures of `difftx eval` measurements from their JSON output.

usage: tools/plot_eval.py <figure> [options] ...   (tools/plot_eval.py <figure> --help)

One subcommand per figure (docs/eval_probe.md):

  attn-map A.json [B.json] --out PNG    (or: attn-map A.json PNG)
      The attention maps of `difftx eval attn-map --json`: a DIFF file gives
      three panels, A1 = softmax(Q1K1^T/sqrt(d)), A2 and the weights the head
      uses, A1 - lambda*A2 (a diverging colour map centred at 0); a
      Transformer file gives its one map. A second file is drawn beside the
      first (e.g. DIFF and its baseline on the same prompt). The softmax
      panels share one colour scale, so the maps compare directly. Query rows
      run down, key columns across; entries above the diagonal (future keys)
      are blank. With T <= 64 tokens the axes carry the tokens.

  needle-heatmap A.json [B.json] --out PNG [--grid NxR]
      The depth x length accuracy grid of `difftx eval needle --json` for one
      (N, R) of its grid (the first, or --grid), one panel per file (e.g.
      DIFF and its baseline), each cell's per-query accuracy printed in it:
      the paper's Fig 5 layout.

  by-position A.json [B.json ...] --out PNG
      The cumulative mean NLL against the context length of `difftx eval
      ppl --by-position --json` (the paper's Fig. 4), one line per file
      (e.g. DIFF and the Transformer, or several seeds), on a log axis of
      positions.

Needs only python3 and matplotlib (Debian: python3-matplotlib, installed by
scripts/setup.sh --plot). Exit status: 0 written, 1 an input that cannot be
read or is not such a file, 2 bad usage.
"""
import argparse
import json
import math
import os
import sys

LABEL_MAX_T = 64  # above this, token labels would overlap


class InputError(Exception):
    """An input file that cannot be read or has the wrong shape (exit 1)."""


def fail(msg, code):
    print(f"plot_eval: {msg}", file=sys.stderr)
    sys.exit(code)


ARCH_NAME = {"diff": "DIFF", "transformer": "Transformer"}


def arch_name(js):
    return ARCH_NAME.get(js.get("arch"), js.get("arch", "?"))


def pyplot():
    """matplotlib's pyplot, drawing to files only."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save(fig, out, dpi):
    """Writes the figure to out atomically (a temporary name, then renamed) and closes it."""
    import matplotlib.pyplot as plt
    tmp = f"{out}.tmp.{os.getpid()}.png"
    try:
        fig.savefig(tmp, dpi=dpi)
        os.replace(tmp, out)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise InputError(f"cannot write {out}: {e}")
    finally:
        plt.close(fig)


def load_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"cannot read {path}: {e}")


# ------------------------------------------------------------------ attn-map

def check_square(path, name, rows, T):
    if not isinstance(rows, list) or len(rows) != T or any(
            not isinstance(r, list) or len(r) != T for r in rows):
        raise InputError(f"{path}: maps.{name} is not a {T} x {T} matrix")


def read_attn_map(path):
    """The panels of one attn-map file: [(title, T x T rows, kind)], plus tokens."""
    d = load_json(path)
    try:
        arch, maps, tokens = d["arch"], d["maps"], d["tokens"]
        layer, head = d["layer"], d["head"]
    except (KeyError, TypeError):
        raise InputError(f"{path}: not the JSON of difftx eval attn-map (arch, layer, head, tokens, maps)")
    T = len(tokens)
    where = f"layer {layer} head {head}"
    if arch == "diff":
        lam = d.get("lambda")
        for name in ("a1", "a2", "diff"):
            check_square(path, name, maps.get(name), T)
        lam_s = f"{lam:.3g}" if isinstance(lam, (int, float)) else "?"
        panels = [(f"DIFF A1  ({where})", maps["a1"], "prob"),
                  ("DIFF A2", maps["a2"], "prob"),
                  (f"DIFF A1 - \u03bbA2  (\u03bb = {lam_s})", maps["diff"], "signed")]
    else:
        check_square(path, "a1", maps.get("a1"), T)
        panels = [(f"Transformer  ({where})", maps["a1"], "prob")]
    return panels, tokens


def token_label(tok):
    s = tok.replace("\n", "\\n").replace("\t", "\\t")
    if s and not s.strip():
        s = s.replace(" ", "\u2423")  # a visible space for whitespace-only tokens
    return s if len(s) <= 12 else s[:11] + "\u2026"


def masked(rows):
    """The causal part; entries above the diagonal become NaN (drawn blank)."""
    return [[v if s <= t else math.nan for s, v in enumerate(r)] for t, r in enumerate(rows)]


def draw_panel(ax, title, rows, kind, tokens, vmax_prob):
    import matplotlib.colors as mcolors
    T = len(rows)
    data = masked(rows)
    if kind == "signed":
        m = max((abs(v) for r in data for v in r if not math.isnan(v)), default=1.0) or 1.0
        im = ax.imshow(data, cmap="RdBu_r", norm=mcolors.TwoSlopeNorm(vcenter=0.0, vmin=-m, vmax=m),
                       interpolation="nearest")
    else:
        im = ax.imshow(data, cmap="viridis", vmin=0.0, vmax=vmax_prob, interpolation="nearest")
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    if T <= LABEL_MAX_T:
        size = max(4, min(8, 360 // max(T, 1)))
        labels = [token_label(t) for t in tokens]
        ax.set_xticks(range(T))
        ax.set_yticks(range(T))
        ax.set_xticklabels(labels, rotation=90, fontsize=size)
        ax.set_yticklabels(labels, fontsize=size)
    return im


def plot_attn_map(paths, out, title=None, dpi=150):
    """One row of panels: every panel of every file, in order."""
    plt = pyplot()

    files = [read_attn_map(p) for p in paths]
    panels = [(t, rows, kind, toks) for ps, toks in files for (t, rows, kind) in ps]
    vmax = max((v for _, rows, kind, _ in panels if kind == "prob" for r in rows for v in r), default=1.0)
    T = max(len(toks) for _, toks in files)
    side = 4.2 if T <= LABEL_MAX_T else 3.6
    fig, axes = plt.subplots(1, len(panels), figsize=(side * len(panels) + 0.8, side + 0.9), squeeze=False)
    for ax, (t, rows, kind, toks) in zip(axes[0], panels):
        im = draw_panel(ax, t, rows, kind, toks, vmax or 1.0)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    save(fig, out, dpi)


def cmd_attn_map(args):
    files = list(args.files)
    out = args.out
    if out is None and len(files) >= 2 and files[-1].lower().endswith(".png"):
        out = files.pop()
    if out is None:
        fail("attn-map: give the output: --out PNG (or a last argument ending in .png)", 2)
    if not 1 <= len(files) <= 2:
        fail(f"attn-map: expected one or two JSON files, got {len(files)}", 2)
    plot_attn_map(files, out, args.title, args.dpi)
    print(f"wrote {out}")


def read_needle(path, grid):
    js = load_json(path)
    cells = js.get("cells") if isinstance(js, dict) else None
    if not isinstance(cells, list) or not cells:
        raise InputError(f"{path}: not the JSON of difftx eval needle (no cells)")
    try:
        if grid is None:
            grid = (cells[0]["n"], cells[0]["r"])
        cells = [c for c in cells if (c["n"], c["r"]) == grid]
        lengths = sorted({c["length"] for c in cells})
        depths = sorted({c["depth"] for c in cells})
        acc = {(c["depth"], c["length"]): float(c["acc"]) for c in cells}
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"{path}: a cell lacks {e}")
    if not cells:
        raise InputError(f"{path}: no cells with N = {grid[0]}, R = {grid[1]}")
    return js, grid, lengths, depths, acc


def plot_needle_heatmap(paths, out, grid=None, dpi=150):
    plt = pyplot()
    data = [read_needle(p, grid) for p in paths]
    fig, axes = plt.subplots(1, len(data), figsize=(4.6 * len(data) + 1, 4), squeeze=False, constrained_layout=True)
    im = None
    for ax, (js, g, lengths, depths, acc) in zip(axes[0], data):
        grid_v = [[acc.get((d, l), float("nan")) for l in lengths] for d in depths]
        im = ax.imshow(grid_v, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
        for i, row in enumerate(grid_v):
            for j, v in enumerate(row):
                ax.text(j, i, "" if math.isnan(v) else f"{v:.2f}", ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(lengths)), [str(x) for x in lengths])
        ax.set_yticks(range(len(depths)), [f"{d:g}%" for d in depths])
        ax.set_xlabel("context length (tokens)")
        if ax is axes[0][0]:
            ax.set_ylabel("answer depth")
        ax.set_title(f"{arch_name(js)}: N = {g[0]}, R = {g[1]}")
    fig.colorbar(im, ax=list(axes[0]), shrink=0.8, label="per-query accuracy")
    save(fig, out, dpi)


def cmd_needle_heatmap(args):
    grid = None
    if args.grid:
        try:
            n, r = (int(x) for x in args.grid.lower().split("x"))
            grid = (n, r)
        except ValueError:
            fail(f"needle-heatmap: --grid: expected NxR, got '{args.grid}'", 2)
    if not 1 <= len(args.files) <= 2:
        fail(f"needle-heatmap: expected one or two JSON files, got {len(args.files)}", 2)
    plot_needle_heatmap(args.files, args.out, grid, args.dpi)
    print(f"wrote {args.out}")


# ------------------------------------------------------------------ by-position

def read_by_position(path):
    js = load_json(path)
    bp = js.get("by_position") if isinstance(js, dict) else None
    try:
        pos, cum = [int(x) for x in bp["position"]], [float(x) for x in bp["cumulative"]]
    except (TypeError, KeyError, ValueError):
        raise InputError(f"{path}: not the JSON of difftx eval ppl --by-position (no by_position)")
    if not pos or len(pos) != len(cum):
        raise InputError(f"{path}: by_position has {len(pos)} positions and {len(cum)} cumulative values")
    return js, pos, cum


def plot_by_position(paths, out, dpi=150):
    plt = pyplot()
    data = [read_by_position(p) for p in paths]
    fig, ax = plt.subplots(figsize=(6, 4), constrained_layout=True)
    colour = {"diff": "tab:red", "transformer": "tab:blue"}
    for path, (js, pos, cum) in zip(paths, data):
        name = arch_name(js)
        ax.plot(pos, cum, color=colour.get(js.get("arch")), alpha=0.8,
                label=f"{name} ({os.path.basename(path)})" if len(paths) > 2 else name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("position (tokens of context)")
    ax.set_ylabel("cumulative mean NLL (nats)")
    ax.set_title("loss by position")
    ax.legend(fontsize=7)
    save(fig, out, dpi)


def cmd_by_position(args):
    plot_by_position(args.files, args.out, args.dpi)
    print(f"wrote {args.out}")


# ------------------------------------------------------------------ main

class Parser(argparse.ArgumentParser):
    """argparse with our one-line usage errors (exit 2)."""

    def error(self, message):
        where = self.prog.split()[-1]
        fail(f"{message} (see --help)" if where == "plot_eval.py" else f"{where}: {message} (see --help)", 2)


def build_parser():
    p = Parser(prog="plot_eval.py", description=__doc__.split("\n\n")[0],
               formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="figure", metavar="<figure>", parser_class=Parser)
    a = sub.add_parser("attn-map", help="attention maps of difftx eval attn-map (DIFF and/or baseline)",
                       description="DIFF: A1, A2 and A1 - lambda*A2; Transformer: its map. "
                                   "Two files are drawn side by side.")
    a.add_argument("files", nargs="+", metavar="JSON", help="one or two attn-map JSON files (then PNG if no --out)")
    a.add_argument("--out", help="the PNG to write")
    a.add_argument("--title", help="the figure's title")
    a.add_argument("--dpi", type=int, default=150, help="resolution (150)")
    a.set_defaults(run=cmd_attn_map)
    h = sub.add_parser("needle-heatmap", help="depth x length accuracy of difftx eval needle (Fig 5 layout)",
                       description="One (N, R) of a needle grid as an answer-depth x context-length heatmap.")
    h.add_argument("files", nargs="+", metavar="JSON", help="one or two needle JSON files")
    h.add_argument("--out", required=True, help="the PNG to write")
    h.add_argument("--grid", help="which N x R of the file's grid (default: the first)")
    h.add_argument("--dpi", type=int, default=150, help="resolution (150)")
    h.set_defaults(run=cmd_needle_heatmap)
    b = sub.add_parser("by-position", help="cumulative NLL by position of difftx eval ppl --by-position (Fig 4)",
                       description="The cumulative mean NLL against the context length, one line per file.")
    b.add_argument("files", nargs="+", metavar="JSON", help="eval ppl --by-position JSON files")
    b.add_argument("--out", required=True, help="the PNG to write")
    b.add_argument("--dpi", type=int, default=150, help="resolution (150)")
    b.set_defaults(run=cmd_by_position)
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    if not getattr(args, "run", None):
        fail("name a figure: attn-map, needle-heatmap or by-position (see --help)", 2)
    try:
        args.run(args)
    except InputError as e:
        fail(str(e), 1)
    except ImportError as e:
        fail(f"{e} in {sys.executable} (Debian's /usr/bin/python3 has it once scripts/setup.sh --plot installed "
             "python3-matplotlib: run tools/plot_eval.py itself, or /usr/bin/python3 tools/plot_eval.py)", 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
