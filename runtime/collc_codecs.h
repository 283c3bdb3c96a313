/* collc_codecs.h: the codecs' per-item functions, bit-exact with the numpy references in collc/codecs/.
 *
 * Plain C99 that also compiles as C++, as CUDA (host and device) and under
 * NVRTC.  runtime/collc_codecs.cuh builds its kernels on these functions; the
 * mpi-c runtime (collc_zcodec.h) runs them on the CPU, whole payload at a time.
 * One function does the work for one item: a 32-value ebq block, a fwq block, a
 * 32-word lossless group, one element of hq and the casts.  The payload layouts
 * and the rules that keep every compiler's arithmetic the same are in
 * docs/codecs.md: float operations go through collc_fmul / collc_fadd /
 * collc_fdiv (IEEE round to nearest; on the device never contracted into an FMA),
 * floorf, rintf and fabsf are exact, the rest is integer arithmetic.  Host code
 * must be compiled with -ffp-contract=off (no FMA contraction) and without
 * -ffast-math; payloads are 4-byte aligned, little-endian.
 */
#ifndef COLLC_CODECS_H
#define COLLC_CODECS_H

#if !defined(__CUDACC_RTC__)
#include <math.h>
#include <string.h>
#endif

#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "collc's codec payloads are little-endian: this host is not"
#endif

typedef unsigned char collc_u8;
typedef unsigned short collc_u16;
typedef unsigned int collc_u32;
typedef int collc_i32;
typedef long long collc_i64;
typedef unsigned long long collc_u64;

/* How the shared functions are declared: host and device functions under CUDA, inline functions in C++,
 * and static inline in C (each translation unit its own copy). */
#if defined(__CUDACC__)
#define COLLC_CFN __host__ __device__ inline
#elif defined(__cplusplus)
#define COLLC_CFN inline
#else
#define COLLC_CFN static inline
#endif

#define COLLC_NONE 0xFFFFFFFFFFFFFFFFull
#define COLLC_GRID_QMAX 16383
#define COLLC_EBQ_BLOCK 32
#define COLLC_EBQ_MAX_BITS 14

/* ------------------------------------------------------------------ scalar helpers */

COLLC_CFN float collc_fmul(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

COLLC_CFN float collc_fadd(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

COLLC_CFN float collc_fdiv(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

COLLC_CFN collc_u32 collc_f2u(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    collc_u32 u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

COLLC_CFN float collc_u2f(collc_u32 u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

COLLC_CFN int collc_popc(collc_u32 x) {
#if defined(__CUDA_ARCH__)
    return __popc(x);
#else
    return __builtin_popcount(x);
#endif
}

/* Bits needed for m (0 for 0). */
COLLC_CFN int collc_bitwidth(collc_u32 m) {
#if defined(__CUDA_ARCH__)
    return 32 - __clz(m);
#else
    return m ? 32 - __builtin_clz(m) : 0;
#endif
}

COLLC_CFN collc_u64 collc_align4(collc_u64 nbytes) { return (nbytes + 3) & ~3ull; }

COLLC_CFN collc_u64 collc_div_up(collc_u64 a, collc_u64 b) { return (a + b - 1) / b; }

/* 32x32 bit transpose in place: afterwards a[b] bit j is the old a[j] bit b. */
COLLC_CFN void collc_transpose32(collc_u32 a[32]) {
    collc_u32 m = 0x0000FFFFu;
    for (int j = 16; j != 0; j >>= 1, m ^= m << j) {
        for (int k = 0; k < 32; k = (k + j + 1) & ~j) {
            collc_u32 t = ((a[k] >> j) ^ a[k + j]) & m;
            a[k + j] ^= t;
            a[k] ^= t << j;
        }
    }
}

/* ------------------------------------------------------------------ the shared grid (ebq, hq) */

/* q = floor(x * inv2eb + 0.5) in float32.  Returns 0, or 1 when x is NaN, Inf or
 * more than COLLC_GRID_QMAX steps from 0 (refused). */
COLLC_CFN int collc_grid_quantize(float x, float inv2eb, collc_i32* q) {
    float f = floorf(collc_fadd(collc_fmul(x, inv2eb), 0.5f));
    if (!(fabsf(f) <= (float)COLLC_GRID_QMAX)) {
        *q = 0;
        return 1;
    }
    *q = (collc_i32)f;
    return 0;
}

COLLC_CFN float collc_grid_dequantize(collc_i32 q, float step) { return collc_fmul((float)q, step); }

/* ------------------------------------------------------------------ ebq: one 32-value block */

COLLC_CFN collc_u64 collc_ebq_body_bytes(int bits) { return bits ? 4ull * (collc_u64)(1 + bits) : 0ull; }

/* Quantize a block; returns its bit width, or -1 with *bad_lane set. */
COLLC_CFN int collc_ebq_quantize_block(const float v[32], float inv2eb, collc_i32 q[32], int* bad_lane) {
    collc_u32 maxmag = 0;
    for (int j = 0; j < 32; ++j) {
        if (collc_grid_quantize(v[j], inv2eb, &q[j])) {
            *bad_lane = j;
            return -1;
        }
        collc_u32 m = (collc_u32)(q[j] < 0 ? -q[j] : q[j]);
        maxmag = m > maxmag ? m : maxmag;
    }
    return collc_bitwidth(maxmag);
}

/* Body of a block of width bits > 0: the sign bitmap, then bit-planes 0 .. bits-1. */
COLLC_CFN void collc_ebq_pack(const collc_i32 q[32], int bits, collc_u32* out) {
    collc_u32 planes[32];
    collc_u32 sign = 0;
    for (int j = 0; j < 32; ++j) {
        planes[j] = (collc_u32)(q[j] < 0 ? -q[j] : q[j]);
        sign |= (collc_u32)(q[j] < 0) << j;
    }
    collc_transpose32(planes);
    out[0] = sign;
    for (int b = 0; b < bits; ++b) out[1 + b] = planes[b];
}

COLLC_CFN void collc_ebq_unpack(const collc_u32* in, int bits, collc_i32 q[32]) {
    collc_u32 planes[32];
    for (int b = 0; b < 32; ++b) planes[b] = b < bits ? in[1 + b] : 0u;
    collc_transpose32(planes);
    collc_u32 sign = bits ? in[0] : 0u;
    for (int j = 0; j < 32; ++j) q[j] = (sign >> j) & 1u ? -(collc_i32)planes[j] : (collc_i32)planes[j];
}

COLLC_CFN void collc_load_block32(const float* x, collc_u64 n, collc_u64 b, float v[32]) {
    for (int j = 0; j < 32; ++j) {
        collc_u64 i = b * 32 + j;
        v[j] = i < n ? x[i] : 0.0f;
    }
}

/* Values of block b of the fused reduce: decode(in) + local, in float32. */
COLLC_CFN void collc_ebq_load_reduce(const collc_u8* in, const collc_u64* in_offsets, const float* local, collc_u64 n,
                                    float step, collc_u64 b, float v[32]) {
    collc_u64 nb = collc_div_up(n, 32);
    int bits = in[b];
    collc_i32 q[32];
    collc_ebq_unpack((const collc_u32*)(in + collc_align4(nb) + in_offsets[b]), bits, q);
    for (int j = 0; j < 32; ++j) {
        collc_u64 i = b * 32 + j;
        v[j] = i < n ? collc_fadd(collc_grid_dequantize(q[j], step), local[i]) : 0.0f;
    }
}

/* Pass 1 for block b <= nb of values v: width into the header, body size into sizes[b].
 * Returns COLLC_NONE or the index of the block's first refused value. */
COLLC_CFN collc_u64 collc_ebq_sizes_from_values(const float v[32], float inv2eb, collc_u8* payload, collc_u64* sizes,
                                               collc_u64 b) {
    collc_i32 q[32];
    int lane = 0;
    int bits = collc_ebq_quantize_block(v, inv2eb, q, &lane);
    if (bits < 0) {
        payload[b] = 0;
        sizes[b] = 0;
        return b * 32 + (collc_u64)lane;
    }
    payload[b] = (collc_u8)bits;
    sizes[b] = collc_ebq_body_bytes(bits);
    return COLLC_NONE;
}

/* Item nb of a sizes pass: the header's zero padding and the scan's trailing zero. */
COLLC_CFN void collc_ebq_sizes_tail(collc_u64 n, collc_u8* payload, collc_u64* sizes) {
    collc_u64 nb = collc_div_up(n, 32);
    for (collc_u64 i = nb; i < collc_align4(nb); ++i) payload[i] = 0;
    sizes[nb] = 0;
}

COLLC_CFN void collc_ebq_body_from_values(const float v[32], collc_u64 n, float inv2eb, collc_u8* payload,
                                         const collc_u64* offsets, collc_u64 b) {
    collc_i32 q[32];
    int lane = 0;
    int bits = collc_ebq_quantize_block(v, inv2eb, q, &lane);
    if (bits > 0) {
        collc_u64 nb = collc_div_up(n, 32);
        collc_ebq_pack(q, bits, (collc_u32*)(payload + collc_align4(nb) + offsets[b]));
    }
}

COLLC_CFN collc_u64 collc_ebq_encode_sizes_one(const float* x, collc_u64 n, float inv2eb, collc_u8* payload,
                                              collc_u64* sizes, collc_u64 b) {
    if (b == collc_div_up(n, 32)) {
        collc_ebq_sizes_tail(n, payload, sizes);
        return COLLC_NONE;
    }
    float v[32];
    collc_load_block32(x, n, b, v);
    return collc_ebq_sizes_from_values(v, inv2eb, payload, sizes, b);
}

COLLC_CFN void collc_ebq_encode_body_one(const float* x, collc_u64 n, float inv2eb, collc_u8* payload,
                                        const collc_u64* offsets, collc_u64 b) {
    float v[32];
    collc_load_block32(x, n, b, v);
    collc_ebq_body_from_values(v, n, inv2eb, payload, offsets, b);
}

COLLC_CFN void collc_ebq_decode_sizes_one(const collc_u8* payload, collc_u64 n, collc_u64* sizes, collc_u64 b) {
    collc_u64 nb = collc_div_up(n, 32);
    sizes[b] = b < nb ? collc_ebq_body_bytes(payload[b]) : 0ull;
}

COLLC_CFN collc_u64 collc_ebq_reduce_sizes_one(const collc_u8* in, const collc_u64* in_offsets, const float* local,
                                              collc_u64 n, float step, float inv2eb, collc_u8* out,
                                              collc_u64* out_sizes, collc_u64 b) {
    if (b == collc_div_up(n, 32)) {
        collc_ebq_sizes_tail(n, out, out_sizes);
        return COLLC_NONE;
    }
    float v[32];
    collc_ebq_load_reduce(in, in_offsets, local, n, step, b, v);
    return collc_ebq_sizes_from_values(v, inv2eb, out, out_sizes, b);
}

/* sum_out (may be null) receives the float32 sums before re-encoding. */
COLLC_CFN void collc_ebq_reduce_body_one(const collc_u8* in, const collc_u64* in_offsets, const float* local,
                                        collc_u64 n, float step, float inv2eb, collc_u8* out,
                                        const collc_u64* out_offsets, float* sum_out, collc_u64 b) {
    float v[32];
    collc_ebq_load_reduce(in, in_offsets, local, n, step, b, v);
    if (sum_out)
        for (int j = 0; j < 32; ++j)
            if (b * 32 + j < n) sum_out[b * 32 + j] = v[j];
    collc_ebq_body_from_values(v, n, inv2eb, out, out_offsets, b);
}

/* ------------------------------------------------------------------ fwq: one block of `block` values */

COLLC_CFN collc_u64 collc_fwq_block_bytes(int bits, int block) { return 4ull + (collc_u64)block * bits / 8; }

/* Returns COLLC_NONE or the index of the block's first refused value: its first NaN or Inf, or, when
 * the block's largest decoded value levels * scale would reach 2**127, its first maximum. */
COLLC_CFN collc_u64 collc_fwq_encode_one(const float* x, collc_u64 n, int bits, int block, collc_u8* out,
                                        collc_u64 b) {
    const collc_u64 base = b * (collc_u64)block;
    const float limit = collc_u2f(0x7F000000u);   /* 2**127 */
    const float largest = collc_u2f(0x7F7FFFFFu); /* FLT_MAX */
    float amax = 0.0f;
    for (int j = 0; j < block && base + j < n; ++j) {
        float a = fabsf(x[base + j]);
        if (!(a <= largest)) return base + j;
        amax = a > amax ? a : amax;
    }
    const int levels = (1 << (bits - 1)) - 1;
    float s0 = collc_fdiv(amax, (float)levels);
    float scale = 0.0f;
    if (s0 >= collc_u2f(0x00800000u)) { /* 2**-126: rounded up to 25 - bits significant bits */
        collc_u32 mask = (1u << (bits - 1)) - 1u;
        scale = collc_u2f((collc_f2u(s0) + mask) & ~mask);
    }
    if (collc_fmul((float)levels, scale) >= limit) {
        for (int j = 0; j < block && base + j < n; ++j)
            if (fabsf(x[base + j]) == amax) return base + j;
    }
    collc_u8* blk = out + b * collc_fwq_block_bytes(bits, block);
    *(collc_u32*)blk = collc_f2u(scale);
    collc_u32* words = (collc_u32*)(blk + 4);
    const collc_u32 fmask = (1u << bits) - 1u;
    collc_u64 acc = 0;
    int nacc = 0;
    for (int j = 0; j < block; ++j) {
        float v = base + j < n ? x[base + j] : 0.0f;
        collc_i32 q = 0;
        if (scale != 0.0f) {
            float t = rintf(collc_fdiv(v, scale));
            t = t > (float)levels ? (float)levels : t;
            t = t < -(float)levels ? -(float)levels : t;
            q = (collc_i32)t;
        }
        acc |= (collc_u64)((collc_u32)q & fmask) << nacc;
        nacc += bits;
        if (nacc >= 32) {
            *words++ = (collc_u32)acc;
            acc >>= 32;
            nacc -= 32;
        }
    }
    return COLLC_NONE;
}

/* Decodes block b of an ebq payload into out (the plain-C twin of collc_ebq_decode_block in collc_codecs.cuh):
 * `body` is the block's body, `bits` its width from the header. */
COLLC_CFN void collc_ebq_decode_values(const collc_u32* body, int bits, collc_u64 n, float step, collc_u64 b,
                                       float* out) {
    collc_i32 q[32];
    collc_ebq_unpack(body, bits, q);
    for (int j = 0; j < 32; ++j) {
        collc_u64 i = b * 32 + j;
        if (i < n) out[i] = collc_grid_dequantize(q[j], step);
    }
}

/* Reads the fields of block b of a fwq payload one by one: open the block, then collc_fwq_next per element. */
typedef struct {
    const collc_u32* words;
    collc_u64 acc;
    int nacc;
    int bits;
} collc_fwq_reader;

COLLC_CFN collc_fwq_reader collc_fwq_open(const collc_u8* in, int bits, int block, collc_u64 b, float* scale) {
    const collc_u8* blk = in + b * collc_fwq_block_bytes(bits, block);
    *scale = collc_u2f(*(const collc_u32*)blk);
    collc_fwq_reader r = {(const collc_u32*)(blk + 4), 0, 0, bits};
    return r;
}

/* The next field of the block, as the signed level it stores. */
COLLC_CFN collc_i32 collc_fwq_next(collc_fwq_reader* r) {
    const collc_u32 fmask = (1u << r->bits) - 1u;
    if (r->nacc < r->bits) {
        r->acc |= (collc_u64)(*r->words++) << r->nacc;
        r->nacc += 32;
    }
    collc_i32 f = (collc_i32)((collc_u32)r->acc & fmask);
    r->acc >>= r->bits;
    r->nacc -= r->bits;
    return f - ((f >> (r->bits - 1)) << r->bits);
}

/* Decodes block b of a fwq payload into out (collc_fwq_decode_block in collc_codecs.cuh also reduces). */
COLLC_CFN void collc_fwq_decode_values(const collc_u8* in, collc_u64 n, int bits, int block, collc_u64 b, float* out) {
    const collc_u64 base = b * (collc_u64)block;
    float scale;
    collc_fwq_reader r = collc_fwq_open(in, bits, block, b, &scale);
    for (int j = 0; j < block; ++j) {
        collc_i32 q = collc_fwq_next(&r);
        if (base + j < n) out[base + j] = collc_fmul((float)q, scale);
    }
}

/* ------------------------------------------------------------------ hq: one element */

COLLC_CFN collc_u64 collc_hq_encode_one(const float* x, float inv2eb, collc_i32* out, collc_u64 i) {
    return collc_grid_quantize(x[i], inv2eb, &out[i]) ? i : COLLC_NONE;
}

COLLC_CFN void collc_hq_decode_one(const collc_i32* in, float step, float* out, collc_u64 i) {
    out[i] = collc_grid_dequantize(in[i], step);
}

/* Adds two payloads; returns i when the sum leaves int32 (out[i] is then 0). */
COLLC_CFN collc_u64 collc_hq_add_one(const collc_i32* a, const collc_i32* b, collc_i32* out, collc_u64 i) {
    collc_i64 s = (collc_i64)a[i] + (collc_i64)b[i];
    if (s > 2147483647ll || s < -2147483648ll) {
        out[i] = 0;
        return i;
    }
    out[i] = (collc_i32)s;
    return COLLC_NONE;
}

/* ------------------------------------------------------------------ fp16 / bf16 casts */

/* Round to nearest even; NaN -> sign | 0x7e00; *overflow set when a finite value rounds to Inf. */
COLLC_CFN collc_u16 collc_f32_to_f16(collc_u32 u, int* overflow) {
    collc_u32 sign = (u >> 16) & 0x8000u;
    collc_u32 a = u & 0x7FFFFFFFu;
    *overflow = 0;
    if (a > 0x7F800000u) return (collc_u16)(sign | 0x7E00u);
    if (a == 0x7F800000u) return (collc_u16)(sign | 0x7C00u);
    if (a >= 0x477FF000u) {
        *overflow = 1;
        return (collc_u16)(sign | 0x7C00u);
    }
    if (a >= 0x38800000u) return (collc_u16)(sign | (((a - 0x38000000u) + 0xFFFu + ((a >> 13) & 1u)) >> 13));
    if (a <= 0x33000000u) return (collc_u16)sign;
    collc_u32 shift = 126u - (a >> 23);
    collc_u32 mant = (a & 0x7FFFFFu) | 0x800000u;
    collc_u32 r = mant >> shift;
    collc_u32 rem = mant & ((1u << shift) - 1u);
    collc_u32 half = 1u << (shift - 1u);
    r += (rem > half || (rem == half && (r & 1u))) ? 1u : 0u;
    return (collc_u16)(sign | r);
}

COLLC_CFN float collc_f16_to_f32(collc_u16 h) {
    collc_u32 sign = ((collc_u32)h & 0x8000u) << 16;
    collc_u32 e = ((collc_u32)h >> 10) & 0x1Fu;
    collc_u32 m = (collc_u32)h & 0x3FFu;
    if (e == 0x1Fu) return collc_u2f(sign | 0x7F800000u | (m << 13));
    if (e == 0) {
        float small = collc_fmul((float)m, 5.9604644775390625e-08f); /* m * 2**-24, exact */
        return sign ? -small : small;
    }
    return collc_u2f(sign | ((e + 112u) << 23) | (m << 13));
}

COLLC_CFN collc_u16 collc_f32_to_bf16(collc_u32 u, int* overflow) {
    collc_u32 a = u & 0x7FFFFFFFu;
    *overflow = a >= 0x7F7F8000u && a < 0x7F800000u;
    if (a > 0x7F800000u) return (collc_u16)(((u >> 16) & 0x8000u) | 0x7FC0u);
    return (collc_u16)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

COLLC_CFN float collc_bf16_to_f32(collc_u16 h) { return collc_u2f((collc_u32)h << 16); }

COLLC_CFN collc_u64 collc_fp16_encode_one(const float* x, collc_u16* out, collc_u64 i) {
    int overflow;
    out[i] = collc_f32_to_f16(collc_f2u(x[i]), &overflow);
    return overflow ? i : COLLC_NONE;
}

COLLC_CFN void collc_fp16_decode_one(const collc_u16* in, float* out, collc_u64 i) { out[i] = collc_f16_to_f32(in[i]); }

COLLC_CFN collc_u64 collc_bf16_encode_one(const float* x, collc_u16* out, collc_u64 i) {
    int overflow;
    out[i] = collc_f32_to_bf16(collc_f2u(x[i]), &overflow);
    return overflow ? i : COLLC_NONE;
}

COLLC_CFN void collc_bf16_decode_one(const collc_u16* in, float* out, collc_u64 i) { out[i] = collc_bf16_to_f32(in[i]); }

/* ------------------------------------------------------------------ lossless: one group of 32 words */

/* Deltas w[i] - w[i - dim] of group g (dim words per value: 1 for float32, 2 for float64), bit-transposed, then
 * plane deltas; returns the bitmap of non-zero planes. */
COLLC_CFN collc_u32 collc_lossless_planes_dim(const collc_u32* w, collc_u64 nwords, int dim, collc_u64 g,
                                              collc_u32 planes[32]) {
    for (int j = 0; j < 32; ++j) {
        collc_u64 i = g * 32 + j;
        planes[j] = i < nwords ? w[i] - (i >= (collc_u64)dim ? w[i - dim] : 0u) : 0u;
    }
    collc_transpose32(planes);
    for (int b = 31; b > 0; --b) planes[b] -= planes[b - 1];
    collc_u32 bitmap = 0;
    for (int b = 0; b < 32; ++b) bitmap |= (collc_u32)(planes[b] != 0) << b;
    return bitmap;
}

/* collc_lossless_planes_dim for float32 (one word per value). */
COLLC_CFN collc_u32 collc_lossless_planes(const collc_u32* w, collc_u64 nwords, collc_u64 g, collc_u32 planes[32]) {
    return collc_lossless_planes_dim(w, nwords, 1, g, planes);
}

COLLC_CFN void collc_lossless_encode_sizes_one(const collc_u32* w, collc_u64 nwords, collc_u8* payload,
                                              collc_u64* sizes, collc_u64 g) {
    if (g == collc_div_up(nwords, 32)) {
        sizes[g] = 0;
        return;
    }
    collc_u32 planes[32];
    collc_u32 bitmap = collc_lossless_planes(w, nwords, g, planes);
    ((collc_u32*)payload)[g] = bitmap;
    sizes[g] = 4ull * (collc_u64)collc_popc(bitmap);
}

COLLC_CFN void collc_lossless_encode_body_one(const collc_u32* w, collc_u64 nwords, collc_u8* payload,
                                             const collc_u64* offsets, collc_u64 g) {
    collc_u32 planes[32];
    collc_lossless_planes(w, nwords, g, planes);
    collc_u32* out = (collc_u32*)(payload + 4 * collc_div_up(nwords, 32) + offsets[g]);
    int k = 0;
    for (int b = 0; b < 32; ++b)
        if (planes[b]) out[k++] = planes[b];
}

COLLC_CFN void collc_lossless_decode_sizes_one(const collc_u8* payload, collc_u64 nwords, collc_u64* sizes,
                                              collc_u64 g) {
    collc_u64 groups = collc_div_up(nwords, 32);
    sizes[g] = g < groups ? 4ull * (collc_u64)collc_popc(((const collc_u32*)payload)[g]) : 0ull;
}

/* Writes the deltas of group g; an inclusive scan of `deltas` then gives the words. */
COLLC_CFN void collc_lossless_decode_deltas_one(const collc_u8* payload, collc_u64 nwords, const collc_u64* offsets,
                                               collc_u32* deltas, collc_u64 g) {
    collc_u64 groups = collc_div_up(nwords, 32);
    collc_u32 bitmap = ((const collc_u32*)payload)[g];
    const collc_u32* in = (const collc_u32*)(payload + 4 * groups + offsets[g]);
    collc_u32 planes[32];
    int k = 0;
    for (int b = 0; b < 32; ++b) planes[b] = (bitmap >> b) & 1u ? in[k++] : 0u;
    for (int b = 1; b < 32; ++b) planes[b] += planes[b - 1];
    collc_transpose32(planes);
    for (int j = 0; j < 32; ++j)
        if (g * 32 + j < nwords) deltas[g * 32 + j] = planes[j];
}

#endif /* COLLC_CODECS_H */
