/* The mpi-c runtime's codecs (runtime/collc_zcodec.h) behind a flat C API, for tests/test_c_codecs.py.
 *
 * Built as a shared library with the mpi-c target's flags and loaded with ctypes;
 * every function takes the codec as (kind, step, inv2eb, bits, block). */
#include "collc_zcodec.h"

static struct collc_codec codec(int kind, float step, float inv2eb, int bits, int block)
{
    struct collc_codec c;
    c.kind = (enum collc_codec_kind)kind;
    c.step = step;
    c.inv2eb = inv2eb;
    c.bits = bits;
    c.block = block;
    c.spec = "test";
    return c;
}

collc_u64 zmax(int kind, float step, float inv2eb, int bits, int block, collc_u64 n, int dim)
{
    struct collc_codec c = codec(kind, step, inv2eb, bits, block);
    return collc_zmax_bytes(&c, n, dim);
}

collc_u64 zsize(int kind, float step, float inv2eb, int bits, int block, const collc_u8 *data, collc_u64 avail,
                collc_u64 n, int dim)
{
    struct collc_codec c = codec(kind, step, inv2eb, bits, block);
    return collc_zpayload_bytes(&c, data, avail, n, dim);
}

collc_u64 zenc(int kind, float step, float inv2eb, int bits, int block, const float *x, collc_u64 n, collc_u8 *out,
               collc_u64 *bad)
{
    struct collc_codec c = codec(kind, step, inv2eb, bits, block);
    return collc_zencode(&c, x, n, out, bad);
}

void zdec(int kind, float step, float inv2eb, int bits, int block, const collc_u8 *payload, collc_u64 n, float *out)
{
    struct collc_codec c = codec(kind, step, inv2eb, bits, block);
    collc_zdecode(&c, payload, n, out);
}

collc_u64 zenc_words(const collc_u32 *w, collc_u64 nwords, int dim, collc_u8 *out)
{
    return collc_zencode_words(w, nwords, dim, out);
}

void zdec_words(const collc_u8 *payload, collc_u64 nwords, int dim, collc_u32 *w)
{
    collc_zdecode_words(payload, nwords, dim, w);
}

collc_u64 zhq_add(collc_u8 *acc, const collc_u8 *b, collc_u64 n)
{
    return collc_zhq_add(acc, b, n);
}
