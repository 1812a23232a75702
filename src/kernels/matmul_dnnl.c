/* The linear layer on oneDNN matmul primitives (float build).
 *
 * Three products, none of which copies a transpose (the operands are
 * described with strides):
 *   forward  out [M, N]  = x [M, K] · wᵀ      src x {M,K}, weights w as {K,N}
 *                                            strides {1,K}, dst overwritten;
 *   dx       dx [M, K]  += dout [M, N] · w    src dout {M,N}, weights w {N,K},
 *                                            dst accumulated (sum post-op);
 *   dw       dw [N, K]  += doutᵀ · x          src dout as {N,M} strides {1,N},
 *                                            weights x {M,K}, sum post-op.
 * BF16: src and weights are rounded to bf16 into scratch buffers owned by this
 * module; oneDNN accumulates in fp32 and writes (or adds into) an fp32 dst.
 * Where oneDNN has no bf16 matmul (AVX2 CPUs: oneDNN 2.6 answers
 * `unimplemented`), bf16 is emulated: the operands are rounded to bf16 and
 * widened back to fp32 in the scratch buffers, and the fp32 primitive
 * multiplies them. A product of two bf16 values is exact in fp32, so this is
 * the native numerics (bf16 products, fp32 sums) up to the order of the
 * fp32 additions, at fp32 speed. Which one runs is decided once, at the first
 * bf16 product, by creating a small bf16 primitive.
 *
 * The engine is created under the ISA cap of dtx_isa_level() (DTX_ISA):
 * dnnl_set_max_cpu_isa before the first oneDNN call.
 *
 * One primitive per (shape, product, precision, accumulate, thread count) is
 * created on first use and kept in a small table (LRU, CACHE_CAP entries).
 * One mutex guards the table, the scratch buffers and the single stream, and
 * is held for the whole call, so calls from several threads are serialised
 * (each call already uses every OpenMP thread). Every oneDNN status is
 * checked; on a failure the caller falls back to the reference and one
 * warning line is printed per process. */
#include "kernels/kernels.h"
#include "kernels/matmul_dnnl.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ f32 -> bf16 */

/* Integer rounding on the bit pattern; GCC vectorises it (AVX-512: 32 values
 * per iteration). It runs at memory bandwidth: on the Zen 5 test box it was
 * as fast as or faster than the AVX512-BF16 instruction (VCVTNE2PS2BF16, 15 vs
 * 18 ms for 64 Mi values, single thread), which would also flush subnormals
 * to zero, so there is no instruction path. */
void dtx_bf16_convert_portable(uint16_t *restrict dst, const float *restrict src, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        union { float f; uint32_t u; } v = {.f = src[i]}; /* the bit pattern (C11 type punning) */
        uint32_t b = v.u;
        uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16; /* nearest, ties to even */
        uint32_t quiet = (b >> 16) | 0x0040u;                      /* NaN: keep it a NaN */
        dst[i] = (uint16_t)((b & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
    }
}

/* Both conversions split big arrays over the threads the same way. */
#define SPLIT_CONVERT(fn, dst, src, n)                                                      \
    do {                                                                                   \
        enum { CHUNK = 1 << 20 };                                                          \
        if ((n) <= 2 * (size_t)CHUNK) {                                                    \
            fn(dst, src, n);                                                               \
            break;                                                                         \
        }                                                                                  \
        int64_t n_chunks = (int64_t)(((n) + CHUNK - 1) / CHUNK);                           \
        _Pragma("omp parallel for schedule(static)") for (int64_t c = 0; c < n_chunks; c++) { \
            size_t i0 = (size_t)c * CHUNK, len = (n) - i0 < (size_t)CHUNK ? (n) - i0 : (size_t)CHUNK; \
            fn((dst) + i0, (src) + i0, len);                                               \
        }                                                                                  \
    } while (0)

/* Memory-bound: one core nearly saturates the bandwidth of a small box, so
 * only big arrays are split (1 Mi values = 4 MiB per task). */
void dtx_bf16_convert(uint16_t *dst, const float *src, size_t n) {
    SPLIT_CONVERT(dtx_bf16_convert_portable, dst, src, n);
}

void dtx_bf16_round_portable(float *dst, const float *src, size_t n) { /* dst may be src: no restrict */
#pragma omp simd
    for (size_t i = 0; i < n; i++) dst[i] = dtx_bf16_round_f32(src[i]);
}

void dtx_bf16_round(float *dst, const float *src, size_t n) { SPLIT_CONVERT(dtx_bf16_round_portable, dst, src, n); }

#ifndef DTX_DOUBLE
/* ------------------------------------------------------------ oneDNN */

#include <omp.h>
#include <pthread.h>
#include <stdio.h>

#include <dnnl.h>
#include <dnnl_debug.h>

enum { PROD_FWD = 0, PROD_DX = 1, PROD_DW = 2 };
enum { CACHE_CAP = 256 };

typedef struct {
    int64_t M, K, N; /* the caller's shape (x [M, K], w [N, K]) */
    int prod, prec, accum, nthr;
    dnnl_primitive_t prim; /* NULL: creating it failed, use the reference */
    dnnl_memory_t src, wei, dst;
    uint64_t last_use;
} entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t engine;
static dnnl_stream_t stream;
static int init_state; /* 0 not tried, 1 ready, -1 unavailable */
static int warned, atexit_done;
static entry cache[CACHE_CAP];
static int n_cache;
static uint64_t use_clock;
static size_t n_created;
static int force_failure; /* dtx_dnnl_matmul_force_failure */
static int bf16_native = -1; /* -1 not probed yet, 1 oneDNN bf16 matmuls, 0 emulated */
static int force_emulation;  /* dtx_dnnl_bf16_force_emulation */
/* bf16 operands (native: bf16 values; emulated: bf16-rounded floats): a
 * (src), b (weights), grown as needed, reused across calls; sizes in bytes. */
static void *scratch[2];
static size_t scratch_cap[2];

/* One line per process, the first time anything fails. Caller holds lock. */
static void warn(const char *what, dnnl_status_t st) {
    if (warned) return;
    warned = 1;
    fprintf(stderr, "difftx: warning: oneDNN matmul failed (%s: %s); using the reference matmul\n", what,
            dnnl_status2str(st));
}

static void entry_free(entry *e) {
    if (e->prim) dnnl_primitive_destroy(e->prim);
    if (e->src) dnnl_memory_destroy(e->src);
    if (e->wei) dnnl_memory_destroy(e->wei);
    if (e->dst) dnnl_memory_destroy(e->dst);
    memset(e, 0, sizeof *e);
}

static void clear_locked(void) {
    for (int i = 0; i < n_cache; i++) entry_free(&cache[i]);
    n_cache = 0;
    for (int i = 0; i < 2; i++) {
        free(scratch[i]);
        scratch[i] = NULL;
        scratch_cap[i] = 0;
    }
}

void dtx_matmul_cache_clear(void) {
    pthread_mutex_lock(&lock);
    clear_locked();
    pthread_mutex_unlock(&lock);
}

void dtx_dnnl_matmul_force_failure(int on) {
    pthread_mutex_lock(&lock);
    clear_locked();
    force_failure = on;
    pthread_mutex_unlock(&lock);
}

int dtx_dnnl_bf16_force_emulation(int on) {
    pthread_mutex_lock(&lock);
    clear_locked();
    int prev = force_emulation;
    force_emulation = on;
    pthread_mutex_unlock(&lock);
    return prev;
}

size_t dtx_matmul_primitives_created(void) {
    pthread_mutex_lock(&lock);
    size_t n = n_created;
    pthread_mutex_unlock(&lock);
    return n;
}

static void at_exit(void) {
    pthread_mutex_lock(&lock);
    clear_locked();
    if (stream) dnnl_stream_destroy(stream);
    if (engine) dnnl_engine_destroy(engine);
    stream = NULL;
    engine = NULL;
    init_state = -1;
    pthread_mutex_unlock(&lock);
}

/* oneDNN's ISA for our level: the cap DTX_ISA asks for (no cap at the top). */
static void cap_isa(void) {
    static const dnnl_cpu_isa_t caps[] = {dnnl_cpu_isa_sse41, dnnl_cpu_isa_avx2, dnnl_cpu_isa_avx512_core,
                                          dnnl_cpu_isa_all};
    dtx_isa lvl = dtx_isa_level();
    /* Fails (harmlessly) when DNNL_MAX_CPU_ISA is set or oneDNN already ran. */
    if (lvl < DTX_ISA_AVX512_BF16) (void)dnnl_set_max_cpu_isa(caps[lvl]);
}

/* Engine and stream, once. Caller holds lock. */
static int ensure_engine(void) {
    if (init_state) return init_state > 0;
    cap_isa();
    dnnl_status_t st = dnnl_engine_create(&engine, dnnl_cpu, 0);
    if (st == dnnl_success) st = dnnl_stream_create(&stream, engine, dnnl_stream_default_flags);
    if (st != dnnl_success) {
        warn("creating the CPU engine", st);
        if (engine) dnnl_engine_destroy(engine);
        engine = NULL;
        init_state = -1;
        return 0;
    }
    init_state = 1;
    return 1;
}

/* src {m, k} with strides ss, weights {k, n} with strides ws, dst {m, n}
 * row-major; sum post-op when accum. */
static dnnl_status_t create(entry *e, int64_t m, int64_t k, int64_t n, const dnnl_dims_t ss, const dnnl_dims_t ws,
                            dnnl_data_type_t dt, const char **what) {
    dnnl_memory_desc_t smd, wmd, dmd;
    dnnl_dims_t sdims = {m, k}, wdims = {k, n}, ddims = {m, n}, dstr = {n, 1};
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t ops = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st;
    if (force_failure) {
        *what = "failure forced by a test";
        return dnnl_unimplemented;
    }
#define TRY(call, name) do { *what = (name); if ((st = (call)) != dnnl_success) goto done; } while (0)
    TRY(dnnl_memory_desc_init_by_strides(&smd, 2, sdims, dt, ss), "src descriptor");
    TRY(dnnl_memory_desc_init_by_strides(&wmd, 2, wdims, dt, ws), "weights descriptor");
    TRY(dnnl_memory_desc_init_by_strides(&dmd, 2, ddims, dnnl_f32, dstr), "dst descriptor");
    TRY(dnnl_matmul_desc_init(&md, &smd, &wmd, NULL, &dmd), "dnnl_matmul_desc_init");
    TRY(dnnl_primitive_attr_create(&attr), "dnnl_primitive_attr_create");
    if (e->accum) {
        TRY(dnnl_post_ops_create(&ops), "dnnl_post_ops_create");
        TRY(dnnl_post_ops_append_sum(ops, 1.0f), "dnnl_post_ops_append_sum");
        TRY(dnnl_primitive_attr_set_post_ops(attr, ops), "dnnl_primitive_attr_set_post_ops");
    }
    TRY(dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL), "dnnl_primitive_desc_create");
    TRY(dnnl_primitive_create(&e->prim, pd), "dnnl_primitive_create");
    TRY(dnnl_memory_create(&e->src, &smd, engine, DNNL_MEMORY_NONE), "dnnl_memory_create");
    TRY(dnnl_memory_create(&e->wei, &wmd, engine, DNNL_MEMORY_NONE), "dnnl_memory_create");
    TRY(dnnl_memory_create(&e->dst, &dmd, engine, DNNL_MEMORY_NONE), "dnnl_memory_create");
#undef TRY
done:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (ops) dnnl_post_ops_destroy(ops);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return st;
}

/* Whether oneDNN multiplies bf16 here: probed once with a small primitive
 * (it answers `unimplemented` on CPUs without AVX-512). Caller holds lock. */
static int bf16_is_native(void) {
    if (force_emulation) return 0;
    if (bf16_native < 0) {
        const dnnl_dims_t dims = {16, 16}, str = {16, 1};
        dnnl_memory_desc_t a, b, c;
        dnnl_matmul_desc_t md;
        dnnl_primitive_desc_t pd = NULL;
        int ok = dnnl_memory_desc_init_by_strides(&a, 2, dims, dnnl_bf16, str) == dnnl_success &&
                 dnnl_memory_desc_init_by_strides(&b, 2, dims, dnnl_bf16, str) == dnnl_success &&
                 dnnl_memory_desc_init_by_strides(&c, 2, dims, dnnl_f32, str) == dnnl_success &&
                 dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) == dnnl_success &&
                 dnnl_primitive_desc_create(&pd, &md, NULL, engine, NULL) == dnnl_success;
        if (pd) dnnl_primitive_desc_destroy(pd);
        bf16_native = ok;
    }
    return bf16_native;
}

/* The cached primitive for this product (created on a miss), or NULL when
 * oneDNN cannot do it. Caller holds lock. */
static entry *lookup(int64_t M, int64_t K, int64_t N, int prod, dtx_precision p, int accum) {
    int nthr = omp_get_max_threads();
    entry *e = NULL;
    for (int i = 0; i < n_cache; i++) {
        entry *c = &cache[i];
        if (c->M == M && c->K == K && c->N == N && c->prod == prod && c->prec == (int)p && c->accum == accum &&
            c->nthr == nthr) {
            e = c;
            break;
        }
    }
    if (!e) {
        if (n_cache < CACHE_CAP) {
            e = &cache[n_cache++];
        } else { /* evict the least recently used */
            e = &cache[0];
            for (int i = 1; i < n_cache; i++)
                if (cache[i].last_use < e->last_use) e = &cache[i];
            entry_free(e);
        }
        e->M = M, e->K = K, e->N = N, e->prod = prod, e->prec = (int)p, e->accum = accum, e->nthr = nthr;
        dnnl_data_type_t dt = p == DTX_PREC_BF16 && bf16_is_native() ? dnnl_bf16 : dnnl_f32;
        const char *what = "";
        dnnl_status_t st;
        if (prod == PROD_FWD) {
            const dnnl_dims_t ss = {K, 1}, ws = {1, K}; /* x {M,K}; wᵀ {K,N} */
            st = create(e, M, K, N, ss, ws, dt, &what);
        } else if (prod == PROD_DX) {
            const dnnl_dims_t ss = {N, 1}, ws = {K, 1}; /* dout {M,N}; w {N,K} */
            st = create(e, M, N, K, ss, ws, dt, &what);
        } else {
            const dnnl_dims_t ss = {1, N}, ws = {K, 1}; /* doutᵀ {N,M}; x {M,K} */
            st = create(e, N, M, K, ss, ws, dt, &what);
        }
        if (st != dnnl_success) {
            warn(what, st);
            entry_free(e); /* keep the key: a NULL primitive marks "use the reference" */
            e->M = M, e->K = K, e->N = N, e->prod = prod, e->prec = (int)p, e->accum = accum, e->nthr = nthr;
        } else {
            n_created++;
            if (!atexit_done) {
                /* After oneDNN's own lazily built state, so that this runs first at exit. */
                atexit_done = 1;
                atexit(at_exit);
            }
        }
    }
    e->last_use = ++use_clock;
    return e->prim ? e : NULL;
}

static int run(entry *e, const void *src, const void *wei, float *dst) {
    dnnl_status_t st;
    const char *what = "dnnl_memory_set_data_handle";
    if ((st = dnnl_memory_set_data_handle(e->src, (void *)src)) == dnnl_success &&
        (st = dnnl_memory_set_data_handle(e->wei, (void *)wei)) == dnnl_success &&
        (st = dnnl_memory_set_data_handle(e->dst, dst)) == dnnl_success) {
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, e->src}, {DNNL_ARG_WEIGHTS, e->wei}, {DNNL_ARG_DST, e->dst}};
        what = "dnnl_primitive_execute";
        if ((st = dnnl_primitive_execute(e->prim, stream, 3, args)) == dnnl_success) {
            what = "dnnl_stream_wait";
            st = dnnl_stream_wait(stream);
        }
    }
    if (st != dnnl_success) {
        warn(what, st);
        return 0;
    }
    return 1;
}

/* The bf16 operand of src [n] in scratch slot i (grown when needed): bf16
 * values for a native primitive, bf16-rounded floats for an emulated one
 * (src itself when the caller rounded it: pre); NULL when out of memory.
 * Caller holds lock. */
static const void *to_bf16(int i, const float *src, size_t n, int pre) {
    int native = bf16_is_native();
    if (pre && !native) return src;
    size_t bytes = n * (native ? sizeof(uint16_t) : sizeof(float));
    if (bytes > scratch_cap[i]) {
        size_t cap = bytes + bytes / 4;
        void *p = dtx_alloc(cap, 1);
        if (!p) {
            if (!warned) {
                warned = 1;
                fprintf(stderr, "difftx: warning: out of memory for bf16 matmul operands; using the reference matmul\n");
            }
            return NULL;
        }
        free(scratch[i]);
        scratch[i] = p;
        scratch_cap[i] = cap;
    }
    if (native) dtx_bf16_convert(scratch[i], src, n);
    else dtx_bf16_round(scratch[i], src, n);
    return scratch[i];
}

int dtx_dnnl_matmul_forward(float *out, const float *x, const float *w, int64_t M, int64_t K, int64_t N,
                            dtx_precision p, unsigned pre) {
    if (M <= 0 || K <= 0 || N <= 0) return 0;
    pthread_mutex_lock(&lock);
    int done = 0;
    entry *e = ensure_engine() ? lookup(M, K, N, PROD_FWD, p, 0) : NULL;
    if (e && p == DTX_PREC_BF16) {
        const void *xb = to_bf16(0, x, (size_t)(M * K), pre & DTX_MM_PRE_X);
        const void *wb = xb ? to_bf16(1, w, (size_t)(N * K), pre & DTX_MM_PRE_W) : NULL;
        done = wb && run(e, xb, wb, out);
    } else if (e) {
        done = run(e, x, w, out);
    }
    pthread_mutex_unlock(&lock);
    return done;
}

int dtx_dnnl_matmul_backward(float *dx, float *dw, const float *dout, const float *x, const float *w, int64_t M,
                             int64_t K, int64_t N, dtx_precision p, unsigned pre) {
    if (M <= 0 || K <= 0 || N <= 0) return 0;
    pthread_mutex_lock(&lock);
    int done = 0;
    if (ensure_engine()) {
        entry *ex = dx ? lookup(M, K, N, PROD_DX, p, 1) : NULL;
        entry *ew = dw ? lookup(M, K, N, PROD_DW, p, 1) : NULL;
        if (p == DTX_PREC_BF16 && (ex || ew)) {
            /* dout once for both products; then w, then x in the second slot. */
            const void *db = to_bf16(0, dout, (size_t)(M * N), pre & DTX_MM_PRE_DOUT);
            if (db && ex) {
                const void *wb = to_bf16(1, w, (size_t)(N * K), pre & DTX_MM_PRE_W);
                if (wb && run(ex, db, wb, dx)) done |= DTX_DNNL_DID_DX;
            }
            if (db && ew) {
                const void *xb = to_bf16(1, x, (size_t)(M * K), pre & DTX_MM_PRE_X);
                if (xb && run(ew, db, xb, dw)) done |= DTX_DNNL_DID_DW;
            }
        } else {
            if (ex && run(ex, dout, w, dx)) done |= DTX_DNNL_DID_DX;
            if (ew && run(ew, dout, x, dw)) done |= DTX_DNNL_DID_DW;
        }
    }
    pthread_mutex_unlock(&lock);
    return done;
}

static const char *dnnl_isa_str(dnnl_cpu_isa_t isa) {
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "unknown";
    }
}

const char *dtx_matmul_isa_name(void) {
    pthread_mutex_lock(&lock);
    const char *s = ensure_engine() ? dnnl_isa_str(dnnl_get_effective_cpu_isa()) : "unavailable";
    pthread_mutex_unlock(&lock);
    return s;
}

const char *dtx_matmul_library(void) {
    static char buf[48];
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, sizeof buf, "oneDNN %u.%u.%u", v->major, v->minor, v->patch);
    return buf;
}

int dtx_matmul_bf16_native(void) {
    pthread_mutex_lock(&lock);
    int n = ensure_engine() && bf16_is_native();
    pthread_mutex_unlock(&lock);
    return n;
}

#else /* DTX_DOUBLE: oneDNN has no f64 matmul; the reference does everything. */

size_t dtx_matmul_primitives_created(void) { return 0; }
void dtx_matmul_cache_clear(void) {}
const char *dtx_matmul_isa_name(void) { return "none"; }
const char *dtx_matmul_library(void) { return "the reference loops (double build)"; }
int dtx_matmul_bf16_native(void) { return 0; }

#endif
