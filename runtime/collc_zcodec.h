/* collc_zcodec.h: whole payloads of collc's codecs on the CPU, for the mpi-c runtime.
 *
 * Each function encodes or decodes one payload (one chunk of a schedule) so
 * that the bytes are those of the numpy references in collc/codecs/
 * (tests/test_c_codecs.py compares them on random and edge-case inputs): with
 * the per-item functions of collc_codecs.h, item after item, and for ebq and
 * fwq with the vectorisable block loops below, which compute the same bytes.  The layouts are in
 * docs/codecs.md.  A payload carries no length: the static-size codecs' follows
 * from the element count, ebq's from its width header and lossless' from its
 * bitmaps (collc_zpayload_bytes), so payloads can travel end to end in one
 * message.
 *
 * Values are float32; lossless also encodes float64 natively, as words
 * (collc_zencode_words with two words per value).  The caller rounds float64
 * data to float32 for the lossy codecs (collc_zexec.h).  Payload pointers must
 * be 4-byte aligned.  Zfp has no C codec here: the mpi-c target refuses it.
 */
#ifndef COLLC_ZCODEC_H
#define COLLC_ZCODEC_H

#include <string.h>
#if defined(__SSE2__) && !defined(COLLC_ZCODEC_PORTABLE)
#include <emmintrin.h>
#endif

#include "collc_codecs.h"

enum collc_codec_kind {
    COLLC_CODEC_EBQ = 1,
    COLLC_CODEC_FWQ,
    COLLC_CODEC_HQ,
    COLLC_CODEC_FP16,
    COLLC_CODEC_BF16,
    COLLC_CODEC_LOSSLESS
};

/* A configured codec, as the generated tables give it. */
struct collc_codec {
    enum collc_codec_kind kind;
    float step, inv2eb; /* ebq, hq: the grid constants (collc.codecs.grid.grid_constants) */
    int bits, block;    /* fwq */
    const char *spec;   /* the canonical spec, for messages */
};

/* The most bytes a payload of n values takes (exact for fwq, hq and the casts).  dim: words per value. */
static inline collc_u64 collc_zmax_bytes(const struct collc_codec *c, collc_u64 n, int dim)
{
    collc_u64 nb;
    switch (c->kind) {
    case COLLC_CODEC_EBQ:
        nb = collc_div_up(n, COLLC_EBQ_BLOCK);
        return collc_align4(nb) + nb * 4 * (1 + COLLC_EBQ_MAX_BITS);
    case COLLC_CODEC_FWQ:
        return collc_div_up(n, (collc_u64)c->block) * collc_fwq_block_bytes(c->bits, c->block);
    case COLLC_CODEC_HQ:
        return 4 * n;
    case COLLC_CODEC_FP16:
    case COLLC_CODEC_BF16:
        return 2 * n;
    case COLLC_CODEC_LOSSLESS:
        return 4 * 33 * collc_div_up(n * (collc_u64)dim, 32);
    }
    return 0;
}

/* The size of the payload of n values at `data` (avail bytes there), read from its header for ebq and
 * lossless; COLLC_NONE when avail is too short or the header is corrupt. */
static inline collc_u64 collc_zpayload_bytes(const struct collc_codec *c, const collc_u8 *data, collc_u64 avail,
                                             collc_u64 n, int dim)
{
    collc_u64 size = 0, nb, groups;
    switch (c->kind) {
    case COLLC_CODEC_EBQ:
        nb = collc_div_up(n, COLLC_EBQ_BLOCK);
        size = collc_align4(nb);
        if (avail < size) return COLLC_NONE;
        for (collc_u64 b = 0; b < nb; b++) {
            if (data[b] > COLLC_EBQ_MAX_BITS) return COLLC_NONE;
            size += collc_ebq_body_bytes(data[b]);
        }
        break;
    case COLLC_CODEC_LOSSLESS:
        groups = collc_div_up(n * (collc_u64)dim, 32);
        size = 4 * groups;
        if (avail < size) return COLLC_NONE;
        for (collc_u64 g = 0; g < groups; g++) {
            collc_u32 bitmap;
            memcpy(&bitmap, data + 4 * g, 4);
            size += 4 * (collc_u64)collc_popc(bitmap);
        }
        break;
    default:
        size = collc_zmax_bytes(c, n, dim);
    }
    return size <= avail ? size : COLLC_NONE;
}

/* Lossless payload of nwords 32-bit words, dim words per value; returns its size. */
static inline collc_u64 collc_zencode_words(const collc_u32 *w, collc_u64 nwords, int dim, collc_u8 *out)
{
    const collc_u64 groups = collc_div_up(nwords, 32);
    collc_u32 *bitmaps = (collc_u32 *)out, *body = (collc_u32 *)(out + 4 * groups);
    for (collc_u64 g = 0; g < groups; g++) {
        collc_u32 planes[32];
        collc_u32 bitmap = collc_lossless_planes_dim(w, nwords, dim, g, planes);
        bitmaps[g] = bitmap;
        for (int b = 0; b < 32; b++)
            if (planes[b]) *body++ = planes[b];
    }
    return (collc_u64)((collc_u8 *)body - out);
}

/* The words of a lossless payload (nwords words, dim per value). */
static inline void collc_zdecode_words(const collc_u8 *payload, collc_u64 nwords, int dim, collc_u32 *w)
{
    const collc_u64 groups = collc_div_up(nwords, 32);
    const collc_u32 *bitmaps = (const collc_u32 *)payload, *body = (const collc_u32 *)(payload + 4 * groups);
    for (collc_u64 g = 0; g < groups; g++) {
        collc_u32 planes[32];
        for (int b = 0; b < 32; b++) planes[b] = (bitmaps[g] >> b) & 1u ? *body++ : 0u;
        for (int b = 1; b < 32; b++) planes[b] += planes[b - 1];
        collc_transpose32(planes);
        for (int j = 0; j < 32; j++) {
            collc_u64 i = g * 32 + (collc_u64)j;
            if (i < nwords) w[i] = planes[j] + (i >= (collc_u64)dim ? w[i - dim] : 0u);
        }
    }
}

/* ------------------------------------------------------------------ ebq and fwq, whole payloads on the CPU
 *
 * The per-item functions of collc_codecs.h are written for one GPU thread per block; run item after item on
 * a CPU they branch per element (the grid test, the bit-plane transpose, fwq's field accumulator) and gcc
 * cannot vectorise them.  The functions below compute the same bytes with loops that -O3 vectorises for
 * plain x86-64 (SSE2) and other targets without -march: the per-element work is branch-free arithmetic on
 * 32-value arrays.  The ebq bit-planes are gathered and scattered with SSE2 (movemask, 16-bit lane masks)
 * where the compiler targets it, and otherwise, or with -DCOLLC_ZCODEC_PORTABLE, eight lanes at a time with
 * 64-bit multiplies and a nibble table.  Branches are per block (its width, a refused value) or per
 * bit-plane, never per element.  tests/test_c_codecs.py checks both variants against numpy, every ebq width
 * and fwq bit width included. */

#if defined(__GNUC__) || defined(__clang__)
#define COLLC_RESTRICT __restrict__
#define COLLC_ALWAYS_INLINE __attribute__((always_inline))
#else
#define COLLC_RESTRICT
#define COLLC_ALWAYS_INLINE
#endif

#define COLLC_BYTE_LSB 0x0101010101010101ull /* bit 0 of each byte of a word */

static inline collc_u64 collc_zload64(const void *p)
{
    collc_u64 w;
    memcpy(&w, p, 8);
    return w;
}

/* Bit k of each of the 8 bytes of w, as one byte: bit i is byte i's bit k.  The multiply moves byte i's bit
 * (at 8i) to bit 56 + i; every partial product lands on its own bit, so no carry disturbs the top byte. */
static inline collc_u32 collc_zgather8(collc_u64 w, int k)
{
    return (collc_u32)((((w >> k) & COLLC_BYTE_LSB) * 0x0102040810204080ull) >> 56);
}

/* Bit k (0..7) of 32 bytes, as a 32-bit word: bit j is byte j's bit k.  With SSE2 (every x86-64), movemask
 * collects bit 7 of 16 bytes at once, and a left shift of the 16-bit lanes by 7 - k brings bit k of both
 * bytes of a lane there; elsewhere, eight bytes at a time with collc_zgather8. */
static inline collc_u32 collc_zplane(const collc_u8 bytes[32], int k)
{
#if defined(__SSE2__) && !defined(COLLC_ZCODEC_PORTABLE)
    const __m128i count = _mm_cvtsi32_si128(7 - k);
    const __m128i a = _mm_loadu_si128((const __m128i *)bytes), b = _mm_loadu_si128((const __m128i *)(bytes + 16));
    return (collc_u32)_mm_movemask_epi8(_mm_sll_epi16(a, count)) |
           (collc_u32)_mm_movemask_epi8(_mm_sll_epi16(b, count)) << 16;
#else
    return collc_zgather8(collc_zload64(bytes), k) | collc_zgather8(collc_zload64(bytes + 8), k) << 8 |
           collc_zgather8(collc_zload64(bytes + 16), k) << 16 | collc_zgather8(collc_zload64(bytes + 24), k) << 24;
#endif
}

/* The inverse of collc_zgather8 for bit 0: the 8 bits of x spread to the 8 bytes of a word, bit i to byte i
 * (as 0 or 1), through a table of the 16 nibbles. */
static inline collc_u64 collc_zspread8(collc_u32 x)
{
    static const collc_u32 nibble[16] = {
        0x00000000u, 0x00000001u, 0x00000100u, 0x00000101u, 0x00010000u, 0x00010001u, 0x00010100u, 0x00010101u,
        0x01000000u, 0x01000001u, 0x01000100u, 0x01000101u, 0x01010000u, 0x01010001u, 0x01010100u, 0x01010101u,
    };
    return (collc_u64)nibble[x & 15u] | (collc_u64)nibble[(x >> 4) & 15u] << 32;
}

/* One 32-value ebq block on the grid, branch-free, as collc_grid_quantize computes it: t = v * inv2eb + 0.5
 * in float32, and t is on the grid when -16383 <= t < 16384 (that is |floor(t)| <= 16383, false for NaN),
 * tested on t's bits: below 0x46800000 (16384.0f) for t >= 0, at most 0x467FFC00 (16383.0f) in magnitude for
 * t < 0.  Off-grid lanes become 0; floor(t) is the truncation less one where that rounded up.  Writes |q|
 * as two bytes per lane, lo[j] = bits 0-7 and hi[j] = bits 8-13 with q's sign in bit 7; returns the OR of
 * the |q| (its width is the block's), and in *refused the number of off-grid lanes. */
static inline collc_u32 collc_zebq_quantize(const float *COLLC_RESTRICT v, float inv2eb, collc_u8 *COLLC_RESTRICT lo,
                                            collc_u8 *COLLC_RESTRICT hi, collc_u32 *refused)
{
    collc_u32 mags = 0, off = 0;
    for (int j = 0; j < 32; j++) {
        float t = collc_fadd(collc_fmul(v[j], inv2eb), 0.5f);
        collc_u32 u = collc_f2u(t);
        collc_i32 negative = (collc_i32)u >> 31; /* 0 or -1 */
        collc_i32 on = (collc_i32)(u & 0x7FFFFFFFu) < 0x46800000 - (negative & 0x3FF);
        float s = collc_u2f(u & (0u - (collc_u32)on));
        collc_i32 q = (collc_i32)s;
        q -= (float)q > s;
        collc_u32 m = (collc_u32)(q < 0 ? -q : q);
        lo[j] = (collc_u8)m;
        hi[j] = (collc_u8)((m >> 8) | ((collc_u32)q >> 31 << 7));
        mags |= m;
        off += (collc_u32)on ^ 1u;
    }
    *refused = off;
    return mags;
}

/* An ebq payload of n values into out; its size, or COLLC_NONE with *bad the first refused index. */
static inline collc_u64 collc_zebq_encode(const float *x, collc_u64 n, float inv2eb, collc_u8 *out, collc_u64 *bad)
{
    const collc_u64 nb = collc_div_up(n, 32);
    collc_u64 at = collc_align4(nb);
    for (collc_u64 i = nb; i < at; i++) out[i] = 0;
    for (collc_u64 b = 0; b < nb; b++) {
        float tail[32];
        const float *v = x + 32 * b;
        if (32 * b + 32 > n) { /* the last block, padded with zeros */
            for (int j = 0; j < 32; j++) tail[j] = 32 * b + j < n ? v[j] : 0.0f;
            v = tail;
        }
        collc_u8 lo[32], hi[32];
        collc_u32 refused;
        collc_u32 mags = collc_zebq_quantize(v, inv2eb, lo, hi, &refused);
        if (refused) { /* the first off-grid lane, as the per-item quantizer finds it */
            for (int j = 0; j < 32; j++) {
                collc_i32 q;
                if (collc_grid_quantize(v[j], inv2eb, &q)) {
                    *bad = 32 * b + (collc_u64)j;
                    return COLLC_NONE;
                }
            }
        }
        const int bits = collc_bitwidth(mags);
        out[b] = (collc_u8)bits;
        if (bits == 0) continue;
        /* The body: the sign bitmap (bit 7 of hi), then bit-planes 0-7 from lo and 8 up from hi. */
        collc_u32 *body = (collc_u32 *)(out + at);
        body[0] = collc_zplane(hi, 7);
        for (int k = 0; k < bits && k < 8; k++) body[1 + k] = collc_zplane(lo, k);
        for (int k = 8; k < bits; k++) body[1 + k] = collc_zplane(hi, k - 8);
        at += collc_ebq_body_bytes(bits);
    }
    return at;
}

/* The plane of width bits with index k (0 for the sign bitmap, 1 + b for bit-plane b), or 0 beyond the width:
 * read with a select, not a branch, so that blocks of varying widths cost no mispredicted branches. */
static inline collc_u32 collc_zebq_word(const collc_u32 *words, int bits, int k)
{
    return words[k <= bits ? k : 0] & (0u - (collc_u32)(k <= bits));
}

#if defined(__SSE2__) && !defined(COLLC_ZCODEC_PORTABLE)
/* Adds `bit` (a 16-bit lane pattern) to the lanes of mag[0..3] (lanes 0-7, 8-15, 16-23, 24-31) whose bit is set
 * in the 32-bit plane w: each lane tests its own bit of w's half. */
static inline void collc_zscatter_plane(collc_u32 w, __m128i bit, __m128i mag[4])
{
    const __m128i lanes_lo = _mm_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128);
    const __m128i lanes_hi = _mm_setr_epi16(256, 512, 1024, 2048, 4096, 8192, 16384, (short)-32768);
    const __m128i lo = _mm_set1_epi16((short)(w & 0xFFFFu)), hi = _mm_set1_epi16((short)(w >> 16));
    mag[0] = _mm_or_si128(mag[0], _mm_and_si128(_mm_cmpeq_epi16(_mm_and_si128(lo, lanes_lo), lanes_lo), bit));
    mag[1] = _mm_or_si128(mag[1], _mm_and_si128(_mm_cmpeq_epi16(_mm_and_si128(lo, lanes_hi), lanes_hi), bit));
    mag[2] = _mm_or_si128(mag[2], _mm_and_si128(_mm_cmpeq_epi16(_mm_and_si128(hi, lanes_lo), lanes_lo), bit));
    mag[3] = _mm_or_si128(mag[3], _mm_and_si128(_mm_cmpeq_epi16(_mm_and_si128(hi, lanes_hi), lanes_hi), bit));
}

/* Decodes one ebq block body of width 1..14 into v[32]: |q| built in 16-bit lanes plane by plane, the sign
 * bitmap spread to lane masks, q = +-|q|, then float(q) * step (the same IEEE product as the scalar code). */
static inline void collc_zebq_decode_block(const collc_u32 *words, int bits, float step, float *COLLC_RESTRICT v)
{
    __m128i mag[4], sign[4];
    for (int r = 0; r < 4; r++) mag[r] = sign[r] = _mm_setzero_si128();
    collc_zscatter_plane(words[0], _mm_set1_epi16(-1), sign);
    for (int k = 0; k < 8; k++) /* planes 0-7 always, those beyond the width as zeros */
        collc_zscatter_plane(collc_zebq_word(words, bits, 1 + k), _mm_set1_epi16((short)(1 << k)), mag);
    for (int k = 8; k < bits; k++) collc_zscatter_plane(words[1 + k], _mm_set1_epi16((short)(1 << k)), mag);
    const __m128 scale = _mm_set1_ps(step);
    for (int r = 0; r < 4; r++) {
        const __m128i q = _mm_sub_epi16(_mm_xor_si128(mag[r], sign[r]), sign[r]);
        const __m128i q_lo = _mm_srai_epi32(_mm_unpacklo_epi16(q, q), 16); /* lanes 0-3, sign-extended */
        const __m128i q_hi = _mm_srai_epi32(_mm_unpackhi_epi16(q, q), 16); /* lanes 4-7 */
        _mm_storeu_ps(v + 8 * r, _mm_mul_ps(_mm_cvtepi32_ps(q_lo), scale));
        _mm_storeu_ps(v + 8 * r + 4, _mm_mul_ps(_mm_cvtepi32_ps(q_hi), scale));
    }
}
#else
/* Decodes one ebq block body of width 1..14 into v[32]: the planes scattered back to two bytes per lane,
 * eight lanes to a word, then q = +-|q| and q * step, lane by lane. */
static inline void collc_zebq_decode_block(const collc_u32 *words, int bits, float step, float *COLLC_RESTRICT v)
{
    collc_u64 L[4] = {0, 0, 0, 0}, H[4] = {0, 0, 0, 0}, S[4];
    for (int g = 0; g < 4; g++) S[g] = collc_zspread8(words[0] >> 8 * g);
    for (int k = 0; k < 8; k++) { /* planes 0-7 always, those beyond the width as zeros */
        const collc_u32 plane = collc_zebq_word(words, bits, 1 + k);
        for (int g = 0; g < 4; g++) L[g] |= collc_zspread8(plane >> 8 * g) << k;
    }
    for (int k = 8; k < bits; k++)
        for (int g = 0; g < 4; g++) H[g] |= collc_zspread8(words[1 + k] >> 8 * g) << (k - 8);
    collc_u8 lo[32], hi[32], sign[32];
    memcpy(lo, L, 32);
    memcpy(hi, H, 32);
    memcpy(sign, S, 32);
    for (int j = 0; j < 32; j++) {
        collc_i32 m = (collc_i32)lo[j] | (collc_i32)hi[j] << 8;
        collc_i32 s = -(collc_i32)sign[j]; /* 0 or -1 */
        v[j] = collc_grid_dequantize((m ^ s) - s, step);
    }
}
#endif

/* Decodes an ebq payload of n values into out. */
static inline void collc_zebq_decode(const collc_u8 *payload, collc_u64 n, float step, float *out)
{
    const collc_u64 nb = collc_div_up(n, 32);
    collc_u64 at = collc_align4(nb);
    const float zero = collc_grid_dequantize(0, step);
    for (collc_u64 b = 0; b < nb; b++) {
        const int bits = payload[b];
        float v[32];
        if (bits == 0) {
            for (int j = 0; j < 32; j++) v[j] = zero;
        } else if (bits <= COLLC_EBQ_MAX_BITS) {
            collc_zebq_decode_block((const collc_u32 *)(payload + at), bits, step, v);
        } else { /* a corrupt width: decoded as the per-item function does */
            collc_ebq_decode_values((const collc_u32 *)(payload + at), bits, n, step, b, out);
            at += collc_ebq_body_bytes(bits);
            continue;
        }
        if (32 * b + 32 <= n) {
            memcpy(out + 32 * b, v, sizeof v);
        } else {
            for (collc_u64 j = 0; 32 * b + j < n; j++) out[32 * b + j] = v[j];
        }
        at += collc_ebq_body_bytes(bits);
    }
}

/* fwq's 32-field groups: 32 bits-wide fields fill exactly `bits` words.  collc_zfwq_pack and collc_zfwq_unpack
 * work on eight fields (bits bytes) at a time, held in two 64-bit words: fields 0-3 in a, 4-7 in c, so that
 * the group's bits are a | c << 4 bits (up to 88 bits: the low 64 in lo, the rest in hi).  With `bits` a
 * constant (the switch in the callers), every shift and branch below is resolved at compile time. */
static inline COLLC_ALWAYS_INLINE void collc_zfwq_pack_fields(const collc_i32 *COLLC_RESTRICT q, int bits,
                                                              collc_u8 *COLLC_RESTRICT out)
{
    const collc_u64 mask = (1ull << bits) - 1;
    for (int g = 0; g < 4; g++, q += 8, out += bits) {
        collc_u64 a = 0, c = 0;
        for (int i = 0; i < 4; i++) {
            a |= ((collc_u64)(collc_u32)q[i] & mask) << (i * bits);
            c |= ((collc_u64)(collc_u32)q[4 + i] & mask) << (i * bits);
        }
        collc_u64 lo = a | c << (4 * bits), hi = c >> (64 - 4 * bits);
        memcpy(out, &lo, bits < 8 ? (size_t)bits : 8);
        if (bits > 8) memcpy(out + 8, &hi, (size_t)(bits - 8));
    }
}

static inline COLLC_ALWAYS_INLINE void collc_zfwq_unpack_fields(const collc_u8 *COLLC_RESTRICT in, int bits,
                                                                collc_i32 *COLLC_RESTRICT q)
{
    const collc_u64 mask = (1ull << bits) - 1;
    for (int g = 0; g < 4; g++, in += bits, q += 8) {
        collc_u64 lo = 0, hi = 0;
        memcpy(&lo, in, bits < 8 ? (size_t)bits : 8);
        if (bits > 8) memcpy(&hi, in + 8, (size_t)(bits - 8));
        for (int i = 0; i < 8; i++) {
            const int at = i * bits;
            collc_u64 f = at + bits <= 64 ? lo >> at : at >= 64 ? hi >> (at - 64) : lo >> at | hi << (64 - at);
            collc_i32 field = (collc_i32)(f & mask);
            q[i] = field - ((field >> (bits - 1)) << bits); /* two's complement, sign-extended */
        }
    }
}

/* 32 fields of `bits` bits (2..11) into `bits` words; for 8 bits the fields are plain bytes. */
static inline void collc_zfwq_pack(const collc_i32 *COLLC_RESTRICT q, int bits, collc_u8 *COLLC_RESTRICT out)
{
    switch (bits) {
    case 8:
        for (int j = 0; j < 32; j++) out[j] = (collc_u8)q[j];
        return;
    case 2: collc_zfwq_pack_fields(q, 2, out); return;
    case 3: collc_zfwq_pack_fields(q, 3, out); return;
    case 4: collc_zfwq_pack_fields(q, 4, out); return;
    case 5: collc_zfwq_pack_fields(q, 5, out); return;
    case 6: collc_zfwq_pack_fields(q, 6, out); return;
    case 7: collc_zfwq_pack_fields(q, 7, out); return;
    case 9: collc_zfwq_pack_fields(q, 9, out); return;
    case 10: collc_zfwq_pack_fields(q, 10, out); return;
    case 11: collc_zfwq_pack_fields(q, 11, out); return;
    }
}

static inline void collc_zfwq_unpack(const collc_u8 *COLLC_RESTRICT in, int bits, collc_i32 *COLLC_RESTRICT q)
{
    switch (bits) {
    case 8:
        for (int j = 0; j < 32; j++) q[j] = (signed char)in[j];
        return;
    case 2: collc_zfwq_unpack_fields(in, 2, q); return;
    case 3: collc_zfwq_unpack_fields(in, 3, q); return;
    case 4: collc_zfwq_unpack_fields(in, 4, q); return;
    case 5: collc_zfwq_unpack_fields(in, 5, q); return;
    case 6: collc_zfwq_unpack_fields(in, 6, q); return;
    case 7: collc_zfwq_unpack_fields(in, 7, q); return;
    case 9: collc_zfwq_unpack_fields(in, 9, q); return;
    case 10: collc_zfwq_unpack_fields(in, 10, q); return;
    case 11: collc_zfwq_unpack_fields(in, 11, q); return;
    }
}

/* Values c .. c + 31 of a block that holds m values: in place, or copied to `pad` with zeros after the m-th. */
static inline const float *collc_zfwq_chunk(const float *v, int m, int c, float pad[32])
{
    if (c + 32 <= m) return v + c;
    for (int j = 0; j < 32; j++) pad[j] = c + j < m ? v[c + j] : 0.0f;
    return pad;
}

/* The largest |v| of 32 values, as a bit pattern: non-negative floats order as their bits (as signed
 * integers too), with Inf and NaN above every finite value. */
static inline collc_i32 collc_zfwq_top(const float *COLLC_RESTRICT v)
{
    collc_i32 top = 0;
    for (int j = 0; j < 32; j++) {
        collc_i32 a = (collc_i32)(collc_f2u(v[j]) & 0x7FFFFFFFu);
        top = a > top ? a : top;
    }
    return top;
}

/* The levels of 32 values for a scale != 0, as collc_fwq_encode_one computes them: rint(v / scale) clamped
 * to +-levels.  rint is the float32 addition and subtraction of 1.5 * 2**23, which rounds to an integer, half
 * to even, for |v / scale| < 2**22 (here at most about levels + 1). */
static inline void collc_zfwq_quantize(const float *COLLC_RESTRICT v, float scale, collc_i32 levels,
                                       collc_i32 *COLLC_RESTRICT q)
{
    const float round = 12582912.0f; /* 1.5 * 2**23 */
    for (int j = 0; j < 32; j++) {
        float t = collc_fadd(collc_fadd(collc_fdiv(v[j], scale), round), -round);
        collc_i32 level = (collc_i32)t;
        level = level > levels ? levels : level;
        q[j] = level < -levels ? -levels : level;
    }
}

/* Block b of a fwq payload of n values: COLLC_NONE, or the index of its first refused value (the same
 * values as collc_fwq_encode_one, and the same bytes).  The block goes by 32 values: its largest magnitude,
 * then each 32 values' levels packed into `bits` words. */
static inline collc_u64 collc_zfwq_encode_block(const float *x, collc_u64 n, int bits, int block, collc_u8 *out,
                                                collc_u64 b)
{
    const collc_u64 base = b * (collc_u64)block;
    const int m = n - base < (collc_u64)block ? (int)(n - base) : block; /* values in this block */
    const float *v = x + base;
    float pad[32];
    collc_i32 top = 0;
    for (int c = 0; c < m; c += 32) {
        collc_i32 t = collc_zfwq_top(collc_zfwq_chunk(v, m, c, pad));
        top = t > top ? t : top;
    }
    if (top > 0x7F7FFFFF) /* a NaN or an Inf: the per-item function finds the first */
        return collc_fwq_encode_one(x, n, bits, block, out, b);
    const collc_i32 levels = (1 << (bits - 1)) - 1;
    const float s0 = collc_fdiv(collc_u2f((collc_u32)top), (float)levels);
    float scale = 0.0f;
    if (s0 >= collc_u2f(0x00800000u)) { /* 2**-126: rounded up to 25 - bits significant bits */
        collc_u32 mask = (1u << (bits - 1)) - 1u;
        scale = collc_u2f((collc_f2u(s0) + mask) & ~mask);
    }
    if (collc_fmul((float)levels, scale) >= collc_u2f(0x7F000000u)) /* 2**127: refused, at the first maximum */
        return collc_fwq_encode_one(x, n, bits, block, out, b);
    collc_u8 *blk = out + b * collc_fwq_block_bytes(bits, block);
    const collc_u32 scale_bits = collc_f2u(scale);
    memcpy(blk, &scale_bits, 4);
    blk += 4;
    for (int c = 0; c < block; c += 32, blk += 4 * bits) {
        collc_i32 q[32];
        if (scale == 0.0f || c >= m) {
            for (int j = 0; j < 32; j++) q[j] = 0;
        } else {
            collc_zfwq_quantize(collc_zfwq_chunk(v, m, c, pad), scale, levels, q);
        }
        collc_zfwq_pack(q, bits, blk);
    }
    return COLLC_NONE;
}

/* Decodes block b of a fwq payload of n values into out. */
static inline void collc_zfwq_decode_block(const collc_u8 *payload, collc_u64 n, int bits, int block, float *out,
                                           collc_u64 b)
{
    const collc_u64 base = b * (collc_u64)block;
    const int m = n - base < (collc_u64)block ? (int)(n - base) : block;
    const collc_u8 *blk = payload + b * collc_fwq_block_bytes(bits, block);
    collc_u32 scale_bits;
    memcpy(&scale_bits, blk, 4);
    const float scale = collc_u2f(scale_bits);
    blk += 4;
    for (int c = 0; c < m; c += 32, blk += 4 * bits) {
        collc_i32 q[32];
        float v[32];
        collc_zfwq_unpack(blk, bits, q);
        for (int j = 0; j < 32; j++) v[j] = collc_fmul((float)q[j], scale);
        const int keep = m - c < 32 ? m - c : 32;
        memcpy(out + base + c, v, 4 * (size_t)keep);
    }
}

/* Encodes n float32 values into out (room for collc_zmax_bytes); returns the payload's size, or COLLC_NONE with
 * *bad the first value the codec refuses (as the numpy codec's CodecValueError.index). */
static inline collc_u64 collc_zencode(const struct collc_codec *c, const float *x, collc_u64 n, collc_u8 *out,
                                      collc_u64 *bad)
{
    collc_u64 nb;
    *bad = COLLC_NONE;
    switch (c->kind) {
    case COLLC_CODEC_EBQ:
        return collc_zebq_encode(x, n, c->inv2eb, out, bad);
    case COLLC_CODEC_FWQ:
        nb = collc_div_up(n, (collc_u64)c->block);
        for (collc_u64 b = 0; b < nb; b++) {
            *bad = collc_zfwq_encode_block(x, n, c->bits, c->block, out, b);
            if (*bad != COLLC_NONE) return COLLC_NONE;
        }
        return nb * collc_fwq_block_bytes(c->bits, c->block);
    case COLLC_CODEC_HQ:
        for (collc_u64 i = 0; i < n; i++) {
            *bad = collc_hq_encode_one(x, c->inv2eb, (collc_i32 *)out, i);
            if (*bad != COLLC_NONE) return COLLC_NONE;
        }
        return 4 * n;
    case COLLC_CODEC_FP16:
    case COLLC_CODEC_BF16:
        for (collc_u64 i = 0; i < n; i++) {
            *bad = c->kind == COLLC_CODEC_FP16 ? collc_fp16_encode_one(x, (collc_u16 *)out, i)
                                               : collc_bf16_encode_one(x, (collc_u16 *)out, i);
            if (*bad != COLLC_NONE) return COLLC_NONE;
        }
        return 2 * n;
    case COLLC_CODEC_LOSSLESS:
        return collc_zencode_words((const collc_u32 *)x, n, 1, out);
    }
    return COLLC_NONE;
}

/* Decodes a payload of n float32 values into out. */
static inline void collc_zdecode(const struct collc_codec *c, const collc_u8 *payload, collc_u64 n, float *out)
{
    collc_u64 nb;
    switch (c->kind) {
    case COLLC_CODEC_EBQ:
        collc_zebq_decode(payload, n, c->step, out);
        return;
    case COLLC_CODEC_FWQ:
        nb = collc_div_up(n, (collc_u64)c->block);
        for (collc_u64 b = 0; b < nb; b++) collc_zfwq_decode_block(payload, n, c->bits, c->block, out, b);
        return;
    case COLLC_CODEC_HQ:
        for (collc_u64 i = 0; i < n; i++) collc_hq_decode_one((const collc_i32 *)payload, c->step, out, i);
        return;
    case COLLC_CODEC_FP16:
        for (collc_u64 i = 0; i < n; i++) collc_fp16_decode_one((const collc_u16 *)payload, out, i);
        return;
    case COLLC_CODEC_BF16:
        for (collc_u64 i = 0; i < n; i++) collc_bf16_decode_one((const collc_u16 *)payload, out, i);
        return;
    case COLLC_CODEC_LOSSLESS:
        collc_zdecode_words(payload, n, 1, (collc_u32 *)out);
        return;
    }
}

/* acc += b for two hq payloads of n values (grid integers); returns COLLC_NONE, or the first element whose sum
 * leaves int32 (acc is then partly updated: the caller aborts). */
static inline collc_u64 collc_zhq_add(collc_u8 *acc, const collc_u8 *b, collc_u64 n)
{
    for (collc_u64 i = 0; i < n; i++) {
        collc_u64 bad = collc_hq_add_one((const collc_i32 *)acc, (const collc_i32 *)b, (collc_i32 *)acc, i);
        if (bad != COLLC_NONE) return bad;
    }
    return COLLC_NONE;
}

#endif /* COLLC_ZCODEC_H */
