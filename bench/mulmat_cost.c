// The served model's Q8_0 mat-muls alone, at n = 1, 2, 3, 4, 8 and 16 columns: the part of a
// verify pass that the batch-invariant kernels decide, without the model around it.
//
// Every projection of SmolLM2-135M (30 layers: q and o 576x576, k and v 576x192, gate and up
// 576x1536, down 1536x576) and its LM head (576x49152), in one ggml graph per n, 2 threads,
// random weights and activations; each n timed in rounds (best of the rounds), the n's
// interleaved within a round. It links against whichever ggml the run finds first, so one
// binary times two builds side by side (a kernel under work in a llama.cpp checkout against the
// one `make install` put in .venv) in seconds, where a whole wheel takes minutes to build:
//
//   lib=.venv/lib/python3.11/site-packages/llama_cpp/lib
//   gcc -O2 bench/mulmat_cost.c -I$lib/../../include -L$lib -lggml -lggml-base -lggml-cpu -o /tmp/mulmat_cost
//   for dir in $lib LLAMA_CHECKOUT/build/bin; do LD_LIBRARY_PATH=$dir /tmp/mulmat_cost 5; done
//
// With a third argument "prefill", n = 1, 16 and 512 (a prefill chunk) without the LM head
// (a prefill evaluates it for its last position only), in GMAC/s:
//
//   for dir in $lib OTHER_BUILD_LIB; do LD_LIBRARY_PATH=$dir /tmp/mulmat_cost 5 2 prefill; done
//
// A figure from here is a kernel's, not the service's: bench/verify_cost.py measures whole
// decode calls of the served file, bench/prefill.py whole prefills.

#include "ggml-cpu.h"
#include "ggml.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LAYERS 30
#define SIZES 6

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double) t.tv_sec + (double) t.tv_nsec * 1e-9;
}

static uint64_t state = 0x2545F4914F6CDD1Dull;

static uint32_t next(void) {  // xorshift64
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return (uint32_t) (state >> 32);
}

// Q8_0 blocks: an fp16 scale in [0.5, 2) and 32 quants in [-127, 127].
static void fill_q8_0(struct ggml_tensor * t) {
    uint8_t * p = t->data;
    const size_t blocks = ggml_nbytes(t) / 34;
    for (size_t b = 0; b < blocks; ++b, p += 34) {
        const ggml_fp16_t d = ggml_fp32_to_fp16(0.5f + (float) (next() % 1500) / 1000.0f);
        p[0] = (uint8_t) (d & 0xff);
        p[1] = (uint8_t) (d >> 8);
        for (int i = 0; i < 32; ++i) {
            p[2 + i] = (uint8_t) (int8_t) ((int) (next() % 255) - 127);
        }
    }
}

static void fill_f32(struct ggml_tensor * t) {
    float * v = t->data;
    for (int64_t i = 0; i < ggml_nelements(t); ++i) {
        v[i] = (float) ((int) (next() % 2001) - 1000) / 1000.0f;
    }
}

int main(int argc, char ** argv) {
    const int rounds = argc > 1 ? atoi(argv[1]) : 5;
    const int threads = argc > 2 ? atoi(argv[2]) : 2;
    static const int64_t shapes[][3] = {  // rows in, rows out, per layer
        { 576, 576, 2 }, { 576, 192, 2 }, { 576, 1536, 2 }, { 1536, 576, 1 },
    };
    const int prefill = argc > 3 && strcmp(argv[3], "prefill") == 0;
    static const int decode_columns[SIZES] = { 1, 2, 3, 4, 8, 16 };
    static const int prefill_columns[3] = { 1, 16, 512 };
    const int * columns = prefill ? prefill_columns : decode_columns;
    const int sizes = prefill ? 3 : SIZES;

    struct ggml_init_params init = { (size_t) (prefill ? 1200 : 400) << 20, NULL, false };
    struct ggml_context * ctx = ggml_init(init);
    struct ggml_tensor * weights[LAYERS * 7 + 1];
    int count = 0;
    for (int layer = 0; layer < LAYERS; ++layer) {
        for (int s = 0; s < 4; ++s) {
            for (int m = 0; m < shapes[s][2]; ++m) {
                weights[count++] = ggml_new_tensor_2d(ctx, GGML_TYPE_Q8_0, shapes[s][0], shapes[s][1]);
            }
        }
    }
    if (!prefill) {
        weights[count++] = ggml_new_tensor_2d(ctx, GGML_TYPE_Q8_0, 576, 49152);  // the LM head
    }
    for (int i = 0; i < count; ++i) {
        fill_q8_0(weights[i]);
    }

    struct ggml_cgraph * graphs[SIZES];
    for (int k = 0; k < sizes; ++k) {
        struct ggml_tensor * narrow = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 576, columns[k]);
        struct ggml_tensor * wide = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 1536, columns[k]);
        fill_f32(narrow);
        fill_f32(wide);
        graphs[k] = ggml_new_graph_custom(ctx, 1024, false);
        for (int i = 0; i < count; ++i) {
            struct ggml_tensor * x = weights[i]->ne[0] == 576 ? narrow : wide;
            ggml_build_forward_expand(graphs[k], ggml_mul_mat(ctx, weights[i], x));
        }
    }

    double best[SIZES];
    for (int k = 0; k < sizes; ++k) {
        ggml_graph_compute_with_ctx(ctx, graphs[k], threads);  // untimed: pages in, warms up
        best[k] = 1e9;
    }
    for (int r = 0; r < rounds; ++r) {
        for (int j = 0; j < sizes; ++j) {
            const int k = r % 2 ? sizes - 1 - j : j;  // the order flips every round
            const double t0 = seconds();
            ggml_graph_compute_with_ctx(ctx, graphs[k], threads);
            const double t = seconds() - t0;
            best[k] = t < best[k] ? t : best[k];
        }
    }
    printf("%d threads, best of %d rounds\n", threads, rounds);
    const double macs = 30 * (2 * 576 * 576 + 2 * 576 * 192 + 2 * 576 * 1536 + 1536 * 576.0) + (prefill ? 0 : 576 * 49152.0);
    for (int k = 0; k < sizes; ++k) {
        printf("n = %3d  %8.2f ms  c(n)/c(1) %.2f  %.1f GMAC/s\n", columns[k], best[k] * 1e3, best[k] / best[0],
               macs * columns[k] / best[k] * 1e-9);
    }
    ggml_free(ctx);
    return 0;
}
