#include "common/profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int dtx_prof_enabled;
static double totals[DTX_PROF_N][2];
static long calls[DTX_PROF_N][2];

static const char *const names[DTX_PROF_N] = {"matmul", "attention", "rmsnorm", "rope", "swiglu",
                                              "residual", "embedding", "loss", "optimizer", "bf16 rounding"};

void dtx_prof_add(dtx_prof_op op, int backward, double seconds) {
    totals[op][backward != 0] += seconds;
    calls[op][backward != 0]++;
}

static void report(void) {
    double all = 0;
    for (int i = 0; i < DTX_PROF_N; i++) all += totals[i][0] + totals[i][1];
    if (all <= 0) return;
    fprintf(stderr, "difftx profile (wall seconds)      forward   backward   share\n");
    for (int i = 0; i < DTX_PROF_N; i++) {
        double t = totals[i][0] + totals[i][1];
        if (calls[i][0] + calls[i][1] == 0) continue;
        fprintf(stderr, "  %-30s %9.3f  %9.3f  %5.1f%%\n", names[i], totals[i][0], totals[i][1], 100 * t / all);
    }
    fprintf(stderr, "  %-30s %20.3f\n", "total", all);
}

__attribute__((constructor)) static void prof_init(void) {
    const char *e = getenv("DTX_PROFILE");
    if (e && *e && *e != '0') {
        dtx_prof_enabled = 1;
        atexit(report);
    }
}
