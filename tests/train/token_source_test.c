/* src/train/token_source.c: a token shard and a text file of the same ids
 * give the same random batches, the same batches in order (with the wrap)
 * and the same hash; the sampler advances its generator by one draw per row,
 * as dtx_shard_sample_batch does; ids outside the vocabulary are refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "train/token_source.h"

enum { N = 500, V = 97, B = 3, T = 16 };

TEST(token_source_shard_and_text_agree) {
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 31 + 7) % V);
    const char *sp = test_path("ts.bin"), *tp = test_path("ts.txt");
    REQUIRE(dtx_shard_write(sp, ids, N, V) == DTX_OK);
    FILE *f = fopen(tp, "w");
    REQUIRE(f);
    for (int i = 0; i < N; i++) fprintf(f, "%d%c", ids[i], i % 20 == 19 ? '\n' : ' ');
    fclose(f);
    token_source s, t;
    REQUIRE(source_open(&s, sp, V) == DTX_OK);
    REQUIRE(source_open(&t, tp, V) == DTX_OK);
    CHECK(s.shard && !t.shard && s.count == N && t.count == N);
    CHECK(source_hash(&s) == source_hash(&t));
    int32_t si[B * T], st[B * T], ti[B * T], tt[B * T];
    dtx_rng rs, rt, rd;
    dtx_rng_seed(&rs, 5), dtx_rng_seed(&rt, 5), dtx_rng_seed(&rd, 5);
    int same = 1, windows = 1;
    for (int step = 0; step < 20; step++) {
        source_sample(&s, &rs, B, T, si, st);
        source_sample(&t, &rt, B, T, ti, tt);
        same &= !memcmp(si, ti, sizeof si) && !memcmp(st, tt, sizeof st);
        for (int r = 0; r < B; r++) /* each row a window of the stream, targets one ahead */
            for (int k = 0; k + 1 < T; k++) windows &= ti[r * T + k + 1] == tt[r * T + k];
    }
    CHECK(same && windows);
    /* one draw per row: shard_sample_batch's generator state after as many rows */
    int32_t di[B * T], dt[B * T];
    dtx_shard *sh;
    REQUIRE(dtx_shard_open(&sh, sp, V) == DTX_OK);
    for (int step = 0; step < 20; step++) REQUIRE(dtx_shard_sample_batch(sh, &rd, B, T, di, dt) == DTX_OK);
    CHECK(!memcmp(&rd, &rt, sizeof rd) && !memcmp(di, ti, sizeof di));
    dtx_shard_close(sh);
    /* in order, wrapping when the next window does not fit */
    int64_t ps = 0, pt = 0;
    same = 1;
    for (int step = 0; step < 30; step++) {
        source_sequential(&s, &ps, B, T, si, st);
        source_sequential(&t, &pt, B, T, ti, tt);
        same &= ps == pt && !memcmp(si, ti, sizeof si) && !memcmp(st, tt, sizeof st);
    }
    CHECK(same && ps < N);
    source_close(&s), source_close(&t);
    /* an id outside the vocabulary, in either form */
    CHECK(source_open(&s, sp, 50) != DTX_OK && strstr(dtx_last_error(), "ts.bin"));
    CHECK(source_open(&t, tp, 50) != DTX_OK && strstr(dtx_last_error(), "ts.txt"));
}
