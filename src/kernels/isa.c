/* The CPU's instruction-set level, detected once, capped by DTX_ISA (see
 * difftx.h, "CPU instruction set"). Every kernel family with hand-written
 * SIMD picks its implementation from dtx_isa_level() through a table of its
 * own (tile_gemm.c, tile_bf16.c); oneDNN gets the same cap
 * (matmul_dnnl.c). */
#include <pthread.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

static int cpu_level;       /* what the CPU (and OS) supports, set once */
static int env_cap = -1;    /* DTX_ISA, parsed once; -1 unset or invalid */
static int env_bad;         /* DTX_ISA was set to something unknown */
static int test_cap = -1;   /* dtx_isa_set_cap: -1 none */
static int has_vnni;
static int full_width;      /* 512-bit datapaths at full width (AMD family >= 1Ah) */
static int test_full = -1;  /* dtx_isa_set_full_width: -1 none */

static const char *const NAMES[] = {"portable", "avx2", "avx512", "avx512bf16"};

static int detect(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    /* __builtin_cpu_supports also checks that the OS saves the registers
     * (XCR0), so a CPU flag the kernel does not enable counts as absent. */
    int lvl = DTX_ISA_PORTABLE;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        lvl = DTX_ISA_AVX2;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
            __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
            lvl = DTX_ISA_AVX512;
            if (__builtin_cpu_supports("avx512bf16")) lvl = DTX_ISA_AVX512_BF16;
        }
    }
    has_vnni = __builtin_cpu_supports("avx512vnni");
    /* the family from CPUID leaf 1: base family, plus the extended family where the base is 0Fh */
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__builtin_cpu_is("amd") && __get_cpuid(1, &a, &b, &c, &d)) {
        unsigned fam = (a >> 8) & 0xF;
        if (fam == 0xF) fam += (a >> 20) & 0xFF;
        full_width = fam >= 0x1A && lvl >= DTX_ISA_AVX512;
    }
    return lvl;
#else
    return DTX_ISA_PORTABLE;
#endif
}

int dtx_isa_parse(const char *s, dtx_isa *out) {
    for (int i = 0; i <= DTX_ISA_AVX512_BF16; i++)
        if (s && !strcmp(s, NAMES[i])) {
            *out = (dtx_isa)i;
            return 1;
        }
    return 0;
}

static void detect_once(void) {
    const char *e = getenv("DTX_ISA");
    dtx_isa cap;
    int ec = -1, bad = 0;
    if (e && *e) {
        if (dtx_isa_parse(e, &cap)) ec = (int)cap;
        else bad = 1;
    }
    env_cap = ec, env_bad = bad;
    cpu_level = detect();
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void init(void) { pthread_once(&once, detect_once); }

dtx_isa dtx_isa_cpu(void) {
    init();
    return (dtx_isa)cpu_level;
}

dtx_isa dtx_isa_level(void) {
    init();
    int lvl = cpu_level, t = __atomic_load_n(&test_cap, __ATOMIC_RELAXED);
    if (env_cap >= 0 && env_cap < lvl) lvl = env_cap;
    if (t >= 0 && t < lvl) lvl = t;
    return (dtx_isa)lvl;
}

const char *dtx_isa_name(dtx_isa i) {
    return (int)i >= 0 && (int)i <= DTX_ISA_AVX512_BF16 ? NAMES[i] : "unknown";
}

const char *dtx_isa_env_error(void) {
    init();
    static char msg[160];
    if (!env_bad) return NULL;
    snprintf(msg, sizeof msg, "DTX_ISA='%.40s' is not an ISA level (portable, avx2, avx512, avx512bf16)",
             getenv("DTX_ISA") ? getenv("DTX_ISA") : "");
    return msg;
}

int dtx_isa_cpu_has_vnni(void) {
    init();
    return has_vnni;
}

int dtx_isa_full_width(void) {
    init();
    int t = __atomic_load_n(&test_full, __ATOMIC_RELAXED);
    return t >= 0 ? t : full_width;
}

int dtx_isa_set_full_width(int v) {
    int prev = dtx_isa_full_width();
    __atomic_store_n(&test_full, v < 0 ? -1 : !!v, __ATOMIC_RELAXED);
    return prev;
}

dtx_isa dtx_isa_set_cap(dtx_isa cap) {
    init();
    int prev = __atomic_load_n(&test_cap, __ATOMIC_RELAXED);
    __atomic_store_n(&test_cap, (int)cap, __ATOMIC_RELAXED);
    return prev < 0 ? DTX_ISA_AVX512_BF16 : (dtx_isa)prev;
}
