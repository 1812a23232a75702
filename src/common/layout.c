/* The layout of the public structs, for bindings that mirror them by hand
 * (python/difftx/_lib.py checks its ctypes mirrors against this at load):
 * one line per struct, "name sizeof offset offset ...", the offsets of its
 * fields in the header's order. A field added or moved in difftx.h changes
 * the sizeof or an offset here, so a stale mirror is refused at once, not
 * read as garbage. */
#include <stddef.h>
#include <stdio.h>

#include "difftx.h"

#define O(type, field) (int)offsetof(type, field)

const char *dtx_struct_layout(void) {
    static char buf[3072];
    if (buf[0]) return buf;
    snprintf(buf, sizeof buf,
             "dtx_config %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d\n"
             "dtx_tensor_info %d %d %d %d %d %d %d %d\n"
             "dtx_optim_config %d %d %d %d %d %d %d %d %d %d %d %d %d %d\n"
             "dtx_rng %d %d\n"
             "dtx_sampler %d %d %d %d %d\n"
             "dtx_quant_options %d %d %d %d %d %d %d\n"
             "dtx_quant_summary %d %d %d %d\n"
             "dtx_train_mix %d %d %d %d %d %d %d %d %d %d %d %d %d\n"
             "dtx_train_options %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d\n"
             "dtx_train_info %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d\n"
             "dtx_train_stats %d %d %d %d %d\n"
             "dtx_run_options %d %d %d %d %d %d %d\n",
             (int)sizeof(dtx_config), O(dtx_config, arch), O(dtx_config, dim), O(dtx_config, n_layers),
             O(dtx_config, n_heads), O(dtx_config, n_kv_heads), O(dtx_config, vocab_size), O(dtx_config, ffn_dim),
             O(dtx_config, max_seq_len), O(dtx_config, rope_theta), O(dtx_config, norm_eps),
             O(dtx_config, tie_embeddings), O(dtx_config, subln), O(dtx_config, lambda_init_fixed),
             O(dtx_config, lambda_init_value), O(dtx_config, v2_lambda), O(dtx_config, rope_factor),
             O(dtx_config, rope_low_freq), O(dtx_config, rope_high_freq), O(dtx_config, rope_orig_max_pos),
             O(dtx_config, head_dim), O(dtx_config, transformer_mix),
             (int)sizeof(dtx_tensor_info), O(dtx_tensor_info, name), O(dtx_tensor_info, ndim),
             O(dtx_tensor_info, shape), O(dtx_tensor_info, offset), O(dtx_tensor_info, numel),
             O(dtx_tensor_info, decay), O(dtx_tensor_info, is_embedding),
             (int)sizeof(dtx_optim_config), O(dtx_optim_config, lr), O(dtx_optim_config, min_lr),
             O(dtx_optim_config, warmup_steps), O(dtx_optim_config, total_steps), O(dtx_optim_config, schedule),
             O(dtx_optim_config, beta1), O(dtx_optim_config, beta2), O(dtx_optim_config, eps),
             O(dtx_optim_config, weight_decay), O(dtx_optim_config, decay_embeddings),
             O(dtx_optim_config, clip_norm), O(dtx_optim_config, restart_step), O(dtx_optim_config, restart_lr),
             (int)sizeof(dtx_rng), O(dtx_rng, s),
             (int)sizeof(dtx_sampler), O(dtx_sampler, temperature), O(dtx_sampler, top_k), O(dtx_sampler, top_p),
             O(dtx_sampler, seed),
             (int)sizeof(dtx_quant_options), O(dtx_quant_options, scheme), O(dtx_quant_options, act_method),
             O(dtx_quant_options, percentile), O(dtx_quant_options, clip_search), O(dtx_quant_options, act_fp16),
             O(dtx_quant_options, a16_inputs),
             (int)sizeof(dtx_quant_summary), O(dtx_quant_summary, rows), O(dtx_quant_summary, mean_clip),
             O(dtx_quant_summary, act_clip),
             (int)sizeof(dtx_train_mix), O(dtx_train_mix, needle_frac), O(dtx_train_mix, copy_frac),
             O(dtx_train_mix, icl_frac), O(dtx_train_mix, halluc_frac), O(dtx_train_mix, fact_frac),
             O(dtx_train_mix, recall_frac), O(dtx_train_mix, needle_max), O(dtx_train_mix, recall_queries),
             O(dtx_train_mix, recall_distractors), O(dtx_train_mix, recall_all_targets), O(dtx_train_mix, tokenizer),
             O(dtx_train_mix, text),
             (int)sizeof(dtx_train_options), O(dtx_train_options, batch), O(dtx_train_options, seq),
             O(dtx_train_options, accum), O(dtx_train_options, eval_batches), O(dtx_train_options, seed),
             O(dtx_train_options, init_scheme), O(dtx_train_options, precision), O(dtx_train_options, diff_warmup),
             O(dtx_train_options, mix),
             O(dtx_train_options, comm), O(dtx_train_options, zero1), O(dtx_train_options, grad_bucket_mb),
             O(dtx_train_options, stop), O(dtx_train_options, debug_nan_at), O(dtx_train_options, debug_oom_at),
             (int)sizeof(dtx_train_info), O(dtx_train_info, data_tokens), O(dtx_train_info, val_tokens),
             O(dtx_train_info, start_step), O(dtx_train_info, start_loss), O(dtx_train_info, ckpt_threads),
             O(dtx_train_info, extended_from), O(dtx_train_info, restart_lr), O(dtx_train_info, rank),
             O(dtx_train_info, ranks), O(dtx_train_info, grad_bucket), O(dtx_train_info, last_loss),
             O(dtx_train_info, needle_docs), O(dtx_train_info, copy_docs), O(dtx_train_info, icl_rows),
             O(dtx_train_info, halluc_rows), O(dtx_train_info, fact_rows), O(dtx_train_info, recall_rows),
             (int)sizeof(dtx_train_stats), O(dtx_train_stats, step), O(dtx_train_stats, loss),
             O(dtx_train_stats, grad_norm), O(dtx_train_stats, lr),
             (int)sizeof(dtx_run_options), O(dtx_run_options, out), O(dtx_run_options, ckpt_dir),
             O(dtx_run_options, keep), O(dtx_run_options, log), O(dtx_run_options, resume),
             O(dtx_run_options, read_only));
    return buf;
}
