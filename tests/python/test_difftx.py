"""The difftx Python package (python/difftx) against the C side: logits
against the PyTorch fixtures the C tests use, score / sample / train /
attn-map / tokenizer against the difftx command, state dicts, checkpoints,
errors, and memory over 1000 loads. pytest-free: run it as a script (make
test runs it through tests/scripts/python_test.sh); it ends with
"N passed, N failed". Needs DIFFTX_BIN (the difftx command) and finds the
library as the package does (DIFFTX_LIB, or the checkout's build/)."""
import base64
import ctypes
import glob
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import traceback

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
import difftx  # noqa: E402

BIN = os.environ.get("DIFFTX_BIN", os.path.join(ROOT, "build", "difftx"))
TMP = tempfile.mkdtemp(prefix="difftx-py-")
TESTS = []


class Skip(Exception):
    """A test that cannot measure anything here, with the reason."""


def test(f):
    TESTS.append(f)
    return f


def run(*args, check=True):
    r = subprocess.run([BIN] + [str(a) for a in args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError("difftx %s: exit %d: %s" % (" ".join(map(str, args)), r.returncode, r.stderr.strip()))
    return r


def read_safetensors(path):
    """An independent reader: {name: array} and the metadata."""
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", (path, k, v["dtype"])
        lo, hi = v["data_offsets"]
        out[k] = np.frombuffer(b[8 + n + lo:8 + n + hi], dtype="<f4").reshape(v["shape"])
    return out, h.get("__metadata__", {})


def small_config(arch="diff", **kw):
    c = dict(arch=arch, dim=32, n_layers=2, n_heads=2, vocab_size=61, ffn_dim=64, max_seq_len=16)
    c.update(kw)
    return difftx.Config(**c)


def token_file(name, n=3000, vocab=61):
    ids = [(i * 7 + i // 13) % vocab for i in range(n)]
    p = os.path.join(TMP, name)
    with open(p, "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    return p, np.array(ids, dtype=np.int32)


def raises(cls, fn, *a, contains=None, **kw):
    try:
        fn(*a, **kw)
    except cls as e:
        assert isinstance(e, difftx.Error) or cls is TypeError, e
        if contains is not None:
            assert contains in str(e), "message %r lacks %r" % (str(e), contains)
        return e
    except Exception as e:  # noqa: BLE001
        raise AssertionError("expected %s, got %s: %s" % (cls.__name__, type(e).__name__, e))
    raise AssertionError("expected %s, nothing was raised" % cls.__name__)


# ---------------------------------------------------------------- the fixtures

@test
def logits_match_the_pytorch_fixtures():
    """Every fixture model of tests/fixtures (V1, V2, Transformer, GQA,
    tied, variants): the package's logits against PyTorch's, at the C parity
    test's tolerance (1e-4 of the tensor's largest value)."""
    models = sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "*.model.safetensors")))
    assert len(models) >= 15, models
    for mp in models:
        exp, _ = read_safetensors(mp.replace(".model.", ".expect."))
        tokens = exp["tokens"].astype(np.int64)
        m = difftx.Model.load(mp)
        got = m.logits(tokens[:, :-1])
        ref = exp["logits"]
        assert got.shape == ref.shape and got.dtype == np.float32, (mp, got.shape)
        err = np.abs(got - ref).max() / np.abs(ref).max()
        assert err < 1e-4, "%s: logits differ by %.2e of the largest" % (os.path.basename(mp), err)
        # one row at a time gives the batch's rows
        assert np.array_equal(m.logits(tokens[1, :-1]), got[1]), mp


@test
def score_is_the_command_score():
    for mp in sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "*_tied.model.safetensors"))):
        exp, _ = read_safetensors(mp.replace(".model.", ".expect."))
        ids = exp["tokens"][0].astype(np.int64)
        p = os.path.join(TMP, "score.txt")
        with open(p, "w") as f:
            f.write(" ".join(map(str, ids)))
        want = json.loads(run("score", "--model", mp, "--tokens", p).stdout)
        got = difftx.Model.load(mp).score(ids)
        assert want["tokens"] == len(ids) - 1
        assert float("%.9g" % got) == want["loss"], (mp, got, want)


# ---------------------------------------------------------------- weights

@test
def state_dict_round_trips():
    for arch, kw in (("diff", {}), ("transformer", dict(n_heads=4, n_kv_heads=2)),
                     ("diff2", dict(tie_embeddings=False)), ("diff", dict(subln="none", lambda_init=0.5))):
        cfg = small_config(arch, **kw)
        m = difftx.Model.init(cfg, seed=4)
        assert m.config == cfg, (m.config, cfg)
        sd = m.state_dict()
        assert sum(a.size for a in sd.values()) == m.num_params()
        ids = np.arange(12) % 61
        m2 = difftx.Model.from_state_dict(cfg, sd)
        assert np.array_equal(m.logits(ids), m2.logits(ids)), arch
        # the file's names and values are the state dict's (read independently)
        p = os.path.join(TMP, "sd.safetensors")
        m.save(p)
        file, meta = read_safetensors(p)
        assert set(file) == set(sd) and all(np.array_equal(file[k], sd[k]) for k in sd), arch
        assert meta["arch"] == arch
        loaded = difftx.Model.load(p)
        assert loaded.config == cfg and np.array_equal(loaded.logits(ids), m.logits(ids))
        # a changed tensor changes the model
        sd2 = dict(sd)
        name = next(k for k in sd if k.endswith("w2.weight"))
        sd2[name] = sd[name] * 2
        assert not np.array_equal(difftx.Model.from_state_dict(cfg, sd2).logits(ids), m.logits(ids))
        # bf16 files: the values rounded to bf16
        m.save(p, bf16=True)
        r = difftx.Model.load(p).state_dict()[name]
        assert np.abs(r - sd[name]).max() <= np.abs(sd[name]).max() * 2 ** -8
    cfg = small_config()
    sd = difftx.Model.init(cfg).state_dict()
    raises(difftx.ArgumentError, difftx.Model.from_state_dict, cfg, {k: v for k, v in sd.items() if k != "norm.weight"},
           contains="norm.weight is missing")
    raises(difftx.ArgumentError, difftx.Model.from_state_dict, cfg, dict(sd, extra=np.zeros(3, np.float32)),
           contains="extra")
    bad = dict(sd)
    bad["norm.weight"] = np.zeros(5, np.float32)
    raises(difftx.ArgumentError, difftx.Model.from_state_dict, cfg, bad, contains="shape")


@test
def struct_mirrors_match_the_library():
    """Every ctypes mirror of a public struct has the library's sizeof and offsets (checked at import too); a
    mirror that lost a field, or one the library does not have, is refused with both layouts named."""
    from difftx import _lib
    layout = _lib.lib.dtx_struct_layout().decode()
    assert _lib.check_layout(layout, _lib.MIRRORS) == sorted(_lib.MIRRORS)
    assert len(layout.splitlines()) == len(_lib.MIRRORS)

    class Short(ctypes.Structure):  # dtx_optim_config without its last two fields: the layout before them
        _fields_ = _lib.OptimConfig._fields_[:-2]
    try:
        _lib.check_layout(layout, {"dtx_optim_config": Short})
    except ImportError as e:
        assert "dtx_optim_config is laid out as" in str(e) and "different versions" in str(e), e
    else:
        raise AssertionError("a stale mirror was accepted")


@test
def config_matches_the_library():
    c = difftx.Config()
    assert (c.arch, c.dim, c.n_layers, c.n_heads, c.vocab_size, c.ffn_dim, c.max_seq_len) == \
        ("diff", 256, 4, 4, 4096, 688, 256), c
    b = small_config().baseline()
    assert b.arch == "transformer" and b.n_heads == 4 and b.n_kv_heads == 4, b
    n_diff, n_tf = (difftx.Model.init(c).num_params(embeddings=False) for c in (small_config(), b))
    assert abs(n_diff - n_tf) < 0.02 * n_tf, (n_diff, n_tf)  # matched but for λ and the head norms
    raises(difftx.ConfigError, small_config(dim=33).validate, contains="dim")
    raises(difftx.ConfigError, small_config(arch="gpt").validate, contains="arch")
    raises(difftx.ConfigError, difftx.Model.init, small_config(lambda_init=1.5))
    raises(TypeError, difftx.Config, heads=3)


# ---------------------------------------------------------------- running

@test
def generate_is_the_command_sample():
    mp = os.path.join(ROOT, "tests", "fixtures", "diff_gqa_untied.model.safetensors")
    m = difftx.Model.load(mp)
    prompt = [3, 1, 4, 1]
    for temp, seed in ((0, 1), (0.9, 7), (1.5, 2)):
        out = run("sample", "--model", mp, "--prompt", " ".join(map(str, prompt)), "--max-tokens", 8,
                  "--temperature", temp, "--seed", seed).stdout.split()
        got = list(m.generate(prompt, 8, temperature=temp, seed=seed))
        assert list(map(int, out)) == prompt + got, (temp, seed, out, got)
    # the cache stops at max_seq_len; eos stops it and is not given
    maxlen = m.config.max_seq_len
    assert len(list(m.generate(prompt, 100, temperature=0))) == maxlen - len(prompt)
    assert list(m.generate(list(range(maxlen)), 5)) == []
    greedy = list(m.generate(prompt, 5, temperature=0))
    assert list(m.generate(prompt, 5, temperature=0, eos=greedy[2])) == greedy[:2]
    raises(difftx.ArgumentError, m.generate, prompt, 3, top_p=0)
    raises(difftx.ArgumentError, lambda: list(m.generate([], 3)))
    # a bf16 KV cache generates as long (its ids may differ: rounded keys and values); a type it lacks is refused
    assert len(list(m.generate(prompt, 100, temperature=0, kv_cache="bf16"))) == maxlen - len(prompt)
    raises(difftx.ArgumentError, m.generate, prompt, 3, kv_cache="fp16", contains="kv_cache")
    # auto, the default, is fp32 for this fp32 model (bf16 for bf16 or quantised weights: dtx_kv_type_for)
    assert greedy == list(m.generate(prompt, 5, temperature=0, kv_cache="fp32"))
    assert greedy == list(m.generate(prompt, 5, temperature=0, kv_cache="auto"))


@test
def attention_map_is_the_command_attn_map():
    tok = difftx.Tokenizer.train(["The Differential Transformer cancels attention noise. " * 20], vocab_size=300)
    tp = os.path.join(TMP, "tok.txt")
    tok.save(tp)
    for arch in ("diff", "transformer", "diff2"):
        cfg = small_config(arch, vocab_size=tok.vocab_size, max_seq_len=12)
        m = difftx.Model.init(cfg, seed=2)
        mp = os.path.join(TMP, arch + ".safetensors")
        m.save(mp)
        jp = os.path.join(TMP, arch + ".json")
        text = "The Differential Transformer"
        run("eval", "attn-map", "--model", mp, "--tokenizer", tp, "--text", text, "--json", jp, "--layer", 1,
            "--head", 1)
        with open(jp) as f:
            j = json.load(f)
        ids = np.array(j["ids"])
        assert list(ids[1:]) == list(tok.encode(text)) and ids[0] == tok.token_id("<|bos|>")
        maps = {"a1": "first", "a2": "second", "diff": "combined"}
        assert set(j["maps"]) == ({"a1"} if arch == "transformer" else set(maps)), (arch, list(j["maps"]))
        for key, want in j["maps"].items():
            want = np.array(want)
            got = m.attention_map(ids, 1, 1, maps[key])
            assert want.shape == got.shape == (len(ids), len(ids)), (arch, key, want.shape, got.shape)
            assert np.abs(want - got).max() < 1e-8, (arch, key, np.abs(want - got).max())  # %.9g in the file
        a1 = m.attention_map(ids, 0, 0, "first")
        assert np.allclose(a1.sum(1), 1) and np.all(np.triu(a1, 1) == 0)
        if arch == "diff":
            lam = m.lambda_(0)
            assert np.allclose(m.attention_map(ids, 0, 0).sum(1), 1 - lam), lam
        if arch == "transformer":
            raises(difftx.ArgumentError, m.attention_map, ids, 0, 0, "second", contains="one attention map")
        raises(difftx.ArgumentError, m.attention_map, ids, 2, 0, contains="layer")
        raises(difftx.ArgumentError, m.attention_map, ids, 0, 0, "both")


def _haystack():
    w = ["The farmer", "A river", "The old town", "Our committee", "The winter"]
    o = ["the harvest", "the road", "a letter", "the bridge", "the market", "the bells"]
    return "".join("%s saw %s.%s" % (w[i % 5], o[(i * 7) % 6], "\n" if i % 11 == 10 else " ") for i in range(300))


def _words():
    return "".join(" %c%c%c%s" % (97 + i % 26, 97 + (i // 26 + 3) % 26, 97 + (i // 676 + 5) % 26,
                                  ":\n" if i % 9 == 8 else "") for i in range(800)) * 5


@test
def evaluations_are_the_command_evaluations():
    """Every evaluation through difftx.eval gives the JSON `difftx eval --json` writes (timings aside) and
    the report it prints; bad options raise UsageError with the command's message."""
    hay = os.path.join(TMP, "hay.txt")
    with open(hay, "w") as f:
        f.write(_haystack())
    qa = ("There is a special magic number inside a lot of irrelevant text. What is the special magic Paris number? "
          "The special magic Paris number is: 12345. List every special magic number. The special magic numbers "
          "are none")
    tok = difftx.Tokenizer.train([_haystack(), qa], vocab_size=400)
    wtok = difftx.Tokenizer.train([_words()], vocab_size=1500)
    tp, wtp = os.path.join(TMP, "qa.tok"), os.path.join(TMP, "words.tok")
    tok.save(tp)
    wtok.save(wtp)
    mp, wmp = os.path.join(TMP, "qa.safetensors"), os.path.join(TMP, "words.safetensors")
    difftx.Model.init(small_config("diff", vocab_size=tok.vocab_size, max_seq_len=256), seed=3).save(mp)
    difftx.Model.init(small_config("diff", vocab_size=wtok.vocab_size, max_seq_len=256), seed=4).save(wmp)
    common = dict(model=mp, tokenizer=tp)
    cases = [
        ("ppl", dict(model=mp, text=hay, tokenizer=tp, by_position=True)),
        ("needle", dict(common, haystack=hay, lengths=[200], grid=["1x1", "2x2"], depths=[0, 50], samples=2)),
        ("attn-mass", dict(common, haystack=hay, length=200, depths=[50], samples=2)),
        ("outliers", dict(model=mp, text=hay, tokenizer=tp, count=512)),
        ("attn-map", dict(common, text="The farmer saw the road.", layer=1, head=1)),
        ("icl", dict(model=wmp, tokenizer=wtp, queries=2, episodes=1, shots=[1, 2], orders=2)),
        ("halluc", dict(common, haystack=hay, samples=2, needles=2, list_needles=[2, 3])),
        ("recall", dict(model=mp, queries=2, distractors=[0, 3], episodes=3)),
    ]
    seen = []
    for name, opts in cases:
        jp = os.path.join(TMP, name + ".json")
        flags = difftx.eval._argv(dict(opts, json=jp))
        printed = run("eval", name, *flags).stdout
        with open(jp) as f:
            want = json.load(f)
        calls = []
        got = difftx.eval.run(name, progress=lambda w, d, t: calls.append((w, d, t)), **opts)
        for j in (want, got):
            j.pop("seconds", None)
        assert dict(got) == want, (name, sorted(k for k in want if want.get(k) != got.get(k)))
        printed, text = printed.replace("wrote " + jp + "\n", "").rstrip("\n"), got.text.rstrip("\n")
        if name == "outliers":  # its report names the seconds taken
            printed, text = [[ln for ln in t.splitlines() if " s\n" not in ln + "\n"] for t in (printed, text)]
        assert printed == text, (name, printed, text)
        if name != "attn-map":  # one forward pass: nothing to count
            assert calls and calls[-1][1] == calls[-1][2] and all(0 < d <= t for _, d, t in calls), (name, calls)
        seen.append(name)
    assert seen == list(difftx.eval.names()), (seen, list(difftx.eval.names()))
    assert "usage: difftx eval needle" in difftx.eval.usage("needle")
    raises(difftx.UsageError, difftx.eval.needle, contains="--model is required", tokenizer=tp, haystack=hay)
    raises(difftx.UsageError, difftx.eval.needle, contains="--lengths: 250 + --max-new 8", lengths=[250],
           haystack=hay, **common)
    raises(difftx.UsageError, difftx.eval.run, "nonesuch", contains="unknown measurement")
    raises(difftx.FileError, difftx.eval.ppl, model=mp, tokens=os.path.join(TMP, "missing.txt"))


@test
def describe_is_the_command_info():
    """Model.describe / Tokenizer.describe / difftx.system are `difftx info`'s reports (JSON and text)."""
    mp = os.path.join(ROOT, "tests", "fixtures", "diff_gqa_untied.model.safetensors")
    m = difftx.Model.load(mp)
    assert m.describe(as_json=True, tensors=True, path=mp) == json.loads(run("info", "--json", "--tensors", mp).stdout)
    assert m.describe(path=mp) == run("info", mp).stdout
    assert difftx.system(as_json=True) == json.loads(run("info", "--system", "--json").stdout)
    tok = difftx.Tokenizer.train(["describe me " * 30], vocab_size=270)
    tp = os.path.join(TMP, "describe.tok")
    tok.save(tp)
    assert tok.describe(as_json=True, path=tp) == json.loads(run("tokenizer", "info", "--json", tp).stdout)


@test
def tokenizer_is_the_command_tokenizer():
    tp = os.path.join(TMP, "tok2.txt")
    texts = ["Ünïcödé, 日本語 and <|bos|> in plain text.\n\tTabs and 1234567 numbers. " * 10]
    tok = difftx.Tokenizer.train(texts, vocab_size=320)
    tok.save(tp)
    text = "Ünïcödé <|eos|> numbers 1234567!"
    for special in (False, True):
        args = ["tokenizer", "encode", "--tokenizer", tp, "--text", text] + (["--special"] if special else [])
        want = list(map(int, run(*args).stdout.split()))
        got = difftx.Tokenizer.load(tp).encode(text, special=special)
        assert got.dtype == np.int32 and list(got) == want, (special, want, list(got))
        assert tok.decode(got) == text
    assert "<|eos|>" in tok.specials and tok.token_id("<|nope|>") is None
    raw = bytes(range(256)) + b"\xff\xfe"
    assert tok.decode_bytes(tok.encode(raw)) == raw
    raises(difftx.ArgumentError, tok.decode, [tok.vocab_size + 5])
    raises(difftx.FileError, difftx.Tokenizer.load, os.path.join(TMP, "none.txt"))
    raises(difftx.ArgumentError, difftx.Tokenizer.train)
    p = os.path.join(TMP, "corpus.txt")
    with open(p, "w") as f:
        f.write(texts[0])
    assert list(difftx.Tokenizer.train(paths=[p], vocab_size=320).encode(text)) == list(tok.encode(text))


@test
def hugging_face_tokenizers_are_the_command_tokenizers():
    """tokenizer.json and tokenizer.model (data/hf-tokenizers, fetched by make
    test) encode as the command and the real encoders' fixtures."""
    d = os.path.join(ROOT, "data", "hf-tokenizers")
    if not os.path.isdir(d):
        raise Skip("data/hf-tokenizers is missing (scripts/fetch_hf_tokenizers.sh)")
    with open(os.path.join(ROOT, "tests", "fixtures", "tokenizer", "hf_cases.json"), encoding="utf-8") as f:
        cases = {c["name"]: c for c in json.load(f)["cases"]}
    c = cases["qwen chat"]
    text = base64.b64decode(c["bytes_b64"])
    for name in ("gpt2", "llama3-style", "qwen2-style"):
        tok = difftx.Tokenizer.load(os.path.join(d, name))
        got = tok.encode(text, special=True)
        assert list(got) == c["ids"][name]["special"], name
        want = list(map(int, run("tokenizer", "encode", "--tokenizer", os.path.join(d, name), "--text", text.decode(),
                                 "--special").stdout.split()))
        assert list(got) == want, name
        assert tok.decode_bytes(got) == text
    llama3 = difftx.Tokenizer.load(os.path.join(d, "llama3-style"))
    assert llama3.bos == llama3.token_id("<|begin_of_text|>") and llama3.eos == llama3.token_id("<|eot_id|>")
    spm = difftx.Tokenizer.load(os.path.join(d, "llama2", "tokenizer.model"))
    assert (spm.vocab_size, spm.bos, spm.eos) == (32000, 1, 2)
    assert list(spm.encode("Hello world")) == [15043, 3186]
    raises(difftx.ArgumentError, spm.save, os.path.join(TMP, "spm.tok"))


@test
def quantize_runs_the_library():
    mp = os.path.join(ROOT, "tests", "fixtures", "diff_mha_untied.model.safetensors")
    m = difftx.Model.load(mp)
    exp, _ = read_safetensors(mp.replace(".model.", ".expect."))
    ids = exp["tokens"][0].astype(np.int64)
    before = m.score(ids)
    calib = np.stack([(np.arange(12) * k + 1) % m.config.vocab_size for k in range(1, 9)])
    s = m.quantize("w8a8", calib)
    assert s["rows"] == calib.size and m.quantization == "w8a8"
    after = m.score(ids)
    assert abs(after - before) < 0.05 * before, (before, after)
    raises(difftx.ArgumentError, m.state_dict, contains="quantised")
    raises(difftx.ArgumentError, m.quantize, "w8a8", calib)  # already quantised
    p = os.path.join(TMP, "q.safetensors")
    m.save(p)
    q = difftx.Model.load(p)
    assert q.quantization == "w8a8" and q.score(ids) == after


# ---------------------------------------------------------------- training

TRAIN = dict(dim=32, layers=2, heads=2, vocab=61, ffn=64, seq=12)


def cli_train(out, steps, tokens, extra=()):
    run("train", "--tokens", tokens, "--out", out, "--dim", 32, "--layers", 2, "--heads", 2, "--vocab", 61,
        "--ffn", 64, "--max-seq", 16, "--seq", 12, "--batch", 2, "--steps", steps, "--seed", 3, "--lr", "3e-3",
        "--warmup", 2, *extra)


def py_train(tokens, steps, **kw):
    return difftx.train(tokens, steps, config=small_config(), batch=2, seq=12, seed=3, lr=3e-3, warmup_steps=2, **kw)


@test
def train_is_the_command_train():
    tp, ids = token_file("train.txt")
    out = os.path.join(TMP, "cli.safetensors")
    cli_train(out, 5, tp)
    want = difftx.Model.load(out).state_dict()
    seen = []
    got = py_train(ids, 5, callback=seen.append)  # an array: written as a shard
    sd = got.state_dict()
    assert all(np.array_equal(sd[k], want[k]) for k in want), "weights differ from difftx train's"
    assert [s.step for s in seen] == [1, 2, 3, 4, 5] and all(np.isfinite(s.loss) for s in seen)
    assert seen[0].lr < seen[1].lr and seen[-1].steps == 5
    # a path gives the same
    assert np.array_equal(py_train(tp, 5).state_dict()["norm.weight"], sd["norm.weight"])


@test
def train_checkpoints_resume_exactly():
    tp, ids = token_file("train.txt")
    full = py_train(tp, 6).state_dict()
    ck = os.path.join(TMP, "run.ckpt.safetensors")
    stop = py_train(tp, 6, checkpoint=ck, callback=lambda s: s.step < 3)  # stops after step 3
    assert os.path.exists(ck)
    del stop
    resumed = py_train(tp, 6, checkpoint=ck).state_dict()
    assert all(np.array_equal(resumed[k], full[k]) for k in full), "resume is not exact"
    # difftx train --resume continues the package's checkpoint
    py_train(tp, 6, checkpoint=os.path.join(TMP, "r2.safetensors"), callback=lambda s: s.step < 3)
    out = os.path.join(TMP, "cont.safetensors")
    os.makedirs(out + ".ckpt", exist_ok=True)
    shutil.copy(os.path.join(TMP, "r2.safetensors"), os.path.join(out + ".ckpt", "ckpt_00000003.safetensors"))
    cli_train(out, 6, tp, extra=["--resume"])
    cont = difftx.Model.load(out).state_dict()
    assert all(np.array_equal(cont[k], full[k]) for k in full), "difftx train --resume differs"
    # and the package continues the command's checkpoint
    out2 = os.path.join(TMP, "cli-stopped.safetensors")
    cli_train(out2, 6, tp, extra=["--ckpt-every", 3, "--stop-after", 3])
    ck3 = os.path.join(out2 + ".ckpt", "ckpt_00000003.safetensors")
    assert os.path.exists(ck3), os.listdir(out2 + ".ckpt")
    cont2 = py_train(tp, 6, checkpoint=ck3).state_dict()
    assert all(np.array_equal(cont2[k], full[k]) for k in full), "resuming difftx train's checkpoint differs"
    # another batch size is refused, naming it
    raises(difftx.UsageError, difftx.train, tp, 6, config=small_config(), batch=4, seq=12, seed=3, lr=3e-3,
           warmup_steps=2, checkpoint=ck, contains="batch")
    # fewer steps than the checkpoint's schedule are refused; more extend the finished run (a warm restart):
    # the same weights as difftx train --resume --steps 10 gives from the same checkpoint
    raises(difftx.UsageError, py_train, tp, 5, checkpoint=ck, contains="total_steps")
    out3 = os.path.join(TMP, "cli-extended.safetensors")
    os.makedirs(out3 + ".ckpt", exist_ok=True)
    shutil.copy(ck, os.path.join(out3 + ".ckpt", "ckpt_00000006.safetensors"))  # the finished run's, at step 6
    seen = []
    ext = py_train(tp, 10, checkpoint=ck, callback=seen.append).state_dict()
    assert [x.step for x in seen] == [7, 8, 9, 10] and seen[0].lr > seen[-1].lr, [(x.step, x.lr) for x in seen]
    cli_train(out3, 10, tp, extra=["--resume"])
    cli_ext = difftx.Model.load(out3).state_dict()
    assert all(np.array_equal(cli_ext[k], ext[k]) for k in ext), "the package's extension differs from the command's"


def _log_lines(path, timing=("tokens_per_s", "elapsed_s")):
    with open(path) as f:
        lines = [json.loads(x) for x in f]
    return [{k: v for k, v in x.items() if k not in timing} for x in lines]


@test
def train_writes_the_command_run_folder():
    """train(out=...) writes difftx train's run folder: the same model file, checkpoint files (byte for byte) and
    log lines (timings aside); each resumes the other's folder, and a held folder is refused."""
    tp, _ = token_file("train.txt")
    a, b = os.path.join(TMP, "fa"), os.path.join(TMP, "fb")
    os.makedirs(a), os.makedirs(b)
    vp, _ = token_file("val.txt", n=400)
    cli_train(os.path.join(a, "m.safetensors"), 6, tp, extra=["--ckpt-every", 2, "--keep", 2, "--log",
                                                              os.path.join(a, "log.jsonl"), "--val-tokens", vp,
                                                              "--eval-every", 3, "--eval-batches", 2])
    py_train(tp, 6, out=os.path.join(b, "m.safetensors"), checkpoint_every=2, keep=2, log=os.path.join(b, "log.jsonl"),
             val_tokens=vp, eval_every=3, eval_batches=2)
    for f in ("m.safetensors", "m.safetensors.ckpt/ckpt_00000004.safetensors",
              "m.safetensors.ckpt/ckpt_00000006.safetensors"):
        with open(os.path.join(a, f), "rb") as x, open(os.path.join(b, f), "rb") as y:
            assert x.read() == y.read(), f
    assert sorted(os.listdir(os.path.join(b, "m.safetensors.ckpt"))) == sorted(
        os.listdir(os.path.join(a, "m.safetensors.ckpt"))) and not os.path.exists(os.path.join(b, "m.safetensors.lock"))
    la, lb = _log_lines(os.path.join(a, "log.jsonl")), _log_lines(os.path.join(b, "log.jsonl"))
    assert [x.get("checkpoint", "").replace(a, b) for x in la] == [x.get("checkpoint", "") for x in lb]
    strip = [{k: v for k, v in x.items() if k != "checkpoint"} for x in la]
    assert strip == [{k: v for k, v in x.items() if k != "checkpoint"} for x in lb], (la, lb)
    assert sum("val_loss" in x for x in lb) == 2 and lb[0] == {k: la[0][k] for k in la[0]}
    full = difftx.Model.load(os.path.join(a, "m.safetensors")).state_dict()
    # the package stops (its callback) at step 3: difftx train --resume ends it
    c = os.path.join(TMP, "fc", "m.safetensors")
    os.makedirs(os.path.dirname(c))
    py_train(tp, 6, out=c, checkpoint_every=2, log=c + ".log", callback=lambda s: s.step < 3)
    assert sorted(os.listdir(c + ".ckpt")) == ["ckpt_00000002.safetensors", "ckpt_00000003.safetensors"]
    assert not os.path.exists(c)
    cli_train(c, 6, tp, extra=["--resume", "--ckpt-every", 2, "--log", c + ".log"])
    got = difftx.Model.load(c).state_dict()
    assert all(np.array_equal(got[k], full[k]) for k in full), "difftx train --resume of the package's folder differs"
    lc = _log_lines(c + ".log")
    assert [x["step"] for x in lc if "loss" in x] == [1, 2, 3, 4, 5, 6] and lc[5] == {
        "step": 3, "resumed_from": c + ".ckpt/ckpt_00000003.safetensors"}, lc
    # the command stops at step 4 (--stop-after): the package resumes it
    d = os.path.join(TMP, "fd", "m.safetensors")
    os.makedirs(os.path.dirname(d))
    cli_train(d, 6, tp, extra=["--ckpt-every", 2, "--stop-after", 4])
    raises(difftx.FileError, py_train, tp, 6, out=d, contains="already holds checkpoints")
    got = py_train(tp, 6, out=d, resume=True).state_dict()
    assert all(np.array_equal(got[k], full[k]) for k in full), "the package's resume of the command's folder differs"
    assert np.array_equal(difftx.Model.load(d).state_dict()["norm.weight"], full["norm.weight"])
    # a run holds OUT.lock: the command is refused on a folder the package is writing
    held, lib = ctypes.c_void_p(), difftx._lib
    lib.lib.dtx_run_open(ctypes.byref(held), ctypes.byref(lib.RunOptions(out=d.encode(), resume=1)))
    r = run("train", "--tokens", tp, "--out", d, "--resume", "--steps", 8, check=False)
    lib.lib.dtx_run_close(held)
    assert r.returncode == 1 and "another difftx train is writing it" in r.stderr, (r.returncode, r.stderr)
    # a folder given as out, and checkpoint= with out=, are refused before any work
    raises(difftx.UsageError, py_train, tp, 6, out=TMP, contains="a folder")
    raises(difftx.ArgumentError, py_train, tp, 6, out=d, checkpoint=c, contains="not both")


@test
def train_mixes_and_resumes_as_the_command():
    """mix= and precision= are difftx train's --copy-frac and --precision: the package resumes the command's
    mixed bf16 run into the command's uninterrupted weights; another mixture is refused naming the setting."""
    tp, _ = token_file("train.txt")
    extra = ["--copy-frac", "0.5", "--precision", "bf16"]
    full = os.path.join(TMP, "mix_full.safetensors")
    cli_train(full, 4, tp, extra=extra)
    want = difftx.Model.load(full).state_dict()
    d = os.path.join(TMP, "mix_stop.safetensors")
    cli_train(d, 4, tp, extra=extra + ["--ckpt-every", 2, "--stop-after", 2])
    raises(difftx.UsageError, py_train, tp, 4, out=d, resume=True, mix={"copy_frac": 0.25}, precision="bf16",
           contains="needles is")
    raises(difftx.UsageError, py_train, tp, 4, out=d, resume=True, mix={"copy_frac": 0.5}, contains="precision is")
    got = py_train(tp, 4, out=d, resume=True, mix={"copy_frac": 0.5}, precision="bf16").state_dict()
    assert all(np.array_equal(got[k], want[k]) for k in want), "the package's resume of a mixed run differs"
    raises(TypeError, py_train, tp, 4, mix={"copy": 0.5}, contains="unknown mixture setting")
    raises(difftx.UsageError, py_train, tp, 4, mix={"needle_frac": 0.5}, contains="needs a tokenizer")


@test
def hugging_face_folders_load_and_export():
    """Model.load reads a Hugging Face folder (the logits of tools/hf_reference.py's fixture); to_hf writes one
    that loads back to the same weights; a folder HF cannot describe is refused naming why."""
    d = os.path.join(ROOT, "tests", "fixtures", "hf", "llama_gqa_untied")
    m = difftx.Model.load(d)
    tok, _ = read_safetensors(os.path.join(d, "expect.safetensors"))
    want = tok["logits"]
    got = np.stack([m.logits([int(x) for x in row]) for row in tok["tokens"]])
    assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want)), np.max(np.abs(got - want))
    out = os.path.join(TMP, "to_hf")
    m.to_hf(out, shard_mb=0)
    back = difftx.Model.load(out).state_dict()
    assert all(np.array_equal(back[k], v) for k, v in m.state_dict().items())
    v2 = difftx.Model.init(difftx.Config(arch="diff2", dim=32, n_layers=1, n_heads=2, vocab_size=61, ffn_dim=48,
                                         max_seq_len=16))
    raises(difftx.ConfigError, v2.to_hf, os.path.join(TMP, "v2_hf"), contains="DIFF V2")
    # the Llama as a DIFF model: the same logits, the head count and width kept
    dm = m.to_diff(seed=3)
    assert dm.config.arch == "diff" and dm.config.n_heads == m.config.n_heads and dm.config.head_dim == 8
    got2 = np.stack([dm.logits([int(x) for x in row]) for row in tok["tokens"]])
    assert np.max(np.abs(got2 - got)) <= 1e-5 * np.max(np.abs(got)), np.max(np.abs(got2 - got))
    raises(difftx.ConfigError, dm.to_diff, contains="only a Transformer")


@test
def train_validates_and_refuses():
    tp, ids = token_file("train.txt")
    vp, _ = token_file("val.txt", n=400)
    vals = []
    m = py_train(tp, 4, val_tokens=vp, eval_every=2, callback=lambda s: vals.append(s.val_loss))
    assert vals[0] is None and vals[2] is None and np.isfinite(vals[1]) and np.isfinite(vals[3]), vals
    # continuing from given weights: the model object is handed over
    m2 = difftx.train(tp, 2, model=m, batch=2, seq=12, seed=3)
    raises(difftx.ArgumentError, m.logits, [1, 2], contains="closed")
    assert m2.config == small_config()
    # NaN weights: a numeric error
    sd = difftx.Model.init(small_config()).state_dict()
    sd["norm.weight"][:] = np.nan
    bad = difftx.Model.from_state_dict(small_config(), sd)
    raises(difftx.NumericError, difftx.train, tp, 2, model=bad, batch=2, seq=12, contains="not finite")
    raises(difftx.ArgumentError, py_train, ids[:5], 2, contains="holds 5 tokens")
    raises(difftx.ArgumentError, py_train, [70, 1, 2] * 50, 2)  # id past the vocab
    raises(difftx.ArgumentError, py_train, tp, 2, eval_every=2, contains="val_tokens")
    raises(difftx.FileError, py_train, os.path.join(TMP, "missing.txt"), 2)
    raises(difftx.ConfigError, difftx.train, tp, 2, config=small_config(dim=33), batch=2, seq=12)
    raises(TypeError, py_train, tp, 2, learning_rate=1)


# ---------------------------------------------------------------- errors and memory

@test
def bad_inputs_raise_the_right_error():
    raises(difftx.FileError, difftx.Model.load, os.path.join(TMP, "missing.safetensors"), contains="missing")
    p = os.path.join(TMP, "garbage.safetensors")
    with open(p, "wb") as f:
        f.write(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    e = raises(difftx.FormatError, difftx.Model.load, p)
    assert e.status == 2 and "garbage.safetensors" in e.message
    m = difftx.Model.init(small_config())
    raises(difftx.ArgumentError, m.logits, [1, 61], contains="61")
    raises(difftx.ArgumentError, m.logits, [1.5, 2], contains="integers")
    raises(difftx.ArgumentError, m.logits, [-1, 2])
    raises(difftx.ArgumentError, m.logits, [2 ** 40])
    raises(difftx.ArgumentError, m.logits, list(range(17)))  # past max_seq_len
    raises(difftx.ArgumentError, m.score, [5], contains="2 to max_seq_len")
    raises(difftx.ArgumentError, setattr, m, "precision", "fp8")
    raises(difftx.FileError, m.save, os.path.join(TMP, "no", "such", "dir.safetensors"))
    m.close()
    raises(difftx.ArgumentError, m.logits, [1], contains="closed")
    assert issubclass(difftx.FileError, OSError) and issubclass(difftx.ArgumentError, ValueError)


@test
def the_example_runs():
    out = os.path.join(TMP, "example")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "python", "examples", "quickstart.py"), "--steps", "4",
                        "--out", out], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "held-out tokens" in r.stdout and os.path.exists(os.path.join(out, "diff.safetensors")), r.stdout


def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


@test
def no_leak_over_1000_loads():
    if os.environ.get("DIFFTX_SAN"):
        raise Skip("under ASan freed memory waits in its quarantine, so resident memory grows without a leak "
                   "(the plain build's run measures it)")
    p = os.path.join(TMP, "leak.safetensors")
    difftx.Model.init(small_config(dim=64, vocab_size=500)).save(p)  # 0.4 MB
    tok = difftx.Tokenizer.train(["a leak would show over a thousand rounds " * 10], vocab_size=300)
    ids = np.arange(8)

    def once():  # a load and every call that allocates in the library
        m = difftx.Model.load(p)
        m.logits(ids)
        m.attention_map(ids, 1, 0)
        list(m.generate(ids, 3, seed=2))
        tok.decode(tok.encode("a leak would show"))
        del m
        raises(difftx.FormatError, difftx.Model.load, os.path.join(TMP, "garbage.safetensors"))
    with open(os.path.join(TMP, "garbage.safetensors"), "wb") as f:
        f.write(b"\x08\x00\x00\x00\x00\x00\x00\x00{\"a\": 1")
    for _ in range(100):  # warm up the allocator
        once()
    before = rss_kib()
    for _ in range(1000):
        once()
    grown = rss_kib() - before
    print("     rss %d KiB before, %+d KiB after 1000 rounds of load, logits, map, generate, encode, a refusal"
          % (before, grown))
    assert grown < 2048, "RSS grew by %d KiB over 1000 loads" % grown


def main():
    only = sys.argv[1:]
    passed = failed = skipped = 0
    for f in TESTS:
        if only and not any(o in f.__name__ for o in only):
            continue
        try:
            f()
            print("ok   python_%s" % f.__name__)
            passed += 1
        except Skip as e:
            print("skip python_%s: %s" % (f.__name__, e))
            skipped += 1
        except Exception:  # noqa: BLE001
            print("FAIL python_%s:\n%s" % (f.__name__, traceback.format_exc()))
            failed += 1
    shutil.rmtree(TMP, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed) + (", %d skipped" % skipped if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
