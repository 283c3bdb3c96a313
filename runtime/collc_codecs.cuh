/* collc codecs: CUDA kernels, bit-exact with the numpy references in collc/codecs/.
 *
 * Header-only.  Generated CUDA code includes it; CuPy's RawModule compiles it
 * through NVRTC; a plain C++ compiler sees only the host/device functions
 * (tests/cuda/codecs_host.cpp runs them on the CPU against numpy).
 *
 * Structure: every kernel is a thin wrapper that computes its thread index and
 * calls a COLLC_HD "..._one" function doing all the work for one item (a block,
 * a group, an element).  The same functions run on the host in the test
 * harness, so the arithmetic the kernels perform is the arithmetic that is
 * compared with numpy bit for bit.
 *
 * Bit-exactness rules:
 *  - float arithmetic goes through collc_fmul / collc_fadd / collc_fdiv, which are
 *    __fmul_rn / __fadd_rn / __fdiv_rn on the device: IEEE round-to-nearest, never
 *    contracted into an FMA whatever -fmad says, never approximated; the host side
 *    is plain IEEE float arithmetic (compile host code with -ffp-contract=off);
 *  - floorf, rintf, fabsf and int <-> float conversions are exact on both sides;
 *  - do not build with --use_fast_math or -ftz=true: fwq handles subnormal inputs
 *    (nvcc's and NVRTC's defaults are -ftz=false, IEEE division);
 *  - everything else is integer arithmetic.
 *
 * Launching (all pointers are device pointers; payload buffers 4-byte aligned):
 *  - "item" kernels take one thread per item, any 1-D launch covering the items:
 *      ebq: nb + 1 items for *_sizes (item nb writes the trailing zero), nb for
 *           *_body, nb = ceil(n / 32) blocks;
 *      fwq: ceil(n / block) blocks;  hq, fp16, bf16: n elements;
 *      lossless: G + 1 groups for *_sizes, G for the others, G = ceil(n / 32).
 *  - variable-size payloads (ebq, lossless) are written in two passes: *_sizes
 *    stores each item's body size in bytes into sizes[0..items] (sizes[items] = 0),
 *    an exclusive scan turns that array into offsets in place (offsets[items] is
 *    the total body size), then *_body writes at those offsets.  The scan:
 *      tiles = ceil((items + 1) / COLLC_SCAN_TILE)
 *      collc_scan_u64_reduce<<<tiles, COLLC_SCAN_THREADS>>>(sizes, items + 1, partials)
 *      collc_scan_u64_spine<<<1, COLLC_SCAN_THREADS>>>(partials, tiles)
 *      collc_scan_u64_apply<<<tiles, COLLC_SCAN_THREADS>>>(sizes, items + 1, partials)
 *    (cupy.cumsum gives the same offsets).
 *  - refusals: kernels that can refuse a value take `unsigned long long* bad`,
 *    which the host sets to COLLC_NONE (all ones) before the launch; afterwards it
 *    holds the smallest refused index, as numpy's CodecValueError.index.
 *  - lossless decode writes deltas; an inclusive uint32 scan (collc_scan_u32_*,
 *    wrapping) turns them into the words.
 *
 * Defining COLLC_CODECS_NO_KERNELS leaves out the per-codec kernels (the scans
 * stay): the cuda executor runs the same functions through its own job kernel
 * (collc_cuda_codec.cuh).
 */
#ifndef COLLC_CODECS_CUH
#define COLLC_CODECS_CUH

#if !defined(__CUDACC_RTC__)
#include <math.h>
#include <string.h>
#endif

typedef unsigned char collc_u8;
typedef unsigned short collc_u16;
typedef unsigned int collc_u32;
typedef int collc_i32;
typedef long long collc_i64;
typedef unsigned long long collc_u64;

#if defined(__CUDACC__)
#define COLLC_HD __host__ __device__ inline
#else
#define COLLC_HD inline
#endif

#define COLLC_NONE 0xFFFFFFFFFFFFFFFFull
#define COLLC_GRID_QMAX 16383
#define COLLC_EBQ_BLOCK 32
#define COLLC_EBQ_MAX_BITS 14

/* ------------------------------------------------------------------ scalar helpers */

COLLC_HD float collc_fmul(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

COLLC_HD float collc_fadd(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

COLLC_HD float collc_fdiv(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

COLLC_HD collc_u32 collc_f2u(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    collc_u32 u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

COLLC_HD float collc_u2f(collc_u32 u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

COLLC_HD int collc_popc(collc_u32 x) {
#if defined(__CUDA_ARCH__)
    return __popc(x);
#else
    return __builtin_popcount(x);
#endif
}

/* Bits needed for m (0 for 0). */
COLLC_HD int collc_bitwidth(collc_u32 m) {
#if defined(__CUDA_ARCH__)
    return 32 - __clz(m);
#else
    return m ? 32 - __builtin_clz(m) : 0;
#endif
}

COLLC_HD collc_u64 collc_align4(collc_u64 nbytes) { return (nbytes + 3) & ~3ull; }

COLLC_HD collc_u64 collc_div_up(collc_u64 a, collc_u64 b) { return (a + b - 1) / b; }

/* 32x32 bit transpose in place: afterwards a[b] bit j is the old a[j] bit b. */
COLLC_HD void collc_transpose32(collc_u32 a[32]) {
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
COLLC_HD int collc_grid_quantize(float x, float inv2eb, collc_i32* q) {
    float f = floorf(collc_fadd(collc_fmul(x, inv2eb), 0.5f));
    if (!(fabsf(f) <= (float)COLLC_GRID_QMAX)) {
        *q = 0;
        return 1;
    }
    *q = (collc_i32)f;
    return 0;
}

COLLC_HD float collc_grid_dequantize(collc_i32 q, float step) { return collc_fmul((float)q, step); }

/* ------------------------------------------------------------------ ebq: one 32-value block */

COLLC_HD collc_u64 collc_ebq_body_bytes(int bits) { return bits ? 4ull * (collc_u64)(1 + bits) : 0ull; }

/* Quantize a block; returns its bit width, or -1 with *bad_lane set. */
COLLC_HD int collc_ebq_quantize_block(const float v[32], float inv2eb, collc_i32 q[32], int* bad_lane) {
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
COLLC_HD void collc_ebq_pack(const collc_i32 q[32], int bits, collc_u32* out) {
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

COLLC_HD void collc_ebq_unpack(const collc_u32* in, int bits, collc_i32 q[32]) {
    collc_u32 planes[32];
    for (int b = 0; b < 32; ++b) planes[b] = b < bits ? in[1 + b] : 0u;
    collc_transpose32(planes);
    collc_u32 sign = bits ? in[0] : 0u;
    for (int j = 0; j < 32; ++j) q[j] = (sign >> j) & 1u ? -(collc_i32)planes[j] : (collc_i32)planes[j];
}

COLLC_HD void collc_load_block32(const float* x, collc_u64 n, collc_u64 b, float v[32]) {
    for (int j = 0; j < 32; ++j) {
        collc_u64 i = b * 32 + j;
        v[j] = i < n ? x[i] : 0.0f;
    }
}

/* Values of block b of the fused reduce: decode(in) + local, in float32. */
COLLC_HD void collc_ebq_load_reduce(const collc_u8* in, const collc_u64* in_offsets, const float* local, collc_u64 n,
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
COLLC_HD collc_u64 collc_ebq_sizes_from_values(const float v[32], float inv2eb, collc_u8* payload, collc_u64* sizes,
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
COLLC_HD void collc_ebq_sizes_tail(collc_u64 n, collc_u8* payload, collc_u64* sizes) {
    collc_u64 nb = collc_div_up(n, 32);
    for (collc_u64 i = nb; i < collc_align4(nb); ++i) payload[i] = 0;
    sizes[nb] = 0;
}

COLLC_HD void collc_ebq_body_from_values(const float v[32], collc_u64 n, float inv2eb, collc_u8* payload,
                                         const collc_u64* offsets, collc_u64 b) {
    collc_i32 q[32];
    int lane = 0;
    int bits = collc_ebq_quantize_block(v, inv2eb, q, &lane);
    if (bits > 0) {
        collc_u64 nb = collc_div_up(n, 32);
        collc_ebq_pack(q, bits, (collc_u32*)(payload + collc_align4(nb) + offsets[b]));
    }
}

COLLC_HD collc_u64 collc_ebq_encode_sizes_one(const float* x, collc_u64 n, float inv2eb, collc_u8* payload,
                                              collc_u64* sizes, collc_u64 b) {
    if (b == collc_div_up(n, 32)) {
        collc_ebq_sizes_tail(n, payload, sizes);
        return COLLC_NONE;
    }
    float v[32];
    collc_load_block32(x, n, b, v);
    return collc_ebq_sizes_from_values(v, inv2eb, payload, sizes, b);
}

COLLC_HD void collc_ebq_encode_body_one(const float* x, collc_u64 n, float inv2eb, collc_u8* payload,
                                        const collc_u64* offsets, collc_u64 b) {
    float v[32];
    collc_load_block32(x, n, b, v);
    collc_ebq_body_from_values(v, n, inv2eb, payload, offsets, b);
}

COLLC_HD void collc_ebq_decode_sizes_one(const collc_u8* payload, collc_u64 n, collc_u64* sizes, collc_u64 b) {
    collc_u64 nb = collc_div_up(n, 32);
    sizes[b] = b < nb ? collc_ebq_body_bytes(payload[b]) : 0ull;
}

/* Stores decoded values: the `put` of the *_decode_block functions below. */
struct collc_store_f32 {
    float* out;
    COLLC_HD void operator()(collc_u64 i, float v) const { out[i] = v; }
};

/* Decodes block b, handing each value to put(index, value). */
template <typename Put>
COLLC_HD void collc_ebq_decode_block(const collc_u8* payload, collc_u64 n, float step, const collc_u64* offsets,
                                     collc_u64 b, Put put) {
    collc_u64 nb = collc_div_up(n, 32);
    collc_i32 q[32];
    collc_ebq_unpack((const collc_u32*)(payload + collc_align4(nb) + offsets[b]), payload[b], q);
    for (int j = 0; j < 32; ++j) {
        collc_u64 i = b * 32 + j;
        if (i < n) put(i, collc_grid_dequantize(q[j], step));
    }
}

COLLC_HD void collc_ebq_decode_body_one(const collc_u8* payload, collc_u64 n, float step, const collc_u64* offsets,
                                        float* out, collc_u64 b) {
    collc_ebq_decode_block(payload, n, step, offsets, b, collc_store_f32{out});
}

COLLC_HD collc_u64 collc_ebq_reduce_sizes_one(const collc_u8* in, const collc_u64* in_offsets, const float* local,
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
COLLC_HD void collc_ebq_reduce_body_one(const collc_u8* in, const collc_u64* in_offsets, const float* local,
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

COLLC_HD collc_u64 collc_fwq_block_bytes(int bits, int block) { return 4ull + (collc_u64)block * bits / 8; }

/* Returns COLLC_NONE or the index of the block's first refused value: its first NaN or Inf, or, when
 * the block's largest decoded value levels * scale would reach 2**127, its first maximum. */
COLLC_HD collc_u64 collc_fwq_encode_one(const float* x, collc_u64 n, int bits, int block, collc_u8* out,
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

/* Decodes block b, handing each value to put(index, value). */
template <typename Put>
COLLC_HD void collc_fwq_decode_block(const collc_u8* in, collc_u64 n, int bits, int block, collc_u64 b, Put put) {
    const collc_u64 base = b * (collc_u64)block;
    const collc_u8* blk = in + b * collc_fwq_block_bytes(bits, block);
    const float scale = collc_u2f(*(const collc_u32*)blk);
    const collc_u32* words = (const collc_u32*)(blk + 4);
    const collc_u32 fmask = (1u << bits) - 1u;
    collc_u64 acc = 0;
    int nacc = 0;
    for (int j = 0; j < block; ++j) {
        if (nacc < bits) {
            acc |= (collc_u64)(*words++) << nacc;
            nacc += 32;
        }
        collc_i32 f = (collc_i32)((collc_u32)acc & fmask);
        acc >>= bits;
        nacc -= bits;
        collc_i32 q = f - ((f >> (bits - 1)) << bits);
        if (base + j < n) put(base + j, collc_fmul((float)q, scale));
    }
}

COLLC_HD void collc_fwq_decode_one(const collc_u8* in, collc_u64 n, int bits, int block, float* out, collc_u64 b) {
    collc_fwq_decode_block(in, n, bits, block, b, collc_store_f32{out});
}

/* ------------------------------------------------------------------ hq: one element */

COLLC_HD collc_u64 collc_hq_encode_one(const float* x, float inv2eb, collc_i32* out, collc_u64 i) {
    return collc_grid_quantize(x[i], inv2eb, &out[i]) ? i : COLLC_NONE;
}

COLLC_HD void collc_hq_decode_one(const collc_i32* in, float step, float* out, collc_u64 i) {
    out[i] = collc_grid_dequantize(in[i], step);
}

/* Adds two payloads; returns i when the sum leaves int32 (out[i] is then 0). */
COLLC_HD collc_u64 collc_hq_add_one(const collc_i32* a, const collc_i32* b, collc_i32* out, collc_u64 i) {
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
COLLC_HD collc_u16 collc_f32_to_f16(collc_u32 u, int* overflow) {
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

COLLC_HD float collc_f16_to_f32(collc_u16 h) {
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

COLLC_HD collc_u16 collc_f32_to_bf16(collc_u32 u, int* overflow) {
    collc_u32 a = u & 0x7FFFFFFFu;
    *overflow = a >= 0x7F7F8000u && a < 0x7F800000u;
    if (a > 0x7F800000u) return (collc_u16)(((u >> 16) & 0x8000u) | 0x7FC0u);
    return (collc_u16)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

COLLC_HD float collc_bf16_to_f32(collc_u16 h) { return collc_u2f((collc_u32)h << 16); }

COLLC_HD collc_u64 collc_fp16_encode_one(const float* x, collc_u16* out, collc_u64 i) {
    int overflow;
    out[i] = collc_f32_to_f16(collc_f2u(x[i]), &overflow);
    return overflow ? i : COLLC_NONE;
}

COLLC_HD void collc_fp16_decode_one(const collc_u16* in, float* out, collc_u64 i) { out[i] = collc_f16_to_f32(in[i]); }

COLLC_HD collc_u64 collc_bf16_encode_one(const float* x, collc_u16* out, collc_u64 i) {
    int overflow;
    out[i] = collc_f32_to_bf16(collc_f2u(x[i]), &overflow);
    return overflow ? i : COLLC_NONE;
}

COLLC_HD void collc_bf16_decode_one(const collc_u16* in, float* out, collc_u64 i) { out[i] = collc_bf16_to_f32(in[i]); }

/* ------------------------------------------------------------------ lossless: one group of 32 words */

/* Deltas of group g, bit-transposed, then plane deltas; returns the bitmap of non-zero planes. */
COLLC_HD collc_u32 collc_lossless_planes(const collc_u32* w, collc_u64 nwords, collc_u64 g, collc_u32 planes[32]) {
    for (int j = 0; j < 32; ++j) {
        collc_u64 i = g * 32 + j;
        planes[j] = i < nwords ? w[i] - (i > 0 ? w[i - 1] : 0u) : 0u;
    }
    collc_transpose32(planes);
    for (int b = 31; b > 0; --b) planes[b] -= planes[b - 1];
    collc_u32 bitmap = 0;
    for (int b = 0; b < 32; ++b) bitmap |= (collc_u32)(planes[b] != 0) << b;
    return bitmap;
}

COLLC_HD void collc_lossless_encode_sizes_one(const collc_u32* w, collc_u64 nwords, collc_u8* payload,
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

COLLC_HD void collc_lossless_encode_body_one(const collc_u32* w, collc_u64 nwords, collc_u8* payload,
                                             const collc_u64* offsets, collc_u64 g) {
    collc_u32 planes[32];
    collc_lossless_planes(w, nwords, g, planes);
    collc_u32* out = (collc_u32*)(payload + 4 * collc_div_up(nwords, 32) + offsets[g]);
    int k = 0;
    for (int b = 0; b < 32; ++b)
        if (planes[b]) out[k++] = planes[b];
}

COLLC_HD void collc_lossless_decode_sizes_one(const collc_u8* payload, collc_u64 nwords, collc_u64* sizes,
                                              collc_u64 g) {
    collc_u64 groups = collc_div_up(nwords, 32);
    sizes[g] = g < groups ? 4ull * (collc_u64)collc_popc(((const collc_u32*)payload)[g]) : 0ull;
}

/* Writes the deltas of group g; an inclusive scan of `deltas` then gives the words. */
COLLC_HD void collc_lossless_decode_deltas_one(const collc_u8* payload, collc_u64 nwords, const collc_u64* offsets,
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

/* ------------------------------------------------------------------ kernels */

#define COLLC_SCAN_THREADS 256
#define COLLC_SCAN_ITEMS 16
#define COLLC_SCAN_TILE (COLLC_SCAN_THREADS * COLLC_SCAN_ITEMS)

#if defined(__CUDACC__)

__device__ inline collc_u64 collc_thread_index() { return (collc_u64)blockIdx.x * blockDim.x + threadIdx.x; }

__device__ inline void collc_note_bad(collc_u64* bad, collc_u64 index) {
    if (index != COLLC_NONE) atomicMin(bad, index);
}

/* Exclusive scan over the CTA (blockDim.x == COLLC_SCAN_THREADS); *total gets the CTA's sum. */
template <typename T>
__device__ T collc_cta_exclusive_scan(T v, T* total) {
    __shared__ T buf[COLLC_SCAN_THREADS];
    const unsigned t = threadIdx.x;
    buf[t] = v;
    __syncthreads();
    for (unsigned off = 1; off < COLLC_SCAN_THREADS; off <<= 1) {
        T add = t >= off ? buf[t - off] : (T)0;
        __syncthreads();
        buf[t] += add;
        __syncthreads();
    }
    T inclusive = buf[t];
    *total = buf[COLLC_SCAN_THREADS - 1];
    __syncthreads();
    return inclusive - v;
}

template <typename T>
__device__ void collc_scan_reduce_tile(const T* data, collc_u64 count, T* partials) {
    const collc_u64 first = (collc_u64)blockIdx.x * COLLC_SCAN_TILE + (collc_u64)threadIdx.x * COLLC_SCAN_ITEMS;
    T s = 0;
    for (int k = 0; k < COLLC_SCAN_ITEMS; ++k)
        if (first + k < count) s += data[first + k];
    T total;
    collc_cta_exclusive_scan<T>(s, &total);
    if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

/* One CTA: exclusive scan of the tile sums, in place. */
template <typename T>
__device__ void collc_scan_spine_tiles(T* partials, collc_u64 ntiles) {
    T carry = 0;
    for (collc_u64 base = 0; base < ntiles; base += COLLC_SCAN_TILE) {
        const collc_u64 first = base + (collc_u64)threadIdx.x * COLLC_SCAN_ITEMS;
        T vals[COLLC_SCAN_ITEMS];
        T s = 0;
        for (int k = 0; k < COLLC_SCAN_ITEMS; ++k) {
            vals[k] = first + k < ntiles ? partials[first + k] : (T)0;
            s += vals[k];
        }
        T total;
        T prefix = collc_cta_exclusive_scan<T>(s, &total) + carry;
        for (int k = 0; k < COLLC_SCAN_ITEMS; ++k) {
            if (first + k < ntiles) partials[first + k] = prefix;
            prefix += vals[k];
        }
        carry += total;
    }
}

template <typename T, bool Inclusive>
__device__ void collc_scan_apply_tile(T* data, collc_u64 count, const T* partials) {
    const collc_u64 first = (collc_u64)blockIdx.x * COLLC_SCAN_TILE + (collc_u64)threadIdx.x * COLLC_SCAN_ITEMS;
    T vals[COLLC_SCAN_ITEMS];
    T s = 0;
    for (int k = 0; k < COLLC_SCAN_ITEMS; ++k) {
        vals[k] = first + k < count ? data[first + k] : (T)0;
        s += vals[k];
    }
    T total;
    T prefix = collc_cta_exclusive_scan<T>(s, &total) + partials[blockIdx.x];
    for (int k = 0; k < COLLC_SCAN_ITEMS; ++k) {
        if (Inclusive) prefix += vals[k];
        if (first + k < count) data[first + k] = prefix;
        if (!Inclusive) prefix += vals[k];
    }
}

extern "C" {

/* Scans (launch with COLLC_SCAN_THREADS threads per CTA; see the top of this file). */
__global__ void collc_scan_u64_reduce(const collc_u64* data, collc_u64 count, collc_u64* partials) {
    collc_scan_reduce_tile<collc_u64>(data, count, partials);
}
__global__ void collc_scan_u64_spine(collc_u64* partials, collc_u64 ntiles) {
    collc_scan_spine_tiles<collc_u64>(partials, ntiles);
}
__global__ void collc_scan_u64_apply(collc_u64* data, collc_u64 count, const collc_u64* partials) {
    collc_scan_apply_tile<collc_u64, false>(data, count, partials);
}
__global__ void collc_scan_u32_reduce(const collc_u32* data, collc_u64 count, collc_u32* partials) {
    collc_scan_reduce_tile<collc_u32>(data, count, partials);
}
__global__ void collc_scan_u32_spine(collc_u32* partials, collc_u64 ntiles) {
    collc_scan_spine_tiles<collc_u32>(partials, ntiles);
}
/* Inclusive, wrapping mod 2**32: lossless deltas -> words. */
__global__ void collc_scan_u32_apply(collc_u32* data, collc_u64 count, const collc_u32* partials) {
    collc_scan_apply_tile<collc_u32, true>(data, count, partials);
}

#if !defined(COLLC_CODECS_NO_KERNELS)
/* ebq */
__global__ void collc_ebq_encode_sizes(const float* x, collc_u64 n, float inv2eb, collc_u8* payload, collc_u64* sizes,
                                       collc_u64* bad) {
    collc_u64 b = collc_thread_index();
    if (b <= collc_div_up(n, 32)) collc_note_bad(bad, collc_ebq_encode_sizes_one(x, n, inv2eb, payload, sizes, b));
}
__global__ void collc_ebq_encode_body(const float* x, collc_u64 n, float inv2eb, collc_u8* payload,
                                      const collc_u64* offsets) {
    collc_u64 b = collc_thread_index();
    if (b < collc_div_up(n, 32)) collc_ebq_encode_body_one(x, n, inv2eb, payload, offsets, b);
}
__global__ void collc_ebq_decode_sizes(const collc_u8* payload, collc_u64 n, collc_u64* sizes) {
    collc_u64 b = collc_thread_index();
    if (b <= collc_div_up(n, 32)) collc_ebq_decode_sizes_one(payload, n, sizes, b);
}
__global__ void collc_ebq_decode_body(const collc_u8* payload, collc_u64 n, float step, const collc_u64* offsets,
                                      float* out) {
    collc_u64 b = collc_thread_index();
    if (b < collc_div_up(n, 32)) collc_ebq_decode_body_one(payload, n, step, offsets, out, b);
}
/* Fused decompress + sum + compress: out = ebq(decode(in) + local).  in_offsets come from
 * collc_ebq_decode_sizes + scan on `in`; out_sizes is scanned between the two launches. */
__global__ void collc_ebq_reduce_sizes(const collc_u8* in, const collc_u64* in_offsets, const float* local,
                                       collc_u64 n, float step, float inv2eb, collc_u8* out, collc_u64* out_sizes,
                                       collc_u64* bad) {
    collc_u64 b = collc_thread_index();
    if (b <= collc_div_up(n, 32))
        collc_note_bad(bad, collc_ebq_reduce_sizes_one(in, in_offsets, local, n, step, inv2eb, out, out_sizes, b));
}
__global__ void collc_ebq_reduce_body(const collc_u8* in, const collc_u64* in_offsets, const float* local,
                                      collc_u64 n, float step, float inv2eb, collc_u8* out,
                                      const collc_u64* out_offsets, float* sum_out) {
    collc_u64 b = collc_thread_index();
    if (b < collc_div_up(n, 32))
        collc_ebq_reduce_body_one(in, in_offsets, local, n, step, inv2eb, out, out_offsets, sum_out, b);
}

/* fwq */
__global__ void collc_fwq_encode(const float* x, collc_u64 n, int bits, int block, collc_u8* out, collc_u64* bad) {
    collc_u64 b = collc_thread_index();
    if (b < collc_div_up(n, (collc_u64)block)) collc_note_bad(bad, collc_fwq_encode_one(x, n, bits, block, out, b));
}
__global__ void collc_fwq_decode(const collc_u8* in, collc_u64 n, int bits, int block, float* out) {
    collc_u64 b = collc_thread_index();
    if (b < collc_div_up(n, (collc_u64)block)) collc_fwq_decode_one(in, n, bits, block, out, b);
}

/* hq */
__global__ void collc_hq_encode(const float* x, collc_u64 n, float inv2eb, collc_i32* out, collc_u64* bad) {
    collc_u64 i = collc_thread_index();
    if (i < n) collc_note_bad(bad, collc_hq_encode_one(x, inv2eb, out, i));
}
__global__ void collc_hq_decode(const collc_i32* in, collc_u64 n, float step, float* out) {
    collc_u64 i = collc_thread_index();
    if (i < n) collc_hq_decode_one(in, step, out, i);
}
__global__ void collc_hq_add(const collc_i32* a, const collc_i32* b, collc_i32* out, collc_u64 n, collc_u64* bad) {
    collc_u64 i = collc_thread_index();
    if (i < n) collc_note_bad(bad, collc_hq_add_one(a, b, out, i));
}

/* casts */
__global__ void collc_fp16_encode(const float* x, collc_u64 n, collc_u16* out, collc_u64* bad) {
    collc_u64 i = collc_thread_index();
    if (i < n) collc_note_bad(bad, collc_fp16_encode_one(x, out, i));
}
__global__ void collc_fp16_decode(const collc_u16* in, collc_u64 n, float* out) {
    collc_u64 i = collc_thread_index();
    if (i < n) collc_fp16_decode_one(in, out, i);
}
__global__ void collc_bf16_encode(const float* x, collc_u64 n, collc_u16* out, collc_u64* bad) {
    collc_u64 i = collc_thread_index();
    if (i < n) collc_note_bad(bad, collc_bf16_encode_one(x, out, i));
}
__global__ void collc_bf16_decode(const collc_u16* in, collc_u64 n, float* out) {
    collc_u64 i = collc_thread_index();
    if (i < n) collc_bf16_decode_one(in, out, i);
}

/* lossless (float32: one word per value) */
__global__ void collc_lossless_encode_sizes(const collc_u32* w, collc_u64 nwords, collc_u8* payload,
                                            collc_u64* sizes) {
    collc_u64 g = collc_thread_index();
    if (g <= collc_div_up(nwords, 32)) collc_lossless_encode_sizes_one(w, nwords, payload, sizes, g);
}
__global__ void collc_lossless_encode_body(const collc_u32* w, collc_u64 nwords, collc_u8* payload,
                                           const collc_u64* offsets) {
    collc_u64 g = collc_thread_index();
    if (g < collc_div_up(nwords, 32)) collc_lossless_encode_body_one(w, nwords, payload, offsets, g);
}
__global__ void collc_lossless_decode_sizes(const collc_u8* payload, collc_u64 nwords, collc_u64* sizes) {
    collc_u64 g = collc_thread_index();
    if (g <= collc_div_up(nwords, 32)) collc_lossless_decode_sizes_one(payload, nwords, sizes, g);
}
__global__ void collc_lossless_decode_deltas(const collc_u8* payload, collc_u64 nwords, const collc_u64* offsets,
                                             collc_u32* deltas) {
    collc_u64 g = collc_thread_index();
    if (g < collc_div_up(nwords, 32)) collc_lossless_decode_deltas_one(payload, nwords, offsets, deltas, g);
}

#endif /* COLLC_CODECS_NO_KERNELS */

} /* extern "C" */

#endif /* __CUDACC__ */
#endif /* COLLC_CODECS_CUH */
