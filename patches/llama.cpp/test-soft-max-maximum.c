// soft_max's row maximum, which 0002-ggml-cpu-vec-max-simd.patch computes in SIMD lanes in four
// chains instead of one scalar chain (ggml_vec_max_f32). A maximum is exact in any order, so
// the op's results must not change; what could go wrong is a maximum that misses an element (a
// lane, a chain, the tail). Each row here holds one large value (200) at a position that moves
// along the row (every position for lengths 1 to 80; every 7th, through the scalar tail, for
// two cache lengths, 608 and 869) beside values within 5 of zero and a causal mask's -inf: a
// maximum that missed it would leave exp(200 - max) to overflow. Each row must be finite, give
// that position more than 0.999, and be bit identical to the same row computed alone (one row,
// one thread), on 1-3 threads.
//
// Prints the first failures and exits 1.
//
//   usage: test-soft-max-maximum [max_threads]

#include "ggml.h"
#include "ggml-cpu.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0xD1B54A32D192ED03ull;

static uint64_t next(void) {  // xorshift64*
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

static float rnd(void) {  // uniform in [-1, 1)
    return (float) (next() >> 40) / (float) (1 << 23) - 1.0f;
}

static int failures = 0;

static void fail(const char * what) {
    if (failures < 5) {
        printf("FAIL %s\n", what);
    }
    failures++;
}

static void compute(struct ggml_context * ctx, struct ggml_tensor * t, int threads) {
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, t);
    ggml_graph_compute_with_ctx(ctx, gf, threads);
}

// soft_max(x + mask) of `rows` rows of `len`, row r's large value at position (r * stride) % len.
static void check_soft_max(int64_t len, int64_t rows, int64_t stride, int threads) {
    struct ggml_init_params ip = { .mem_size = 256 * 1024 * 1024, .mem_buffer = NULL, .no_alloc = false };
    struct ggml_context * ctx = ggml_init(ip);
    struct ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, len, rows);
    struct ggml_tensor * mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, len, rows);
    float * xv = x->data;
    ggml_fp16_t * mv = mask->data;
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t at = (r * stride) % len;
        for (int64_t i = 0; i < len; ++i) {
            xv[r * len + i] = i == at ? 200.0f : rnd() * 5.0f;
            // a causal mask's -inf here and there, never on the large value
            mv[r * len + i] = ggml_fp32_to_fp16(i != at && next() % 5 == 0 ? -INFINITY : 0.0f);
        }
    }
    struct ggml_tensor * y = ggml_soft_max_ext(ctx, x, mask, 1.0f, 0.0f);
    compute(ctx, y, threads);

    char what[160];
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t at = (r * stride) % len;
        const float * row = (const float *) y->data + r * len;
        int finite = 1;
        for (int64_t i = 0; i < len; ++i) {
            finite &= isfinite(row[i]);
        }
        if (!finite || !(row[at] > 0.999f)) {
            snprintf(what, sizeof(what), "soft_max len=%lld threads=%d: row %lld, large value at %lld gets %g",
                     (long long) len, threads, (long long) r, (long long) at, row[at]);
            fail(what);
            continue;
        }
        // the same row alone, on one thread
        struct ggml_tensor * x1 = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, len);
        struct ggml_tensor * m1 = ggml_new_tensor_1d(ctx, GGML_TYPE_F16, len);
        memcpy(x1->data, xv + r * len, sizeof(float) * len);
        memcpy(m1->data, mv + r * len, sizeof(ggml_fp16_t) * len);
        struct ggml_tensor * y1 = ggml_soft_max_ext(ctx, x1, m1, 1.0f, 0.0f);
        compute(ctx, y1, 1);
        if (memcmp(y1->data, row, sizeof(float) * len) != 0) {
            snprintf(what, sizeof(what), "soft_max len=%lld threads=%d: row %lld differs from the row alone",
                     (long long) len, threads, (long long) r);
            fail(what);
        }
    }
    ggml_free(ctx);
}

int main(int argc, char ** argv) {
    const int max_threads = argc > 1 ? atoi(argv[1]) : 3;
    int cases = 0;
    for (int threads = 1; threads <= max_threads; ++threads) {
        for (int64_t len = 1; len <= 80; ++len) {
            check_soft_max(len, len, 1, threads);  // every position holds the large value once
            cases++;
        }
        check_soft_max(608, 128, 7, threads);
        check_soft_max(869, 128, 7, threads);
        cases += 2;
    }
    if (failures) {
        printf("soft_max maximum: FAILED (%d failures)\n", failures);
        return 1;
    }
    printf("soft_max maximum: %d cases, every row's maximum found, every row as computed alone\n", cases);
    return 0;
}
