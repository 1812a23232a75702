"""ctypes bindings of include/difftx.h: the structs, the prototypes, and the
errors. Nothing here computes; every number comes from libdifftx.

The shared library is looked for, in order, at $DIFFTX_LIB, beside this file
(where `pip install ./python` copies the one it was built with), and in the
repository's build/ folder (running from a checkout)."""
import ctypes
import os

SO_NAME = "libdifftx.so.1"  # DTX_VERSION_MAJOR 1


def _find():
    env = os.environ.get("DIFFTX_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for p in (os.path.join(here, SO_NAME), os.path.join(here, "..", "..", "build", SO_NAME)):
        if os.path.exists(p):
            return p
    raise ImportError("difftx: %s not found beside the package or in the repository's build/ "
                      "(run `make lib` there, or set DIFFTX_LIB to the library's path)" % SO_NAME)


PATH = _find()
lib = ctypes.CDLL(PATH)

c_int, c_int64, c_uint64, c_uint = ctypes.c_int, ctypes.c_int64, ctypes.c_uint64, ctypes.c_uint
c_double, c_size_t, c_char_p, c_void_p, c_float = ctypes.c_double, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_float
P = ctypes.POINTER


# ---------------------------------------------------------------- errors

class Error(Exception):
    """A failure reported by libdifftx: .status is the dtx_status value,
    .message the library's one-line message (str(error) is the message)."""
    status = None

    def __init__(self, message, status=None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


class FileError(Error, OSError):
    """DTX_ERR_IO: a file could not be opened, read or written."""
    status = 1


class FormatError(Error):
    """DTX_ERR_FORMAT: a file's contents break the format."""
    status = 2


class ConfigError(Error, ValueError):
    """DTX_ERR_CONFIG: a model or training configuration is invalid."""
    status = 3


class ArgumentError(Error, ValueError):
    """DTX_ERR_ARG: a runtime argument is invalid (token id, length, ...)."""
    status = 4


class OutOfMemoryError(Error, MemoryError):
    """DTX_ERR_NOMEM: an allocation failed."""
    status = 5


class NumericError(Error, ArithmeticError):
    """DTX_ERR_NUMERIC: a loss or gradient is not finite."""
    status = 6


class UsageError(Error, ValueError):
    """DTX_ERR_USAGE: an option given to an evaluation or the trainer is invalid (the difftx command's exit 2)."""
    status = 7


class StoppedError(Error):
    """DTX_ERR_STOPPED: a stop flag was raised: the step did not happen."""
    status = 8


ERRORS = {c.status: c for c in (FileError, FormatError, ConfigError, ArgumentError, OutOfMemoryError, NumericError,
                                UsageError, StoppedError)}


def _check(status, func, args):
    if status == 0:
        return status
    msg = lib.dtx_last_error().decode("utf-8", "replace") or lib.dtx_status_name(status).decode()
    cls = ERRORS.get(status, Error)
    raise cls(msg, status)


# ---------------------------------------------------------------- structs (difftx.h)

class Config(ctypes.Structure):
    _fields_ = [("arch", c_int), ("dim", c_int64), ("n_layers", c_int64), ("n_heads", c_int64),
                ("n_kv_heads", c_int64), ("vocab_size", c_int64), ("ffn_dim", c_int64), ("max_seq_len", c_int64),
                ("rope_theta", c_double), ("norm_eps", c_double), ("tie_embeddings", c_int), ("subln", c_int),
                ("lambda_init_fixed", c_int), ("lambda_init_value", c_double), ("v2_lambda", c_int),
                ("rope_factor", c_double), ("rope_low_freq", c_double), ("rope_high_freq", c_double),
                ("rope_orig_max_pos", c_int64), ("head_dim", c_int64), ("transformer_mix", c_double)]


class TensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 64), ("ndim", c_int), ("shape", c_int64 * 2), ("offset", c_size_t),
                ("numel", c_size_t), ("decay", c_int), ("is_embedding", c_int)]


class OptimConfig(ctypes.Structure):
    _fields_ = [("lr", c_double), ("min_lr", c_double), ("warmup_steps", c_int64), ("total_steps", c_int64),
                ("schedule", c_int), ("beta1", c_double), ("beta2", c_double), ("eps", c_double),
                ("weight_decay", c_double), ("decay_embeddings", c_int), ("clip_norm", c_double),
                ("restart_step", c_int64), ("restart_lr", c_double)]


class Rng(ctypes.Structure):
    _fields_ = [("s", c_uint64 * 4)]


class Sampler(ctypes.Structure):
    _fields_ = [("temperature", c_double), ("top_k", c_int64), ("top_p", c_double), ("seed", c_uint64)]


class QuantOptions(ctypes.Structure):
    _fields_ = [("scheme", c_int), ("act_method", c_int), ("percentile", c_double), ("clip_search", c_int),
                ("act_fp16", c_int), ("a16_inputs", c_uint)]


class QuantSummary(ctypes.Structure):
    _fields_ = [("rows", c_int64), ("mean_clip", c_double), ("act_clip", c_double)]


class TrainMix(ctypes.Structure):
    _fields_ = [("needle_frac", c_double), ("copy_frac", c_double), ("icl_frac", c_double), ("halluc_frac", c_double),
                ("fact_frac", c_double), ("recall_frac", c_double), ("needle_max", c_int64), ("recall_queries", c_int64),
                ("recall_distractors", c_int64), ("recall_all_targets", c_int), ("tokenizer", c_char_p),
                ("text", c_char_p)]


class TrainOptions(ctypes.Structure):
    _fields_ = [("batch", c_int64), ("seq", c_int64), ("accum", c_int64), ("eval_batches", c_int64),
                ("seed", c_uint64), ("init_scheme", c_int), ("precision", c_int), ("diff_warmup", c_int64),
                ("mix", TrainMix),
                ("comm", c_void_p), ("zero1", c_int), ("grad_bucket_mb", c_double), ("stop", c_void_p),
                ("debug_nan_at", c_int64), ("debug_oom_at", c_int64)]


class TrainInfo(ctypes.Structure):
    _fields_ = [("data_tokens", c_int64), ("val_tokens", c_int64), ("start_step", c_int64), ("start_loss", c_double),
                ("ckpt_threads", c_int), ("extended_from", c_int64), ("restart_lr", c_double), ("rank", c_int),
                ("ranks", c_int), ("grad_bucket", c_int64), ("last_loss", c_double), ("needle_docs", c_int64),
                ("copy_docs", c_int64), ("icl_rows", c_int64), ("halluc_rows", c_int64), ("fact_rows", c_int64),
                ("recall_rows", c_int64)]


class TrainStats(ctypes.Structure):
    _fields_ = [("step", c_int64), ("loss", c_double), ("grad_norm", c_double), ("lr", c_double)]


class RunOptions(ctypes.Structure):
    _fields_ = [("out", c_char_p), ("ckpt_dir", c_char_p), ("keep", c_int64), ("log", c_char_p), ("resume", c_int),
                ("read_only", c_int)]


# ---------------------------------------------------------------- prototypes

ARCH = {"diff": 0, "transformer": 1, "diff2": 2}
PRECISION = {"fp32": 0, "bf16": 1}
KV_CACHE = {"auto": -1, "fp32": 0, "bf16": 1}  # auto: dtx_kv_type_for
MAPS = {"first": 0, "second": 1, "combined": 2}
WQUANT = {"w8a16": 1, "w8a8": 2, "w4a16": 3}
CALIB = {"absmax": 0, "percentile": 1, "mse": 2}
INIT = {"torch": 0, "gpt2": 1}
SCHEDULE = {"cosine": 0, "linear": 1, "constant": 2}

F = c_float  # dtx_real in the shared library
_H = c_void_p  # an opaque handle (dtx_model *, dtx_tokenizer *, ...)
_S = "status"


def _proto(name, restype, *argtypes):
    f = getattr(lib, name)
    f.argtypes = list(argtypes)
    if restype == _S:
        f.restype = c_int
        f.errcheck = _check
    else:
        f.restype = restype
    return f


_proto("dtx_last_error", c_char_p)
_proto("dtx_status_name", c_char_p, c_int)
_proto("dtx_version", c_char_p)
_proto("dtx_struct_layout", c_char_p)

MIRRORS = {"dtx_config": Config, "dtx_tensor_info": TensorInfo, "dtx_optim_config": OptimConfig, "dtx_rng": Rng,
           "dtx_sampler": Sampler, "dtx_quant_options": QuantOptions, "dtx_quant_summary": QuantSummary,
           "dtx_train_mix": TrainMix, "dtx_train_options": TrainOptions, "dtx_train_info": TrainInfo,
           "dtx_train_stats": TrainStats, "dtx_run_options": RunOptions}


def check_layout(layout_text, mirrors):
    """Refuses mirrors that disagree with the library's own layout (dtx_struct_layout: "name sizeof offsets"):
    a struct read with another layout would give garbage, not an error. Returns the names checked."""
    got = {}
    for line in layout_text.splitlines():
        name, *nums = line.split()
        got[name] = [int(x) for x in nums]
    for name, cls in mirrors.items():
        want = [ctypes.sizeof(cls)] + [getattr(cls, f).offset for f, _ in cls._fields_]
        if got.get(name) != want:
            raise ImportError(f"difftx: {PATH}'s {name} is laid out as (sizeof, offsets) {got.get(name)}, this "
                              f"package's mirror as {want}: the library and the package are of different versions "
                              f"(pip install ./python again after make lib)")
    return sorted(mirrors)


check_layout(lib.dtx_struct_layout().decode(), MIRRORS)
_proto("dtx_format_real", c_char_p, c_double, c_char_p, c_size_t)
_proto("dtx_config_default", Config)
_proto("dtx_config_baseline", Config, P(Config))
_proto("dtx_config_validate", _S, P(Config))
_proto("dtx_config_set_subln", _S, P(Config), c_char_p)
_proto("dtx_config_set_lambda_init", _S, P(Config), c_char_p)
_proto("dtx_config_set_v2_lambda", _S, P(Config), c_char_p)
_proto("dtx_config_set_rope_scaling", _S, P(Config), c_char_p)
_proto("dtx_config_rope_scaling_str", None, P(Config), c_char_p, c_size_t)
_proto("dtx_config_subln_name", c_char_p, P(Config))
_proto("dtx_config_v2_lambda_name", c_char_p, P(Config))
_proto("dtx_arch_name", c_char_p, c_int)
_proto("dtx_model_init_scheme", _S, P(_H), P(Config), c_uint64, c_int)
_proto("dtx_model_load", _S, P(_H), c_char_p)
_proto("dtx_model_open", _S, P(_H), c_char_p, c_int)
_proto("dtx_hf_export", _S, _H, c_char_p, c_int, c_int64)
_proto("dtx_model_to_diff", _S, P(_H), _H, c_uint64)
_proto("dtx_model_save", _S, _H, c_char_p, c_int)
_proto("dtx_model_free", None, _H)
_proto("dtx_model_config", P(Config), _H)
_proto("dtx_model_num_params", c_size_t, _H)
_proto("dtx_model_num_params_nonembed", c_size_t, _H)
_proto("dtx_model_num_tensors", c_int, _H)
_proto("dtx_model_tensor", P(TensorInfo), _H, c_int)
_proto("dtx_model_find", P(TensorInfo), _H, c_char_p)
_proto("dtx_model_params", P(F), _H)
_proto("dtx_model_set_precision", _S, _H, c_int)
_proto("dtx_model_precision", c_int, _H)
_proto("dtx_model_wquant", c_int, _H)
_proto("dtx_wquant_name", c_char_p, c_int)
_proto("dtx_model_forward", _S, _H, P(ctypes.c_int32), P(ctypes.c_int32), c_int64, c_int64, P(F), P(c_double))
_proto("dtx_model_attention_map", _S, _H, c_int64, c_int64, c_int64, c_int, P(c_double))
_proto("dtx_model_lambda", c_double, _H, c_int64)
_proto("dtx_model_meta", c_char_p, _H, c_char_p)
_proto("dtx_model_set_meta", _S, _H, c_char_p, c_char_p)
_proto("dtx_model_quantize", _S, _H, P(QuantOptions), P(ctypes.c_int32), c_int64, c_int64, P(QuantSummary))
_proto("dtx_quant_options_default", QuantOptions, c_int)
_proto("dtx_model_weight_bytes", c_size_t, _H)
_proto("dtx_kvcache_init", _S, P(_H), _H, c_int64)
_proto("dtx_kvcache_init_type", _S, P(_H), _H, c_int64, c_int)
_proto("dtx_kv_type_for", c_int, _H)
_proto("dtx_kvcache_free", None, _H)
_proto("dtx_kvcache_len", c_int64, _H)
_proto("dtx_kvcache_max_len", c_int64, _H)
_proto("dtx_model_prefill", _S, _H, _H, P(ctypes.c_int32), c_int64, P(F))
_proto("dtx_model_decode", _S, _H, _H, ctypes.c_int32, P(F))
_proto("dtx_sampler_validate", _S, P(Sampler))
_proto("dtx_rng_seed", None, P(Rng), c_uint64)
_proto("dtx_sample_logits", _S, P(Sampler), P(Rng), P(F), c_int64, P(ctypes.c_int32))
_proto("dtx_optim_default", OptimConfig)
_proto("dtx_optim_validate", _S, P(OptimConfig))
_proto("dtx_tokenizer_load", _S, P(_H), c_char_p)
_proto("dtx_tokenizer_save", _S, _H, c_char_p)
_proto("dtx_tokenizer_train", _S, P(_H), P(c_char_p), c_int, c_int64)
_proto("dtx_tokenizer_train_texts", _S, P(_H), P(c_char_p), P(c_size_t), c_int, c_int64)
_proto("dtx_tokenizer_free", None, _H)
_proto("dtx_tokenizer_encode", _S, _H, c_char_p, c_size_t, c_int, P(P(ctypes.c_int32)), P(c_int64))
_proto("dtx_tokenizer_decode", _S, _H, P(ctypes.c_int32), c_int64, P(c_void_p), P(c_size_t))
_proto("dtx_tokenizer_vocab_size", c_int64, _H)
_proto("dtx_tokenizer_num_special", c_int, _H)
_proto("dtx_tokenizer_special", c_char_p, _H, c_int, P(ctypes.c_int32))
_proto("dtx_tokenizer_token_id", ctypes.c_int32, _H, c_char_p)
_proto("dtx_tokenizer_bos", ctypes.c_int32, _H)
_proto("dtx_tokenizer_eos", ctypes.c_int32, _H)
_proto("dtx_tokenizer_source", c_char_p, _H)
_proto("dtx_tokens_read", _S, c_char_p, c_int64, P(P(ctypes.c_int32)), P(c_int64))
_proto("dtx_shard_write", _S, c_char_p, P(ctypes.c_int32), c_int64, c_int64)
_proto("dtx_train_options_default", TrainOptions)
_proto("dtx_trainer_init", _S, P(_H), P(TrainOptions), c_char_p, c_char_p, P(Config), _H, P(OptimConfig))
_proto("dtx_trainer_init_checkpoint", _S, P(_H), P(TrainOptions), c_char_p, c_char_p, c_char_p, P(Config),
       P(OptimConfig))
_proto("dtx_trainer_info", None, _H, P(TrainInfo))
_proto("dtx_trainer_free", None, _H)
_proto("dtx_trainer_update", _S, _H, P(TrainStats))
_proto("dtx_trainer_eval", _S, _H, P(c_double))
_proto("dtx_trainer_save", _S, _H, c_char_p)
_proto("dtx_trainer_steps_done", c_int64, _H)
_proto("dtx_trainer_model", _H, _H)
_proto("dtx_trainer_take_model", _H, _H)
PROGRESS = ctypes.CFUNCTYPE(None, c_void_p, c_char_p, c_int64, c_int64)
_proto("dtx_eval_count", c_int)
_proto("dtx_eval_name", c_char_p, c_int, P(c_char_p))
_proto("dtx_eval_run", _S, c_char_p, c_int, P(c_char_p), PROGRESS, c_void_p, P(c_void_p), P(c_void_p))
_proto("dtx_model_describe", c_void_p, _H, c_char_p, c_int64, c_int, c_int)
_proto("dtx_system_describe", c_void_p, c_int)
_proto("dtx_tokenizer_describe", c_void_p, _H, c_char_p, c_int)
_proto("dtx_run_open", _S, P(_H), P(RunOptions))
_proto("dtx_run_resume_path", c_char_p, _H)
_proto("dtx_run_resume_step", c_int64, _H)
_proto("dtx_run_ckpt_dir", c_char_p, _H)
_proto("dtx_run_start_log", _S, _H, _H)
_proto("dtx_run_log_step", _S, _H, _H, c_double, c_double)
_proto("dtx_run_log_eval", _S, _H, c_int64, c_double, c_double)
_proto("dtx_run_checkpoint", _S, _H, _H)
_proto("dtx_run_last_checkpoint", c_char_p, _H, P(c_int64), P(c_double))
_proto("dtx_run_save_model", _S, _H, _H, c_int)
_proto("dtx_run_close", None, _H)
_proto("dtx_isa_level", c_int)
_proto("dtx_isa_name", c_char_p, c_int)

libc = ctypes.CDLL(None)
libc.free.argtypes = [c_void_p]
libc.free.restype = None
