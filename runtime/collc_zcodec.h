/* collc_zcodec.h: whole payloads of collc's codecs on the CPU, for the mpi-c runtime.
 *
 * Each function encodes or decodes one payload (one chunk of a schedule) with
 * the per-item functions of collc_codecs.h, item after item, so that the bytes
 * are those of the numpy references in collc/codecs/ (tests/test_c_codecs.py
 * compares them on random and edge-case inputs).  The layouts are in
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

/* Encodes n float32 values into out (room for collc_zmax_bytes); returns the payload's size, or COLLC_NONE with
 * *bad the first value the codec refuses (as the numpy codec's CodecValueError.index). */
static inline collc_u64 collc_zencode(const struct collc_codec *c, const float *x, collc_u64 n, collc_u8 *out,
                                      collc_u64 *bad)
{
    collc_u64 nb, at;
    *bad = COLLC_NONE;
    switch (c->kind) {
    case COLLC_CODEC_EBQ:
        nb = collc_div_up(n, COLLC_EBQ_BLOCK);
        at = collc_align4(nb);
        for (collc_u64 i = nb; i < at; i++) out[i] = 0;
        for (collc_u64 b = 0; b < nb; b++) {
            float v[32];
            collc_i32 q[32];
            int lane = 0, bits;
            collc_load_block32(x, n, b, v);
            bits = collc_ebq_quantize_block(v, c->inv2eb, q, &lane);
            if (bits < 0) {
                *bad = b * 32 + (collc_u64)lane;
                return COLLC_NONE;
            }
            out[b] = (collc_u8)bits;
            if (bits > 0) collc_ebq_pack(q, bits, (collc_u32 *)(out + at));
            at += collc_ebq_body_bytes(bits);
        }
        return at;
    case COLLC_CODEC_FWQ:
        nb = collc_div_up(n, (collc_u64)c->block);
        for (collc_u64 b = 0; b < nb; b++) {
            *bad = collc_fwq_encode_one(x, n, c->bits, c->block, out, b);
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
    collc_u64 nb, at;
    switch (c->kind) {
    case COLLC_CODEC_EBQ:
        nb = collc_div_up(n, COLLC_EBQ_BLOCK);
        at = collc_align4(nb);
        for (collc_u64 b = 0; b < nb; b++) {
            collc_ebq_decode_values((const collc_u32 *)(payload + at), payload[b], n, c->step, b, out);
            at += collc_ebq_body_bytes(payload[b]);
        }
        return;
    case COLLC_CODEC_FWQ:
        nb = collc_div_up(n, (collc_u64)c->block);
        for (collc_u64 b = 0; b < nb; b++) collc_fwq_decode_values(payload, n, c->bits, c->block, b, out);
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
