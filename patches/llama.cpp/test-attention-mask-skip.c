// What attention's mask lets the batch-invariant CPU kernels skip (0003-attention-skips-masked-work)
// must change no bit that anything reads. Each case builds the attention of llama-graph's
// build_attn_mha without flash attention, twice on the same inputs:
//
//   kq  = mul_mat(K, Q)                    K: an F16 cache [head_dim, n_kv, 3 heads, streams] permuted,
//   sm  = soft_max_ext(kq, mask, scale)    Q: F32 [head_dim, n, 9 heads, streams] permuted
//   kqv = mul_mat(V, sm)                   V: a transposed F16 cache [n_kv, head_dim, 3 heads, streams]
//
// once with ggml_mul_mat_set_mask on both mul_mats (K*Q skips key tiles the mask hides and stores
// zeros there; V*softmax runs each chain over its unmasked positions only; soft_max stops at the
// row's last unmasked 64) and once whole: K*Q plus the mask by ggml_add, then a soft_max without a
// mask (kq + 0 and kq - INFINITY scale to what soft_max's kq * scale + mask gives), and a plain
// V*softmax. It compares by memcmp every value of sm and kqv, and every value of kq that the mask
// leaves in (the masked ones must be finite). Masks: causal at an offset (a prefill chunk after a
// cached prefix, one token, a verify batch), two sequences interleaved in one cache, a window
// that also masks leading positions, two KV streams, F32 and F16 masks; 1 to 3 threads. Before
// the skips existed the two graphs were the same computation, so any difference is theirs. Also
// checks that without the mask the kernels still run every chain (a mask with nothing masked).
//
//   usage: test-attention-mask-skip [max_threads]

#include "ggml.h"
#include "ggml-cpu.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static float rnd(void) {  // xorshift64*: uniform in [-1, 1)
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (float) ((rng_state * 0x2545F4914F6CDD1Dull) >> 40) / (float) (1 << 23) - 1.0f;
}

enum pattern { CAUSAL, TWO_SEQUENCES, WINDOW, NOTHING_MASKED };

// Is key j visible to query t (at position first + t)?
static int visible(enum pattern how, int64_t first, int64_t t, int64_t j) {
    const int64_t pos = first + t;
    switch (how) {
        case CAUSAL:         return j <= pos;
        case TWO_SEQUENCES:  return j <= pos && (j % 2) == (pos % 2);  // cells alternate between sequences
        case WINDOW:         return j <= pos && j > pos - 100;
        case NOTHING_MASKED: return 1;
    }
    return 1;
}

static int failures = 0;

static void compare(const char * what, const struct ggml_tensor * a, const struct ggml_tensor * b, const struct ggml_tensor * keep_mask,
                    int64_t n_kv, int64_t n, const char * label) {
    const int64_t total = ggml_nelements(a);
    for (int64_t e = 0; e < total && failures < 5; ++e) {
        if (keep_mask != NULL) {  // K*Q: only what the mask leaves in is ever read
            const int64_t j = e % n_kv, t = (e / n_kv) % n, s = e / (n_kv * n * a->ne[2]);
            const float m = ((const float *) keep_mask->data)[j + t * n_kv + s * n_kv * keep_mask->ne[1]];
            if (m == -INFINITY) {
                const float got = ((const float *) b->data)[e];
                if (!isfinite(got)) {
                    printf("FAIL %s %s: masked element %lld is %g, not finite\n", label, what, (long long) e, got);
                    failures++;
                }
                continue;
            }
        }
        if (memcmp((const float *) a->data + e, (const float *) b->data + e, sizeof(float)) != 0) {
            printf("FAIL %s %s: element %lld: skipping %.9g, whole %.9g\n", label, what, (long long) e,
                   ((const float *) b->data)[e], ((const float *) a->data)[e]);
            failures++;
        }
    }
}

static void check(int64_t n_kv, int64_t first, int64_t n, int64_t streams, enum pattern how, enum ggml_type mask_type, int threads) {
    const int64_t head_dim = 64, heads_kv = 3, heads = 9;
    struct ggml_init_params ip = { .mem_size = 256 * 1024 * 1024, .mem_buffer = NULL, .no_alloc = false };
    struct ggml_context * ctx = ggml_init(ip);

    // the caches and the queries, shared by both graphs
    struct ggml_tensor * k_cache = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, head_dim, heads_kv, n_kv, streams);
    struct ggml_tensor * v_cache = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, n_kv, head_dim, heads_kv, streams);
    struct ggml_tensor * q_store = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, head_dim, heads, n, streams);
    for (int64_t i = 0; i < ggml_nelements(k_cache); ++i) {
        ((ggml_fp16_t *) k_cache->data)[i] = ggml_fp32_to_fp16(rnd() * 4.0f);
    }
    for (int64_t i = 0; i < ggml_nelements(v_cache); ++i) {
        ((ggml_fp16_t *) v_cache->data)[i] = ggml_fp32_to_fp16(rnd() * 4.0f);
    }
    for (int64_t i = 0; i < ggml_nelements(q_store); ++i) {
        ((float *) q_store->data)[i] = rnd();
    }
    // the mask, as llama.cpp fills it: 0 where visible, -INFINITY elsewhere, its rows padded to 64
    const int64_t rows = (n + 63) / 64 * 64;
    struct ggml_tensor * mask32 = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, n_kv, rows, 1, streams);
    struct ggml_tensor * mask = mask_type == GGML_TYPE_F32 ? mask32 : ggml_new_tensor_4d(ctx, GGML_TYPE_F16, n_kv, rows, 1, streams);
    for (int64_t s = 0; s < streams; ++s) {
        for (int64_t t = 0; t < rows; ++t) {
            for (int64_t j = 0; j < n_kv; ++j) {
                const float v = t < n && visible(how, first + s * 7, t, j) ? 0.0f : -INFINITY;
                const int64_t at = j + t * n_kv + s * n_kv * rows;
                ((float *) mask32->data)[at] = v;
                if (mask != mask32) {
                    ((ggml_fp16_t *) mask->data)[at] = ggml_fp32_to_fp16(v);
                }
            }
        }
    }

    struct ggml_tensor * k = ggml_permute(ctx, k_cache, 0, 2, 1, 3);  // [head_dim, n_kv, heads_kv, streams]
    struct ggml_tensor * q = ggml_permute(ctx, q_store, 0, 2, 1, 3);  // [head_dim, n, heads, streams]
    struct ggml_tensor * out[2][3];
    for (int skip = 0; skip < 2; ++skip) {
        struct ggml_tensor * kq = ggml_mul_mat(ctx, k, q);
        ggml_prec_set_acc(kq, GGML_PREC_F32);
        if (skip) {
            ggml_mul_mat_set_mask(kq, mask, GGML_MUL_MAT_MASK_ROWS);
        }
        // the reference adds the mask itself, so its soft_max sees no mask and runs whole rows
        struct ggml_tensor * mask_rows = ggml_view_4d(ctx, mask32, n_kv, n, 1, streams, mask32->nb[1], mask32->nb[2], mask32->nb[3], 0);
        struct ggml_tensor * sm = skip ? ggml_soft_max_ext(ctx, kq, mask, 0.125f, 0.0f)
                                       : ggml_soft_max_ext(ctx, ggml_add(ctx, kq, mask_rows), NULL, 0.125f, 0.0f);
        struct ggml_tensor * kqv = ggml_mul_mat(ctx, v_cache, sm);
        if (skip) {
            ggml_mul_mat_set_mask(kqv, mask, GGML_MUL_MAT_MASK_CHAIN);
        }
        struct ggml_cgraph * gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, kqv);
        ggml_graph_compute_with_ctx(ctx, gf, threads);
        out[skip][0] = kq;
        out[skip][1] = sm;
        out[skip][2] = kqv;
    }
    char label[160];
    snprintf(label, sizeof(label), "n_kv=%lld first=%lld n=%lld streams=%lld pattern=%d mask=%s threads=%d", (long long) n_kv,
             (long long) first, (long long) n, (long long) streams, (int) how, ggml_type_name(mask_type), threads);
    compare("kq", out[0][0], out[1][0], mask32, n_kv, n, label);
    compare("softmax", out[0][1], out[1][1], NULL, n_kv, n, label);
    compare("kqv", out[0][2], out[1][2], NULL, n_kv, n, label);
    ggml_free(ctx);
}

int main(int argc, char ** argv) {
    const int max_threads = argc > 1 ? atoi(argv[1]) : 3;
    int cases = 0;
    // (n_kv, first position, queries): a first prefill chunk, a later one, one token, a verify batch
    static const int64_t shapes[][3] = {
        { 512, 0, 300 }, { 1024, 512, 358 }, { 256, 200, 1 }, { 512, 300, 8 }, { 768, 0, 600 }, { 256, 17, 40 },
    };
    const enum pattern patterns[] = { CAUSAL, TWO_SEQUENCES, WINDOW, NOTHING_MASKED };
    for (int threads = 1; threads <= max_threads; ++threads) {
        for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s) {
            for (size_t p = 0; p < sizeof(patterns) / sizeof(patterns[0]); ++p) {
                const enum ggml_type mask_type = (s + p) % 2 ? GGML_TYPE_F16 : GGML_TYPE_F32;
                check(shapes[s][0], shapes[s][1], shapes[s][2], 1, patterns[p], mask_type, threads);
                cases++;
            }
        }
        check(512, 100, 64, 2, CAUSAL, GGML_TYPE_F32, threads);  // two KV streams (kv_unified off)
        check(256, 0, 9, 2, TWO_SEQUENCES, GGML_TYPE_F16, threads);
        cases += 2;
    }
    if (failures) {
        printf("attention mask skip: FAILED (%d differences)\n", failures);
        return 1;
    }
    printf("attention mask skip: %d cases, every value read bit-identical with and without the skips\n", cases);
    return 0;
}
