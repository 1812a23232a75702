"""The paper's measurements (libdifftx's dtx_eval_run): the same code, options and JSON as `difftx eval`.

    import difftx.eval
    r = difftx.eval.needle(model="runs/demo/diff.safetensors", tokenizer="runs/demo/tokenizer.txt",
                           haystack="data/held-out.txt", lengths=[120], samples=5)
    r["table2"]      # the document `difftx eval needle --json` writes, as a dict
    print(r.text)    # the table the command prints

Each function takes the command's flags as keywords: `max_new=8` is `--max-new 8`, a list is
comma-separated (`lengths=[120, 240]`), True gives a switch (`by_position=True`), None or False
leaves the flag out; `json="out.json"` also writes the file. progress: a callable
(what, done, total), or True to show it on stderr; notes (total 0) go there too. A bad option
raises difftx.UsageError before any model time is spent. `difftx.eval.names()` lists them with
their summaries; `difftx.eval.usage(name)` is the command's --help text."""
import ctypes
import json as _json
import os
import sys

from . import _lib

L = _lib.lib

__all__ = ["Result", "run", "names", "usage", "ppl", "needle", "attn_mass", "outliers", "attn_map", "icl", "halluc", "recall"]


class Result(dict):
    """The evaluation's JSON document as a dict; .text is the readable report."""
    text = ""


def names():
    """{name: one-line summary} of every evaluation, in the command's order."""
    out = {}
    for i in range(L.dtx_eval_count()):
        summary = ctypes.c_char_p()
        name = L.dtx_eval_name(i, ctypes.byref(summary)).decode()
        out[name] = summary.value.decode()
    return out


def _flag_value(v):
    if isinstance(v, (list, tuple)):
        return ",".join(_flag_value(x) for x in v)
    if isinstance(v, float):
        return repr(v)
    return os.fsdecode(v) if isinstance(v, (bytes, os.PathLike)) else str(v)


def _argv(options):
    args = []
    for key, v in options.items():
        if v is None or v is False:
            continue
        args.append("--" + key.replace("_", "-"))
        if v is not True:
            args.append(_flag_value(v))
    return args


def _show(what, done, total):
    if total == 0:
        print("difftx: note: %s" % what, file=sys.stderr)
    else:
        print("\r%s %d/%d" % (what, done, total), end="\n" if done == total else "", file=sys.stderr, flush=True)


def _call(name, args, progress):
    if progress is True:
        progress = _show

    def relay(user, what, done, total):
        if progress:
            progress(what.decode("utf-8", "replace"), done, total)
        elif total == 0:
            _show(what.decode("utf-8", "replace"), done, total)

    cb = _lib.PROGRESS(relay)  # kept alive for the call
    argv = (ctypes.c_char_p * max(len(args), 1))(*[os.fsencode(a) for a in args])
    text, doc = ctypes.c_void_p(), ctypes.c_void_p()
    try:
        L.dtx_eval_run(name.encode(), len(args), argv, cb, None, ctypes.byref(text), ctypes.byref(doc))
        report = ctypes.string_at(text.value).decode("utf-8", "replace") if text.value else ""
        document = ctypes.string_at(doc.value).decode("utf-8") if doc.value else None
    finally:
        _lib.libc.free(text)
        _lib.libc.free(doc)
    return report, document


def usage(name):
    """The --help text of evaluation name."""
    return _call(name, ["--help"], None)[0]


def run(name, progress=None, **options):
    """Evaluation `name` ("needle", "attn-mass", ...) with the command's flags as keywords; a Result."""
    report, document = _call(name, _argv(options), progress)
    r = Result(_json.loads(document))
    r.text = report
    return r


def ppl(progress=None, **options):
    """Perplexity with a sliding window (`difftx eval ppl`)."""
    return run("ppl", progress, **options)


def needle(progress=None, **options):
    """Multi-needle retrieval (`difftx eval needle`)."""
    return run("needle", progress, **options)


def attn_mass(progress=None, **options):
    """Attention on the answer, BOS, other context and the query (`difftx eval attn-mass`)."""
    return run("attn-mass", progress, **options)


def outliers(progress=None, **options):
    """Top-k and median of |attention logits| and |hidden states| (`difftx eval outliers`)."""
    return run("outliers", progress, **options)


def attn_map(progress=None, **options):
    """One prompt's attention maps of a layer and head (`difftx eval attn-map`)."""
    return run("attn-map", progress, **options)


def icl(progress=None, **options):
    """Many-shot in-context classification (`difftx eval icl`)."""
    return run("icl", progress, **options)


def halluc(progress=None, **options):
    """Contextual faithfulness (`difftx eval halluc`)."""
    return run("halluc", progress, **options)


def recall(progress=None, **options):
    """Multi-query associative recall against distractors (`difftx eval recall`)."""
    return run("recall", progress, **options)
