// Batch invariance of the CPU backend's mat-mul: every element of a mul_mat of n columns must
// equal, bit for bit, one reference computed on that weight row and column alone, for every n,
// every number of rows and threads:
//
//   Q8_0 on x86 with AVX2 (batch-invariant.c): blocks in order, exact int32 sums, then
//       acc = fmaf(fp32(x.d) * fp32(y.d), (float) isum, acc)       (reference_q8_0 below);
//   F16 on x86 with AVX2, FMA and F16C: one chain along the row, acc = fmaf(x[i], y[i], acc) (reference_f16);
//   elsewhere: the type's vec_dot on that column alone (the single-token path).
//
// Cases: Q8_0 weights against F32 activations (a model's projections and LM head) and F16 against
// F32 (attention products), contiguous and as the attention's views: K*Q (permuted, broadcast over
// grouped-query heads) and V*softmax (a transposed cache's rows, a cache row apart, as long as the
// cached positions), with random rows, rows that quantize to +-127 everywhere, sparse rows, and
// Q8_0 weights holding -128 (a quantizer never writes it; a file may); n = 1..40 and prefill sizes
// up to 520; row counts that leave short tiles; rows of up to 8300 values, and rows whose length is
// not a multiple of any SIMD width; 1, 2 and 3 threads. Prints the first differing element and
// exits 1. Compile with -ffp-contract=off (the references' products stay rounded).
//
//   usage: test-mul-mat-batch-invariance [max_threads]

#include "ggml.h"
#include "ggml-cpu.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static float rnd(void) {  // xorshift64*: uniform in [-1, 1)
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (float) ((rng_state * 0x2545F4914F6CDD1Dull) >> 40) / (float) (1 << 23) - 1.0f;
}

enum fill { FILL_RANDOM, FILL_EXTREME, FILL_SPARSE, FILL_MIN_QUANT };

static void fill_values(float * v, int64_t count, enum fill how) {
    for (int64_t i = 0; i < count; ++i) {
        switch (how) {
            case FILL_RANDOM:  v[i] = rnd() * (1.0f + 3.0f * (float) ((i / 32) % 3)); break;
            case FILL_EXTREME: v[i] = rnd() < 0.0f ? -8.0f : 8.0f; break;  // every quant at +-127
            case FILL_SPARSE:  v[i] = rnd() > 0.9f ? rnd() * 50.0f : 0.0f; break;
            case FILL_MIN_QUANT: v[i] = rnd(); break;  // then quants set to -128: see set_min_quants
        }
    }
}

typedef struct {  // ggml's block_q8_0: an fp16 scale and 32 signed quants
    ggml_fp16_t d;
    int8_t qs[32];
} q8_0_block;

// Every 7th quant of Q8_0 weights to -128, the one value whose sign cannot be flipped in int8.
static void set_min_quants(void * data, int64_t blocks) {
    q8_0_block * b = data;
    for (int64_t i = 0; i < blocks * 32; i += 7) {
        b[i / 32].qs[i % 32] = -128;
    }
}

// The Q8_0 order of batch-invariant.c, in scalar C.
static float reference_q8_0(int64_t k, const q8_0_block * x, const q8_0_block * y) {
    float acc = 0.0f;
    for (int64_t b = 0; b < k / 32; ++b) {
        int32_t isum = 0;
        for (int i = 0; i < 32; ++i) {
            isum += (int32_t) x[b].qs[i] * (int32_t) y[b].qs[i];
        }
        const float d = ggml_fp16_to_fp32(x[b].d) * ggml_fp16_to_fp32(y[b].d);
        acc = fmaf(d, (float) isum, acc);
    }
    return acc;
}

// The F16 order of batch-invariant.c, in scalar C (y already rounded to F16).
static float reference_f16(int64_t k, const ggml_fp16_t * x, const ggml_fp16_t * y) {
    float acc = 0.0f;
    for (int64_t i = 0; i < k; ++i) {
        acc = fmaf(ggml_fp16_to_fp32(x[i]), ggml_fp16_to_fp32(y[i]), acc);
    }
    return acc;
}

// The reference for one weight row and one column: the orders above where the patch has its
// kernels (x86 with AVX2), else the type's vec_dot on that column alone (the single-token path).
static float reference_dot(enum ggml_type type, int64_t k, const void * row, const float * col) {
    const struct ggml_type_traits_cpu * traits = ggml_get_type_traits_cpu(type);
    const enum ggml_type vt = traits->vec_dot_type;
    void * qcol = malloc(ggml_row_size(vt, k));
    if (vt == GGML_TYPE_F32) {
        memcpy(qcol, col, k * sizeof(float));
    } else {
        ggml_get_type_traits_cpu(vt)->from_float(col, qcol, k);
    }
    float out = 0.0f;
    if (type == GGML_TYPE_Q8_0 && ggml_cpu_has_avx2()) {
        out = reference_q8_0(k, row, qcol);
    } else if (type == GGML_TYPE_F16 && ggml_cpu_has_avx2() && ggml_cpu_has_fma() && ggml_cpu_has_f16c()) {
        out = reference_f16(k, row, qcol);
    } else {
        traits->vec_dot((int) k, &out, 0, row, 0, qcol, 0, 1);
    }
    free(qcol);
    return out;
}

static int failures = 0;

enum layout { PLAIN, KQ, VS };

// dst = mul_mat(W, X) for W [k, m] of `type` and X [k, n] f32, computed by the backend with `threads`.
// KQ: W and X as K*Q's operands, W [k, m, 3 heads] permuted from a [k, 3, m] cache, X [k, n, 9 heads]
// permuted. VS: as V*softmax's, W [k, m, 3 heads] viewed in a transposed cache of k + 37 cells a row,
// X [k, n, 9 heads] contiguous.
static void check(enum ggml_type type, int64_t k, int64_t m, int64_t n, int threads, enum fill how, enum layout layout) {
    const int gqa = layout != PLAIN;
    const int64_t heads_w = gqa ? 3 : 1, heads_x = gqa ? 9 : 1;
    struct ggml_init_params ip = { .mem_size = 512 * 1024 * 1024, .mem_buffer = NULL, .no_alloc = false };
    struct ggml_context * ctx = ggml_init(ip);

    struct ggml_tensor * w;
    struct ggml_tensor * x;
    float * wf = malloc(sizeof(float) * (k + 37) * m * heads_w);
    fill_values(wf, (k + 37) * m * heads_w, how);
    if (layout == KQ) {
        struct ggml_tensor * w_store = ggml_new_tensor_3d(ctx, type, k, heads_w, m);
        ggml_quantize_chunk(type, wf, w_store->data, 0, heads_w * m, k, NULL);
        w = ggml_permute(ctx, w_store, 0, 2, 1, 3);
        struct ggml_tensor * x_store = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, k, heads_x, n);
        fill_values((float *) x_store->data, k * heads_x * n, FILL_RANDOM);
        x = ggml_permute(ctx, x_store, 0, 2, 1, 3);
    } else if (layout == VS) {
        struct ggml_tensor * w_store = ggml_new_tensor_2d(ctx, type, k + 37, m * heads_w);
        ggml_quantize_chunk(type, wf, w_store->data, 0, heads_w * m, k + 37, NULL);
        w = ggml_view_3d(ctx, w_store, k, m, heads_w, w_store->nb[1], w_store->nb[1] * m, 0);
        x = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, k, n, heads_x);
        fill_values((float *) x->data, k * n * heads_x, FILL_RANDOM);
    } else {
        w = ggml_new_tensor_2d(ctx, type, k, m);
        ggml_quantize_chunk(type, wf, w->data, 0, m, k, NULL);
        if (how == FILL_MIN_QUANT) {
            set_min_quants(w->data, m * k / 32);
        }
        x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, n);
        fill_values((float *) x->data, k * n, FILL_RANDOM);
    }
    struct ggml_tensor * y = ggml_mul_mat(ctx, w, x);
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, y);
    ggml_graph_compute_with_ctx(ctx, gf, threads);

    float * col = malloc(sizeof(float) * k);
    for (int64_t h = 0; h < heads_x && failures < 5; ++h) {
        for (int64_t j = 0; j < n && failures < 5; ++j) {
            for (int64_t e = 0; e < k; ++e) {
                col[e] = *(const float *) ((const char *) x->data + e * x->nb[0] + j * x->nb[1] + h * x->nb[2]);
            }
            const char * w_plane = (const char *) w->data + (h / (heads_x / heads_w)) * w->nb[2];
            for (int64_t i = 0; i < m; ++i) {
                const float want = reference_dot(type, k, w_plane + i * w->nb[1], col);
                const float got = *(const float *) ((const char *) y->data + i * y->nb[0] + j * y->nb[1] + h * y->nb[2]);
                if (memcmp(&want, &got, sizeof(float)) != 0) {
                    printf("FAIL %s k=%lld m=%lld n=%lld threads=%d fill=%d layout=%d: head %lld col %lld row %lld: "
                           "batched %.9g, reference %.9g\n",
                           ggml_type_name(type), (long long) k, (long long) m, (long long) n, threads, (int) how, (int) layout,
                           (long long) h, (long long) j, (long long) i, got, want);
                    failures++;
                    break;
                }
            }
        }
    }
    free(col);
    free(wf);
    ggml_free(ctx);
}

int main(int argc, char ** argv) {
    const int max_threads = argc > 1 ? atoi(argv[1]) : 3;
    int cases = 0;
    const enum ggml_type types[] = { GGML_TYPE_Q8_0, GGML_TYPE_F16 };
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); ++t) {
        const enum ggml_type type = types[t];
        for (int threads = 1; threads <= max_threads; ++threads) {
            for (int64_t n = 1; n <= 40; ++n) {
                check(type, 576, 100, n, threads, (enum fill) (n % 3), PLAIN);
                check(type, 1536, 36, n, threads, FILL_RANDOM, PLAIN);
                cases += 2;
                if (type == GGML_TYPE_Q8_0 && n % 4 == 1) {
                    check(type, 4160, 21, n, threads, FILL_RANDOM, PLAIN);  // 130 blocks: more than one segment
                    check(type, 96, 9, n, threads, FILL_MIN_QUANT, PLAIN);
                    cases += 2;
                }
            }
            for (int64_t n = 1; n <= 20; n += 3) {
                check(type, 64, 260, n, threads, FILL_RANDOM, KQ);  // head_dim 64, 260 cached keys
                cases++;
                if (type == GGML_TYPE_F16) {
                    check(type, 100, 37, n, threads, FILL_RANDOM, PLAIN);  // a row length no SIMD width divides
                    check(type, 768, 64, n, threads, FILL_RANDOM, VS);     // 768 cached positions, 64 channels
                    check(type, 300, 20, n, threads, FILL_SPARSE, VS);     // more than one 256-value segment
                    check(type, 8300, 19, n, threads, FILL_RANDOM, VS);    // more than one 8192-value span
                    cases += 4;
                }
            }
        }
        const int64_t prefill[] = { 63, 64, 65, 129, 520 };
        for (size_t p = 0; p < sizeof(prefill) / sizeof(prefill[0]); ++p) {
            check(type, 576, 48, prefill[p], max_threads, FILL_RANDOM, PLAIN);
            cases++;
        }
    }
    if (failures) {
        printf("batch invariance: FAILED (%d differing results)\n", failures);
        return 1;
    }
    printf("batch invariance: %d cases, every element bit-identical to its one-row, one-column reference "
           "(%s)\n", cases, ggml_cpu_has_avx2() ? "the orders of batch-invariant.c" : "vec_dot");
    return 0;
}
