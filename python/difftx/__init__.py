"""difftx from Python: the Differential Transformer library (libdifftx) with
numpy arrays. A thin layer over include/difftx.h through ctypes: every number
comes from the C library that difftx's tests check (README "Python").

    import difftx
    m = difftx.Model.load("runs/demo/diff.safetensors")
    tok = difftx.Tokenizer.load("runs/demo/tokenizer.txt")
    ids = tok.encode("The Differential Transformer")
    m.logits(ids)                 # np.float32 [T, vocab]
    m.score(ids)                  # mean next-token cross-entropy (nats)
    m.attention_map(ids, 0, 0)    # np.float64 [T, T], A1 - lambda A2
    tok.decode(list(m.generate(ids, 20, temperature=0.8, seed=1)))

Errors raise a subclass of difftx.Error, one per dtx_status, carrying the
library's one-line message."""
import ctypes
import json
import os
import tempfile
import time

import numpy as np

from . import _lib
from ._lib import (ArgumentError, ConfigError, Error, FileError, FormatError, NumericError,  # noqa: F401
                   OutOfMemoryError, StoppedError, UsageError)

__all__ = ["Config", "Model", "Tokenizer", "train", "StepInfo", "version", "system", "Error", "FileError", "FormatError",
           "ConfigError", "ArgumentError", "OutOfMemoryError", "NumericError", "UsageError", "StoppedError", "eval"]

from . import eval  # noqa: E402,F401  (difftx.eval.needle(...), the paper's measurements)

L = _lib.lib
_i32p = ctypes.POINTER(ctypes.c_int32)
_fp = ctypes.POINTER(_lib.F)


def version():
    """The version of the libdifftx that runs ("1.0")."""
    return L.dtx_version().decode()


def _report(ptr, as_json):
    """A report the library wrote (malloc'd text): a dict from its JSON, or the text."""
    if not ptr:
        raise OutOfMemoryError("out of memory building the report")
    try:
        text = ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        _lib.libc.free(ptr)
    return json.loads(text) if as_json else text


def system(as_json=False):
    """What runs the numbers here (`difftx info --system`): ISA levels, DTX_ISA, oneDNN, bf16 native or not."""
    return _report(L.dtx_system_describe(1 if as_json else 0), as_json)


def _choice(what, value, table, error=None):
    """table[value] (a C enum's value), or the error naming the choices."""
    if value not in table:
        raise (error or ArgumentError)("%s: %r is not one of %s" % (what, value, ", ".join(table)))
    return table[value]


def _path(p):
    return os.fsencode(os.fspath(p))


def _ids(ids, name="ids", ndim=(1,)):
    """ids as a C-contiguous int32 array, refusing what would change value."""
    a = np.asarray(ids)
    if a.size == 0:
        a = a.astype(np.int32)
    if a.dtype.kind not in "iu":
        raise ArgumentError("%s: token ids must be integers, not %s" % (name, a.dtype))
    if a.ndim not in ndim:
        raise ArgumentError("%s: expected %s dimension%s, got shape %s" % (
            name, " or ".join(map(str, ndim)), "" if ndim == (1,) else "s", a.shape))
    if a.size and (a.min() < 0 or a.max() > 2**31 - 1):
        bad = a.min() if a.min() < 0 else a.max()
        raise ArgumentError("%s: token id %d is not a non-negative 32-bit id" % (name, bad))
    return np.ascontiguousarray(a, dtype=np.int32)


# ---------------------------------------------------------------- config

_SUBLN = {0: None, 1: "rms", 2: "none"}
_V2 = {0: "sigmoid", 1: "linear", 2: "none"}


class Config:
    """A model configuration (dtx_config): difftx's defaults (a small DIFF
    model) with keyword overrides, e.g. Config(arch="transformer", dim=128).
    Fields: arch ("diff", "transformer", "diff2"), dim, n_layers, n_heads,
    n_kv_heads (None: n_heads), vocab_size, ffn_dim, max_seq_len, rope_theta,
    norm_eps, tie_embeddings, subln (None: the arch's own, "rms", "none"),
    lambda_init ("schedule" or a number in [0, 1)), v2_lambda ("sigmoid",
    "linear", "none"; diff2), rope_scaling ("none", or "llama3 FACTOR LOW HIGH
    ORIG": Llama 3.1's RoPE scaling, docs/huggingface.md), head_dim (None:
    the arch's own, dim / heads), transformer_mix (diff: what remains of a
    converted Transformer's form, 0 to 1; 0 by default)."""
    FIELDS = ("arch", "dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "ffn_dim", "max_seq_len",
              "rope_theta", "norm_eps", "tie_embeddings", "subln", "lambda_init", "v2_lambda", "rope_scaling",
              "head_dim", "transformer_mix")

    def __init__(self, **kw):
        self.__dict__.update(Config._from_c(L.dtx_config_default()).__dict__)
        self.n_kv_heads = None  # n_heads unless given
        for k, v in kw.items():
            if k not in self.FIELDS:
                raise TypeError("Config: unknown field %r (fields: %s)" % (k, ", ".join(self.FIELDS)))
            setattr(self, k, v)

    @staticmethod
    def _from_c(c):
        self = Config.__new__(Config)
        self.arch = L.dtx_arch_name(c.arch).decode()
        for k in ("dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "ffn_dim", "max_seq_len"):
            setattr(self, k, int(getattr(c, k)))
        self.rope_theta, self.norm_eps = float(c.rope_theta), float(c.norm_eps)
        self.tie_embeddings = bool(c.tie_embeddings)
        self.subln = _SUBLN.get(c.subln)
        self.lambda_init = float(c.lambda_init_value) if c.lambda_init_fixed else "schedule"
        self.v2_lambda = _V2.get(c.v2_lambda)
        buf = ctypes.create_string_buffer(128)
        L.dtx_config_rope_scaling_str(ctypes.byref(c), buf, 128)
        self.rope_scaling = buf.value.decode()
        self.head_dim = int(c.head_dim) or None
        self.transformer_mix = float(c.transformer_mix)
        return self

    def _to_c(self):
        c = L.dtx_config_default()
        c.arch = _choice("arch", self.arch, _lib.ARCH, ConfigError)
        for k in ("dim", "n_layers", "n_heads", "vocab_size", "ffn_dim", "max_seq_len"):
            setattr(c, k, int(getattr(self, k)))
        c.n_kv_heads = int(self.n_heads if self.n_kv_heads is None else self.n_kv_heads)
        c.rope_theta, c.norm_eps = float(self.rope_theta), float(self.norm_eps)
        c.tie_embeddings = 1 if self.tie_embeddings else 0
        c.subln = 0
        if self.subln is not None:
            L.dtx_config_set_subln(ctypes.byref(c), str(self.subln).encode())
        li = self.lambda_init
        L.dtx_config_set_lambda_init(ctypes.byref(c), (li if isinstance(li, str) else repr(float(li))).encode())
        L.dtx_config_set_v2_lambda(ctypes.byref(c), str(self.v2_lambda).encode())
        L.dtx_config_set_rope_scaling(ctypes.byref(c), str(self.rope_scaling).encode())
        c.head_dim = int(self.head_dim or 0)
        c.transformer_mix = float(self.transformer_mix)
        return c

    def validate(self):
        """Raises ConfigError naming the key when the config is invalid."""
        L.dtx_config_validate(ctypes.byref(self._to_c()))
        return self

    def baseline(self):
        """The parameter-matched other architecture (dtx_config_baseline)."""
        return Config._from_c(L.dtx_config_baseline(ctypes.byref(self._to_c())))

    def to_dict(self):
        d = {k: getattr(self, k) for k in self.FIELDS}
        if d["n_kv_heads"] is None:
            d["n_kv_heads"] = d["n_heads"]
        return d

    def __eq__(self, other):
        return isinstance(other, Config) and self.to_dict() == other.to_dict()

    def __repr__(self):
        return "Config(%s)" % ", ".join("%s=%r" % kv for kv in self.to_dict().items())


# ---------------------------------------------------------------- model

class _Owned:
    """An object that owns one library handle, freed by _free at close() or
    when the object goes."""
    _free = None  # the library's free function of the handle

    def __init__(self, handle):
        self._h = handle

    def close(self):
        if getattr(self, "_h", None):
            type(self)._free(self._h)
            self._h = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 (at interpreter exit the module may be gone)
            pass


class Model(_Owned):
    """A model in libdifftx (dtx_model). Make one with Model.load,
    Model.init or Model.from_state_dict; it is freed when the object goes
    (or at close())."""
    _free = L.dtx_model_free

    # -- making and saving
    @classmethod
    def load(cls, path):
        """A safetensors model file (docs/format.md: plain, bf16 or quantised), a training checkpoint (its
        model), or a Hugging Face checkpoint folder (DiffLlamaForCausalLM, LlamaForCausalLM:
        docs/huggingface.md)."""
        h = ctypes.c_void_p()
        L.dtx_model_open(ctypes.byref(h), _path(path), 0)
        return cls(h)

    @classmethod
    def init(cls, config, seed=1, scheme="torch"):
        """Freshly initialised weights of config (seeded; scheme "torch" or "gpt2")."""
        init = _choice("scheme", scheme, _lib.INIT)
        h = ctypes.c_void_p()
        L.dtx_model_init_scheme(ctypes.byref(h), ctypes.byref(config._to_c()), int(seed), init)
        return cls(h)

    @classmethod
    def from_state_dict(cls, config, arrays):
        """A model of config whose tensors are arrays[name] (interop names and
        shapes, as state_dict gives them; every tensor of the config, nothing
        else)."""
        m = cls.init(config, seed=0)
        names = set()
        params = m._params()
        for info in m._infos():
            name = info.name.decode()
            names.add(name)
            if name not in arrays:
                raise ArgumentError("from_state_dict: tensor %s is missing" % name)
            a = np.asarray(arrays[name])
            shape = tuple(info.shape[:info.ndim])
            if a.shape != shape:
                raise ArgumentError("from_state_dict: %s has shape %s; the config needs %s" % (name, a.shape, shape))
            if a.dtype.kind != "f":
                raise ArgumentError("from_state_dict: %s holds %s, not floating-point values" % (name, a.dtype))
            params[info.offset:info.offset + info.numel] = a.reshape(-1)
        extra = sorted(set(arrays) - names)
        if extra:
            raise ArgumentError("from_state_dict: %s is not a tensor of this config" % extra[0])
        return m

    def save(self, path, bf16=False):
        """Writes a safetensors model file, atomically (bf16: BF16 tensors)."""
        L.dtx_model_save(self._handle(), _path(path), 1 if bf16 else 0)

    def to_diff(self, seed=1):
        """This Transformer as a DIFF model of the same logits (difftx convert --to-diff; docs/huggingface.md
        "A Llama into DIFF"): a new Model, to continue with train(model=...)."""
        h = ctypes.c_void_p()
        L.dtx_model_to_diff(ctypes.byref(h), self._handle(), int(seed))
        return Model(h)

    def to_hf(self, folder, bf16=False, shard_mb=5000):
        """Writes the model as a Hugging Face checkpoint folder (difftx convert --to hf): config.json and the
        tensors, in shards of at most shard_mb MB with an index (0: one file), BF16 or F32."""
        L.dtx_hf_export(self._handle(), _path(folder), 1 if bf16 else 0, int(shard_mb) * 1000000)

    def close(self):
        if getattr(self, "_h", None):
            L.dtx_model_free(self._h)
            self._h = None

    def __del__(self):
        self.close()

    def _handle(self):
        if not self._h:
            raise ArgumentError("the model was closed (or handed to a trainer)")
        return self._h

    # -- what it is
    @property
    def config(self):
        return Config._from_c(L.dtx_model_config(self._handle()).contents)

    def num_params(self, embeddings=True):
        """Parameters (without tok_embeddings and output when embeddings=False)."""
        h = self._handle()
        return int(L.dtx_model_num_params(h) if embeddings else L.dtx_model_num_params_nonembed(h))

    @property
    def precision(self):
        """"fp32" or "bf16" (bf16 operands in the matrix products); settable."""
        return "bf16" if L.dtx_model_precision(self._handle()) == 1 else "fp32"

    @precision.setter
    def precision(self, p):
        if p not in _lib.PRECISION:
            raise ArgumentError("precision: %r is not fp32 or bf16" % (p,))
        L.dtx_model_set_precision(self._handle(), _lib.PRECISION[p])

    @property
    def quantization(self):
        """None, or the weight scheme ("w8a16", "w8a8", "w4a16")."""
        q = L.dtx_model_wquant(self._handle())
        return L.dtx_wquant_name(q).decode() if q else None

    def meta(self, key):
        """A metadata value that difftx itself does not read (None when absent)."""
        v = L.dtx_model_meta(self._handle(), key.encode())
        return v.decode() if v is not None else None

    def describe(self, as_json=False, tensors=False, path=""):
        """`difftx info`'s report: config, λ per layer, parameter counts, the matched baseline and the
        difference (a dict with as_json, else the text); path names the file in it."""
        return _report(L.dtx_model_describe(self._handle(), os.fsencode(path), -1, int(bool(tensors)),
                                            int(bool(as_json))), as_json)

    def lambda_(self, layer):
        """λ of a DIFF layer (from its four vectors)."""
        return float(L.dtx_model_lambda(self._handle(), int(layer)))

    def _infos(self):
        h = self._handle()
        return [L.dtx_model_tensor(h, i).contents for i in range(L.dtx_model_num_tensors(h))]

    def _params(self):
        n = L.dtx_model_num_params(self._handle())
        return np.ctypeslib.as_array(L.dtx_model_params(self._h), shape=(n,))

    def state_dict(self):
        """{interop name: np.float32 array (a copy)}, in the model's order."""
        if self.quantization:
            raise ArgumentError("state_dict: the model's weights are quantised (%s) and hold no fp32 values; "
                                "save() it instead" % self.quantization)
        p = self._params()
        return {i.name.decode(): p[i.offset:i.offset + i.numel].reshape(tuple(i.shape[:i.ndim])).copy()
                for i in self._infos()}

    # -- running it
    def _forward(self, x, targets=None, logits=True):
        x = _ids(x, ndim=(1, 2))
        B, T = (1, x.shape[0]) if x.ndim == 1 else x.shape
        V = self.config.vocab_size
        out = np.empty((B, T, V), dtype=np.float32) if logits else None
        loss = ctypes.c_double(float("nan"))
        tg = None if targets is None else targets.ctypes.data_as(_i32p)
        L.dtx_model_forward(self._handle(), x.ctypes.data_as(_i32p), tg, B, T,
                            out.ctypes.data_as(_fp) if logits else None, ctypes.byref(loss) if tg else None)
        return x, out, loss.value

    def logits(self, ids):
        """Logits of every position: ids [T] -> np.float32 [T, vocab];
        [B, T] -> [B, T, vocab]."""
        x, out, _ = self._forward(ids)
        return out[0] if x.ndim == 1 else out

    def score(self, ids):
        """The mean next-token cross-entropy (nats) of one sequence of 2 to
        max_seq_len tokens, the first context only: `difftx score`'s loss."""
        x = _ids(ids)
        n, maxlen = x.shape[0], self.config.max_seq_len
        if n < 2 or n > maxlen:
            raise ArgumentError("score: %d tokens; a scored sequence has 2 to max_seq_len = %d tokens" % (n, maxlen))
        _, _, loss = self._forward(x[:-1], targets=np.ascontiguousarray(x[1:]), logits=False)
        if not np.isfinite(loss):
            raise NumericError("score: the loss is not finite (%g)" % loss)
        return loss

    def attention_map(self, ids, layer, head, which="combined"):
        """The attention weights of one head over ids: np.float64 [T, T], row
        t over keys 0..t (zeros above the diagonal). which: "combined"
        (A1 − λ·A2 for DIFF and DIFF V2; the map for a Transformer), "first"
        or "second" (DIFF's two softmax maps)."""
        kind = _choice("which", which, _lib.MAPS)
        x, _, _ = self._forward(ids, logits=False)
        if x.ndim != 1:
            raise ArgumentError("attention_map: one sequence of ids, not a batch")
        T = x.shape[0]
        out = np.empty((T, T), dtype=np.float64)
        L.dtx_model_attention_map(self._h, 0, int(layer), int(head), kind,
                                  out.ctypes.data_as(ctypes.POINTER(ctypes.c_double)))
        return out

    def generate(self, ids, max_tokens, temperature=0.8, top_k=0, top_p=1.0, seed=1, eos=None, kv_cache="auto"):
        """Continues ids with up to max_tokens sampled ids, yielded one by
        one (a KV cache; prefill, then one decode step per id). temperature
        <= 0: greedy. Stops early at max_seq_len, or when the id eos is drawn
        (not yielded). The same arguments give the ids of `difftx sample`
        (top_k 0, top_p 1) and of dtx_sample with kv_cache "fp32".
        kv_cache "bf16" keeps the cache's keys and values in bf16 (half the
        memory, rounded: docs/generate.md); "auto" (the default, as the
        commands) is bf16 for bf16 or quantised weights, fp32 for fp32 ones."""
        prompt = _ids(ids)
        kv = _choice("kv_cache", kv_cache, _lib.KV_CACHE)
        if kv < 0:
            kv = L.dtx_kv_type_for(self._handle())
        s = _lib.Sampler(float(temperature), int(top_k), float(top_p), int(seed))
        L.dtx_sampler_validate(ctypes.byref(s))
        return _Generation(self, prompt, int(max_tokens), s, eos, kv)

    def quantize(self, scheme, calib, act_method="absmax", percentile=99.99, clip_search=True, act_fp16=False):
        """Quantises the weights in place (docs/quantize.md) from calibration
        sequences calib [n_seq, len]; returns the summary as a dict."""
        wq, method = _choice("scheme", scheme, _lib.WQUANT), _choice("act_method", act_method, _lib.CALIB)
        c = _ids(calib, "calib", ndim=(2,))
        o = L.dtx_quant_options_default(wq)
        o.act_method, o.percentile = method, float(percentile)
        o.clip_search, o.act_fp16 = int(bool(clip_search)), int(bool(act_fp16))
        s = _lib.QuantSummary()
        L.dtx_model_quantize(self._handle(), ctypes.byref(o), c.ctypes.data_as(_i32p), c.shape[0], c.shape[1],
                             ctypes.byref(s))
        return {"rows": s.rows, "mean_clip": s.mean_clip, "act_clip": s.act_clip}


class _Generation:
    """The iterator of Model.generate: owns its KV cache."""

    def __init__(self, model, prompt, max_tokens, sampler, eos, kv=0):
        self.model, self.s, self.eos, self.left = model, sampler, eos, max_tokens
        c = model.config
        n = prompt.shape[0]
        if n < 1:
            raise ArgumentError("generate: the prompt is empty")
        if n > c.max_seq_len:
            raise ArgumentError("generate: the prompt's %d tokens exceed max_seq_len %d" % (n, c.max_seq_len))
        if n == c.max_seq_len:  # prompt and continuation stay within max_seq_len
            self.left = 0
        self.V = c.vocab_size
        self.logits = np.empty(self.V, dtype=np.float32)
        self.cache = ctypes.c_void_p()
        end = min(n + max(max_tokens, 1), c.max_seq_len)
        L.dtx_kvcache_init_type(ctypes.byref(self.cache), model._handle(), max(end - 1, n), kv)
        self.rng = _lib.Rng()
        L.dtx_rng_seed(ctypes.byref(self.rng), sampler.seed)
        L.dtx_model_prefill(model._h, self.cache, prompt.ctypes.data_as(_i32p), n, self.logits.ctypes.data_as(_fp))
        self.pending = False  # the last yielded id still to be decoded

    def __iter__(self):
        return self

    def __next__(self):
        if self.left <= 0 or not self.cache:
            self.close()
            raise StopIteration
        lp = self.logits.ctypes.data_as(_fp)
        if self.pending:
            if L.dtx_kvcache_len(self.cache) == L.dtx_kvcache_max_len(self.cache):
                self.close()
                raise StopIteration
            L.dtx_model_decode(self.model._handle(), self.cache, self.last, lp)
        tok = ctypes.c_int32()
        L.dtx_sample_logits(ctypes.byref(self.s), ctypes.byref(self.rng), lp, self.V, ctypes.byref(tok))
        if self.eos is not None and tok.value == self.eos:
            self.close()
            raise StopIteration
        self.last, self.pending = tok.value, True
        self.left -= 1
        return tok.value

    def close(self):
        if getattr(self, "cache", None):
            L.dtx_kvcache_free(self.cache)
            self.cache = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


# ---------------------------------------------------------------- tokenizer

class Tokenizer(_Owned):
    """Byte-level BPE (dtx_tokenizer): difftx's own files or tiktoken rank files."""
    _free = L.dtx_tokenizer_free

    @classmethod
    def load(cls, path):
        h = ctypes.c_void_p()
        L.dtx_tokenizer_load(ctypes.byref(h), _path(path))
        return cls(h)

    @classmethod
    def train(cls, texts=None, paths=None, vocab_size=4096):
        """Trains on texts (str or bytes each) or on files and folders."""
        if (texts is None) == (paths is None):
            raise ArgumentError("Tokenizer.train: give texts or paths (one of them)")
        h = ctypes.c_void_p()
        if paths is not None:
            arr = (ctypes.c_char_p * len(paths))(*[_path(p) for p in paths])
            L.dtx_tokenizer_train(ctypes.byref(h), arr, len(paths), int(vocab_size))
        else:
            bs = [t.encode() if isinstance(t, str) else bytes(t) for t in texts]
            arr = (ctypes.c_char_p * len(bs))(*bs)
            lens = (ctypes.c_size_t * len(bs))(*[len(b) for b in bs])
            L.dtx_tokenizer_train_texts(ctypes.byref(h), arr, lens, len(bs), int(vocab_size))
        return cls(h)

    def save(self, path):
        L.dtx_tokenizer_save(self._h, _path(path))

    def describe(self, as_json=False, path=""):
        """`difftx tokenizer info`'s report (a dict with as_json, else the text)."""
        return _report(L.dtx_tokenizer_describe(self._h, os.fsencode(path), int(bool(as_json))), as_json)

    @property
    def vocab_size(self):
        return int(L.dtx_tokenizer_vocab_size(self._h))

    @property
    def specials(self):
        """{text: id} of the tokens matched whole in text: special tokens, and a
        tokenizer.json's added tokens."""
        out = {}
        for i in range(L.dtx_tokenizer_num_special(self._h)):
            tid = ctypes.c_int32()
            name = L.dtx_tokenizer_special(self._h, i, ctypes.byref(tid))
            out[name.decode("utf-8", "replace")] = tid.value
        return out

    @property
    def bos(self):
        """The id that starts a text (<|bos|>, bos_token, <s>); None when none."""
        i = L.dtx_tokenizer_bos(self._h)
        return None if i < 0 else int(i)

    @property
    def eos(self):
        """The id that ends a text (<|eos|>, <|endoftext|>, eos_token, </s>); None when none."""
        i = L.dtx_tokenizer_eos(self._h)
        return None if i < 0 else int(i)

    def token_id(self, special):
        """The id of a special token ("<|eos|>"); None when there is none."""
        i = L.dtx_tokenizer_token_id(self._h, special.encode())
        return None if i < 0 else int(i)

    def encode(self, text, special=False):
        """text (str, UTF-8, or bytes) -> np.int32 ids. special=True turns the
        text of special tokens into their ids (tiktoken allowed_special="all")."""
        b = text.encode() if isinstance(text, str) else bytes(text)
        p, n = _i32p(), ctypes.c_int64()
        L.dtx_tokenizer_encode(self._h, b, len(b), 1 if special else 0, ctypes.byref(p), ctypes.byref(n))
        try:
            return np.ctypeslib.as_array(p, shape=(n.value,)).copy() if n.value else np.zeros(0, np.int32)
        finally:
            _lib.libc.free(p)

    def decode_bytes(self, ids):
        """The tokens' bytes, exactly."""
        x = _ids(ids)
        p, n = ctypes.c_void_p(), ctypes.c_size_t()
        L.dtx_tokenizer_decode(self._h, x.ctypes.data_as(_i32p), x.shape[0], ctypes.byref(p), ctypes.byref(n))
        try:
            return ctypes.string_at(p, n.value)
        finally:
            _lib.libc.free(p)

    def decode(self, ids, errors="replace"):
        """The tokens' text (UTF-8; bytes that are not UTF-8 by `errors`)."""
        return self.decode_bytes(ids).decode("utf-8", errors)


# ---------------------------------------------------------------- training

class StepInfo:
    """What train's callback receives after each step."""
    __slots__ = ("step", "steps", "loss", "grad_norm", "lr", "val_loss", "seconds")

    def __init__(self, **kw):
        for k in self.__slots__:
            setattr(self, k, kw.get(k))

    def __repr__(self):
        return "StepInfo(%s)" % ", ".join("%s=%r" % (k, getattr(self, k)) for k in self.__slots__)


def _token_file(tokens, vocab, tmp, name):
    """A path for tokens: a path as is; an array written as a token shard."""
    if tokens is None or isinstance(tokens, (str, bytes, os.PathLike)):
        return tokens
    x = _ids(tokens, name)
    p = os.path.join(tmp, name + ".bin")
    L.dtx_shard_write(_path(p), x.ctypes.data_as(_i32p), x.shape[0], int(vocab))
    return p


def train(tokens, steps, config=None, model=None, val_tokens=None, batch=8, seq=None, accum=1, seed=1,
          init_scheme="torch", eval_every=0, eval_batches=10, checkpoint=None, checkpoint_every=0, callback=None,
          out=None, ckpt_dir=None, keep=3, log=None, resume=False, bf16=False, precision="fp32", mix=None,
          diff_warmup=0, **optim):
    """Trains a model with libdifftx's trainer (the loop of `difftx train`)
    and returns it.

    tokens / val_tokens: a token shard or token text file path, or an array
    of ids. config: a new model's Config (default Config()); model: a Model
    to continue from instead (handed to the trainer: this object is closed).
    seq: tokens per row (default: max_seq_len). optim: AdamW settings
    (lr, min_lr, warmup_steps, schedule "cosine"|"linear"|"constant", beta1,
    beta2, eps, weight_decay, decay_embeddings, clip_norm); as in difftx
    train, an lr without min_lr keeps the default floor's ratio to the peak.
    eval_every > 0 (with val_tokens): the validation loss every that many
    steps and at the end. checkpoint: a path; when it exists the run resumes
    from it (the same settings), and it is written every checkpoint_every
    steps, at the end, and when the loop stops by an exception (Ctrl-C);
    resuming with other settings (optimizer included) is refused, except more
    steps, which extend the run (a warm restart of the schedule at the
    checkpoint's step: docs/training.md "Extending a run").
    callback(StepInfo) after every step; returning False stops early. The same
    arguments give the weights `difftx train` gives (same machine, threads).
    precision: "fp32" or "bf16" (difftx train --precision). mix: synthetic
    rows mixed into the batches (difftx train --needle-frac and the like), a
    dict of needle_frac, copy_frac, icl_frac, halluc_frac, fact_frac,
    recall_frac, needle_max, recall_queries, recall_distractors,
    recall_all_targets, tokenizer (a path) and text (a path: the haystack).
    diff_warmup: difftx train --diff-warmup (a model from Model.to_diff).

    out: the run folder of `difftx train --out OUT` instead of checkpoint=:
    the model saved to OUT at the end, OUT.lock held meanwhile, checkpoints
    OUT.ckpt/ckpt_<step>.safetensors (ckpt_dir=) every checkpoint_every steps
    and at the end (and when an exception stops the loop), the newest `keep`
    kept, the JSON-lines log `log`; resume=True continues the folder's newest
    checkpoint (`difftx train --resume` continues this one's, and this one
    the command's)."""
    if model is not None and config is not None:
        raise ArgumentError("train: give config (a new model) or model (weights to continue), not both")
    if out is not None and checkpoint is not None:
        raise ArgumentError("train: give out (a run folder) or checkpoint (one file), not both")
    if out is None and (ckpt_dir is not None or log is not None or resume or bf16):
        raise ArgumentError("train: ckpt_dir, log, resume and bf16 belong to a run folder: give out")
    oc = L.dtx_optim_default()
    d = L.dtx_optim_default()
    for k, v in optim.items():
        if k == "schedule":
            v = _choice("schedule", v, _lib.SCHEDULE)
        elif k not in dict(_lib.OptimConfig._fields_) or k in ("total_steps", "restart_step", "restart_lr"):
            raise TypeError("train: unknown optimizer setting %r" % k)
        setattr(oc, k, v)
    if "lr" in optim and "min_lr" not in optim:
        oc.min_lr = oc.lr * (d.min_lr / d.lr)
    oc.total_steps = int(steps)
    L.dtx_optim_validate(ctypes.byref(oc))
    scheme = _choice("init_scheme", init_scheme, _lib.INIT)
    cfg = model.config if model is not None else (config or Config())
    o = L.dtx_train_options_default()
    o.batch, o.accum, o.eval_batches, o.seed = int(batch), int(accum), int(eval_batches), int(seed)
    o.seq = int(seq) if seq is not None else cfg.max_seq_len
    o.init_scheme = scheme
    o.precision = _choice("precision", precision, _lib.PRECISION)
    o.diff_warmup = int(diff_warmup)
    keep_alive = []  # the mixture's path bytes, borrowed by the options until the trainer has read them
    for k, v in (mix or {}).items():
        if k in ("tokenizer", "text"):
            keep_alive.append(_path(v))
            v = keep_alive[-1]
        elif k not in dict(_lib.TrainMix._fields_):
            raise TypeError("train: unknown mixture setting %r" % k)
        setattr(o.mix, k, v)
    if eval_every and val_tokens is None:
        raise ArgumentError("train: eval_every needs val_tokens")
    t, run = ctypes.c_void_p(), ctypes.c_void_p()
    if out is not None:
        ro = _lib.RunOptions(out=_path(out), ckpt_dir=_path(ckpt_dir) if ckpt_dir is not None else None,
                             keep=int(keep), log=_path(log) if log is not None else None, resume=int(bool(resume)))
        L.dtx_run_open(ctypes.byref(run), ctypes.byref(ro))
        resume_path = L.dtx_run_resume_path(run)
        checkpoint = resume_path.decode() if resume_path else None
    try:
        return _train(t, run, o, oc, cfg, config is not None, model, tokens, val_tokens, int(steps), eval_every,
                      checkpoint, int(checkpoint_every), callback, bool(bf16))
    finally:
        L.dtx_run_close(run)


def _train(t, run, o, oc, cfg, cfg_given, model, tokens, val_tokens, steps, eval_every, checkpoint, checkpoint_every,
           callback, bf16):
    with tempfile.TemporaryDirectory(prefix="difftx-") as tmp:
        tp = _token_file(tokens, cfg.vocab_size, tmp, "tokens")
        vp = _token_file(val_tokens, cfg.vocab_size, tmp, "val_tokens")
        vb = _path(vp) if vp is not None else None
        if checkpoint is not None and os.path.exists(checkpoint):
            if model is not None:
                model.close()
            c = ctypes.byref(cfg._to_c()) if cfg_given else None  # None: the checkpoint's model
            L.dtx_trainer_init_checkpoint(ctypes.byref(t), ctypes.byref(o), _path(tp), vb, _path(checkpoint), c,
                                          ctypes.byref(oc))
        else:
            mh = model._handle() if model is not None else None
            if model is not None:
                model._h = None  # the trainer's from here on, failure included
            L.dtx_trainer_init(ctypes.byref(t), ctypes.byref(o), _path(tp), vb, ctypes.byref(cfg._to_c()), mh,
                               ctypes.byref(oc))
        try:
            evaluate = val_tokens is not None and eval_every
            if run:
                return _run_loop(t, run, steps, o.batch * o.seq * o.accum, evaluate, int(eval_every),
                                 checkpoint_every, callback, bf16)
            return _loop(t, steps, evaluate, int(eval_every), checkpoint, checkpoint_every, callback)
        finally:
            L.dtx_trainer_free(t)


def _step(t, st, val, steps, evaluate, eval_every):
    """One update and, when due, the validation loss: (step, val_loss or None)."""
    L.dtx_trainer_update(t, ctypes.byref(st))
    s = st.step
    v = None
    if evaluate and (s % eval_every == 0 or s == steps):
        L.dtx_trainer_eval(t, ctypes.byref(val))
        v = val.value
    return s, v


def _info(st, steps, v, t0):
    return StepInfo(step=st.step, steps=steps, loss=st.loss, grad_norm=st.grad_norm, lr=st.lr, val_loss=v,
                    seconds=time.monotonic() - t0)


def _run_loop(t, run, steps, tokens_per_step, evaluate, eval_every, checkpoint_every, callback, bf16):
    """difftx train's loop over a run folder: the same log lines, checkpoints and model file."""
    st, val = _lib.TrainStats(), ctypes.c_double()
    t0 = time.monotonic()
    L.dtx_run_start_log(run, t)
    try:
        while L.dtx_trainer_steps_done(t) < steps:
            ts = time.monotonic()
            s, v = _step(t, st, val, steps, False, eval_every)
            now = time.monotonic()
            L.dtx_run_log_step(run, t, tokens_per_step / max(now - ts, 1e-9), now - t0)
            if evaluate and (s % eval_every == 0 or s == steps):
                L.dtx_trainer_eval(t, ctypes.byref(val))
                v = val.value
                L.dtx_run_log_eval(run, s, v, time.monotonic() - t0)
            if checkpoint_every > 0 and (s % checkpoint_every == 0 or s == steps):
                L.dtx_run_checkpoint(run, t)
            if callback is not None and callback(_info(st, steps, v, t0)) is False:
                break
    except BaseException:
        L.dtx_run_checkpoint(run, t)  # nothing lost: `resume=True` (or difftx train --resume) continues here
        raise
    if L.dtx_trainer_steps_done(t) < steps:  # stopped early by the callback
        L.dtx_run_checkpoint(run, t)
    else:
        L.dtx_run_save_model(run, t, int(bf16))
    return Model(L.dtx_trainer_take_model(t))


def _loop(t, steps, evaluate, eval_every, checkpoint, checkpoint_every, callback):
    st = _lib.TrainStats()
    val = ctypes.c_double()
    t0 = time.monotonic()
    saved = L.dtx_trainer_steps_done(t)
    try:
        while L.dtx_trainer_steps_done(t) < steps:
            s, v = _step(t, st, val, steps, evaluate, eval_every)
            if checkpoint and checkpoint_every > 0 and s % checkpoint_every == 0:
                L.dtx_trainer_save(t, _path(checkpoint))
                saved = s
            if callback is not None and callback(_info(st, steps, v, t0)) is False:
                break
    except BaseException:
        if checkpoint and L.dtx_trainer_steps_done(t) > saved:
            L.dtx_trainer_save(t, _path(checkpoint))
        raise
    if checkpoint and L.dtx_trainer_steps_done(t) > saved:
        L.dtx_trainer_save(t, _path(checkpoint))
    return Model(L.dtx_trainer_take_model(t))
