"""What the reproduction's stages leave in a run folder, read the one way
(tools/report.py, tools/scaling.py, tools/induction.py): settings.txt,
training logs, the finished models and their sizes; and the power-law fit
they share."""
import glob
import gzip
import json
import math
import os
import re
import statistics
import struct


def read_settings(path):
    """settings.txt: `key=value` words, a value running on over the words
    without `=` that follow it ("dims=64 96 128" -> {"dims": "64 96 128"})."""
    out, key = {}, None
    for word in open(path).read().split():
        if "=" in word:
            key, v = word.split("=", 1)
            out[key] = v
        elif key is not None:
            out[key] += " " + word
    return out


def params_of(path):
    """(total, non-embedding) parameter counts from a safetensors file's header."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    total = emb = 0
    for name, t in header.items():
        if name == "__metadata__":
            continue
        k = math.prod(t["shape"])
        total += k
        if name in ("tok_embeddings.weight", "output.weight"):
            emb += k
    return total, total - emb


def header_meta(path):
    """A safetensors file's __metadata__."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)).get("__metadata__", {})


def finished_models(run_dir, pattern):
    """{regex groups: base path} of the finished models in RUN_DIR/models whose names match PATTERN (a regex
    without the extension): those with their weights or, where the weights stayed on the machine that trained
    them, the `difftx info --json` record written when the training finished (NAME.info.json)."""
    out = {}
    for ext in (".safetensors", ".info.json"):
        for p in glob.glob(os.path.join(run_dir, "models", "*" + ext)):
            m = re.fullmatch(pattern, os.path.basename(p)[: -len(ext)])
            if m:
                out.setdefault(m.groups(), p[: -len(ext)])
    return dict(sorted(out.items()))  # in name order, whatever the file system's: bootstraps draw in this order


def model_info(base):
    """{"params", "params_nonembed", "n_heads"} of a finished model: from its info record when there is one
    (difftx info --json counts the same way as params_of), else from its weights' header."""
    if os.path.exists(base + ".info.json"):
        with open(base + ".info.json") as f:
            info = json.load(f)
        return {k: info[k] for k in ("params", "params_nonembed", "n_heads")}
    total, nonembed = params_of(base + ".safetensors")
    return {"params": total, "params_nonembed": nonembed,
            "n_heads": int(header_meta(base + ".safetensors").get("n_heads", 0))}


def read_entries(path):
    """[(step, entry)] of a JSONL training log, plain or gzipped: the step lines (those with a loss) and
    validation lines merged per step; a resume replaces what followed its step."""
    rows = {}
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            s = e.get("step")
            if s is None:
                continue
            if "resumed_from" in e:
                rows = {k: v for k, v in rows.items() if k <= s}
            rows.setdefault(s, {}).update(e)
    return sorted(rows.items())


def read_log(path):
    """(train points [(step, loss)], val points [(step, val_loss)]) of a training log."""
    entries = read_entries(path)
    return ([(s, e["loss"]) for s, e in entries if e.get("loss") is not None],
            [(s, e["val_loss"]) for s, e in entries if e.get("val_loss") is not None])


def fit_power(xs, ys):
    """Least squares of log y = log a + b log x: returns (a, b)."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    sxx = sum((x - mx) ** 2 for x in lx)
    b = sum((x - mx) * (y - my) for x, y in zip(lx, ly)) / sxx
    return math.exp(my - b * mx), b
