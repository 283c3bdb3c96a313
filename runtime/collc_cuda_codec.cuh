/* collc_cuda_codec.cuh: compression points in the cuda executor.
 *
 * A schedule with compression points (docs/compression.md) moves some chunks
 * as codec payloads: compressed by the sender on the wire and decompressed by
 * the receiver, or compressed once by a local `compress` and forwarded as
 * bytes.  Every chunk is a payload of its own, as in collc.codecs and the
 * local executor, so the payloads here are bit for bit those of the numpy
 * codecs, and the decoded values too.
 *
 * Slots.  A payload lives in a slot of device memory sized for its chunk's n
 * values (collc_cuda_slot_of):
 *
 *   [ size: u64 | pad to 16 ][ payload: capacity bytes ][ scan space ][ lossless: words, scan space ]
 *
 * `size` is the payload's length in bytes, written by the encoder on the
 * device (ebq and lossless payloads vary in size), so forwarding a payload
 * copies only its bytes (collc_cuda_payload_copy) without asking the host.
 * The scan space holds the per-block offsets that the two-pass codecs need.
 *
 * Jobs.  All codec work is one kernel, collc_cuda_job_kernel, over the items
 * of one job (a 32-value block, a fwq block, or an element, depending on the
 * codec): encode, decode, decode fused with the reduction into the
 * receiver's buffer (acc = acc op decode(payload), one pass), and the
 * homomorphic sum of two hq payloads.  The per-item work is
 * collc_cuda_job_item, a __host__ __device__ function over the functions of
 * collc_codecs.cuh, which a plain C++ compiler also sees: the CPU stand-in of
 * the CUDA runtime (tests/cuda/mock_codecs.cpp) runs jobs through it.
 *
 * Refusals.  A value a codec cannot encode (NaN, Inf, beyond the grid's
 * range) or an hq sum that leaves int32 is noted, as
 * (element << 8 | codec), the smallest wins, in the rank's `bad` word; the
 * executor reports it after the run (collc_cuda_check).
 *
 * Float32 data only; reductions sum, max and min (the ops the error bounds
 * cover).
 *
 * A schedule without compression points defines COLLC_CUDA_NO_CODECS: the
 * kernels are then not compiled, and the launchers, which nothing calls,
 * return cudaErrorNotSupported.
 */
#ifndef COLLC_CUDA_CODEC_CUH
#define COLLC_CUDA_CODEC_CUH

#ifndef COLLC_CODECS_NO_KERNELS
#define COLLC_CODECS_NO_KERNELS /* the executor launches its job kernel, not the per-codec ones */
#endif
#include "collc_codecs.cuh"

/* The codecs the executor runs (collc.codecs; zfp is a CPU reference only). */
enum collc_cuda_codec_kind {
    COLLC_CUDA_EBQ,
    COLLC_CUDA_FWQ,
    COLLC_CUDA_HQ,
    COLLC_CUDA_FP16,
    COLLC_CUDA_BF16,
    COLLC_CUDA_LOSSLESS
};

/* A configured codec: the generated file's table holds one per codec spec. */
struct collc_cuda_codec {
    int kind;            /* collc_cuda_codec_kind */
    float step, inv2eb;  /* ebq, hq: the grid (collc.codecs.grid.grid_constants) */
    int bits, block;     /* fwq */
};

/* What a job does, item by item. */
enum collc_cuda_job_what {
    COLLC_CUDA_JOB_ENCODE_SIZES,  /* ebq, lossless, pass 1: item sizes into scan[] (items + 1 items) */
    COLLC_CUDA_JOB_ENCODE,        /* the encode (ebq, lossless: pass 2, after the scan; items + 1 items) */
    COLLC_CUDA_JOB_DECODE_SIZES,  /* ebq, lossless: item sizes into scan[] (items + 1 items) */
    COLLC_CUDA_JOB_DECODE,        /* values = decode(payload) (lossless: the deltas, into words) */
    COLLC_CUDA_JOB_DECODE_REDUCE, /* values = values op decode(payload), fused (not lossless) */
    COLLC_CUDA_JOB_REDUCE_WORDS,  /* lossless: values = values op words */
    COLLC_CUDA_JOB_ADD,           /* hq: payload = payload + other, exact integers */
    COLLC_CUDA_JOB_FUSED_SIZES,   /* ebq, sum: pass 1 of slot = encode(values + decode(other)) (items + 1) */
    COLLC_CUDA_JOB_FUSED_BODY     /* ebq, sum: pass 2, after the scan; values = the sums (items + 1) */
};

/* One job: a kernel's arguments, passed by value. */
struct collc_cuda_job {
    int what;                   /* collc_cuda_job_what */
    int op;                     /* DECODE_REDUCE, REDUCE_WORDS: collc_cuda_op (sum, max, min) */
    int codec_index;            /* into the schedule's codec table: for refusals */
    struct collc_cuda_codec codec;
    collc_u64 n;                /* values in the chunk */
    collc_u64 items;            /* items of this job */
    collc_u64 base;             /* the chunk's first element in the rank's buffer: for refusals */
    float* values;              /* the chunk in the rank's buffer */
    collc_u8* slot;             /* the payload's slot */
    collc_u64 scan, words;      /* byte offsets in the slot: scan space, lossless words */
    const collc_u8* other;      /* ADD: the payload added; FUSED_*: the incoming payload, its offsets scanned */
    collc_u64* bad;             /* the rank's refusal word */
};

/* Where things are in a slot, for n values of a codec. */
struct collc_cuda_slot {
    collc_u64 capacity;         /* the largest payload (collc.codecs Codec.max_compressed_bytes) */
    collc_u64 items;            /* blocks, groups or elements */
    collc_u64 scan, partials;   /* u64 offsets (items + 1) and the scan's tile sums */
    collc_u64 words, wpartials; /* lossless: n decoded words and their scan's tile sums */
    collc_u64 bytes;            /* the whole slot */
};

#define COLLC_CUDA_SLOT_HEADER 16ull

COLLC_HD collc_u64 collc_cuda_align16(collc_u64 bytes) { return (bytes + 15) & ~15ull; }

COLLC_HD collc_u64 collc_cuda_scan_tiles(collc_u64 count) { return collc_div_up(count, COLLC_SCAN_TILE); }

/* Items of a codec's jobs and its largest payload, for n values. */
COLLC_HD struct collc_cuda_slot collc_cuda_slot_of(const struct collc_cuda_codec* c, collc_u64 n) {
    struct collc_cuda_slot s = {0, 0, 0, 0, 0, 0, 0};
    switch (c->kind) {
    case COLLC_CUDA_EBQ:
        s.items = collc_div_up(n, COLLC_EBQ_BLOCK);
        s.capacity = collc_align4(s.items) + s.items * 4 * (1 + COLLC_EBQ_MAX_BITS);
        break;
    case COLLC_CUDA_FWQ:
        s.items = collc_div_up(n, (collc_u64)c->block);
        s.capacity = s.items * collc_fwq_block_bytes(c->bits, c->block);
        break;
    case COLLC_CUDA_HQ:
        s.items = n;
        s.capacity = 4 * n;
        break;
    case COLLC_CUDA_LOSSLESS:
        s.items = collc_div_up(n, 32);
        s.capacity = 4 * 33 * s.items;
        break;
    default: /* fp16, bf16 */
        s.items = n;
        s.capacity = 2 * n;
        break;
    }
    s.scan = COLLC_CUDA_SLOT_HEADER + collc_cuda_align16(s.capacity);
    s.partials = s.scan + collc_cuda_align16(8 * (s.items + 1));
    s.words = s.partials + collc_cuda_align16(8 * collc_cuda_scan_tiles(s.items + 1));
    s.wpartials = s.words;
    if (c->kind == COLLC_CUDA_LOSSLESS) s.wpartials += collc_cuda_align16(4 * n);
    s.bytes = s.wpartials;
    if (c->kind == COLLC_CUDA_LOSSLESS) s.bytes += collc_cuda_align16(4 * collc_cuda_scan_tiles(n));
    return s;
}

/* The two-pass codecs: sizes, a scan, then the bodies at their offsets. */
COLLC_HD int collc_cuda_codec_scans(const struct collc_cuda_codec* c) {
    return c->kind == COLLC_CUDA_EBQ || c->kind == COLLC_CUDA_LOSSLESS;
}

/* numpy's add, maximum and minimum on float32 (collc_cuda_reduce.cuh's rules). */
COLLC_HD float collc_cuda_combine(int op, float a, float b) {
    if (op == 2) return (a != a || a > b) ? a : b; /* COLLC_CUDA_MAX */
    if (op == 3) return (a != a || a < b) ? a : b; /* COLLC_CUDA_MIN */
    return collc_fadd(a, b);
}

/* Combines decoded values into the receiver's buffer: the `put` of the fused decode. */
struct collc_cuda_reduce_into {
    float* acc;
    int op;
    COLLC_HD void operator()(collc_u64 i, float v) const { acc[i] = collc_cuda_combine(op, acc[i], v); }
};

COLLC_HD void collc_cuda_note(collc_u64* bad, collc_u64 index, const struct collc_cuda_job* j) {
    if (index == COLLC_NONE) return;
    const collc_u64 code = ((j->base + index) << 8) | (collc_u64)(j->codec_index & 0xFF);
#if defined(__CUDA_ARCH__)
    atomicMin((unsigned long long*)bad, (unsigned long long)code);
#else
    if (code < *bad) *bad = code;
#endif
}

COLLC_HD void collc_cuda_encode_item(const struct collc_cuda_job* j, collc_u64 i) {
    const struct collc_cuda_codec* c = &j->codec;
    collc_u8* payload = j->slot + COLLC_CUDA_SLOT_HEADER;
    collc_u64* size = (collc_u64*)j->slot;
    collc_u64* scan = (collc_u64*)(j->slot + j->scan);
    const collc_u64 last = j->items - 1; /* the two-pass codecs: the item that writes the size */
    collc_u64 bad = COLLC_NONE;
    switch (c->kind) {
    case COLLC_CUDA_EBQ:
        if (i < last) collc_ebq_encode_body_one(j->values, j->n, c->inv2eb, payload, scan, i);
        else *size = collc_align4(last) + scan[last];
        return;
    case COLLC_CUDA_LOSSLESS:
        if (i < last) collc_lossless_encode_body_one((const collc_u32*)j->values, j->n, payload, scan, i);
        else *size = 4 * last + scan[last];
        return;
    case COLLC_CUDA_FWQ:
        bad = collc_fwq_encode_one(j->values, j->n, c->bits, c->block, payload, i);
        if (i == 0) *size = j->items * collc_fwq_block_bytes(c->bits, c->block);
        break;
    case COLLC_CUDA_HQ:
        bad = collc_hq_encode_one(j->values, c->inv2eb, (collc_i32*)payload, i);
        if (i == 0) *size = 4 * j->n;
        break;
    case COLLC_CUDA_FP16:
        bad = collc_fp16_encode_one(j->values, (collc_u16*)payload, i);
        if (i == 0) *size = 2 * j->n;
        break;
    default: /* bf16 */
        bad = collc_bf16_encode_one(j->values, (collc_u16*)payload, i);
        if (i == 0) *size = 2 * j->n;
        break;
    }
    collc_cuda_note(j->bad, bad, j);
}

/* Decodes item i into the buffer (op < 0) or reduces it into the buffer with op. */
COLLC_HD void collc_cuda_decode_item(const struct collc_cuda_job* j, collc_u64 i, int op) {
    const struct collc_cuda_codec* c = &j->codec;
    const collc_u8* payload = j->slot + COLLC_CUDA_SLOT_HEADER;
    const collc_u64* scan = (const collc_u64*)(j->slot + j->scan);
    const collc_u64 n = j->n;
    float v;
    switch (c->kind) {
    case COLLC_CUDA_EBQ:
        if (op < 0) collc_ebq_decode_block(payload, n, c->step, scan, i, collc_store_f32{j->values});
        else collc_ebq_decode_block(payload, n, c->step, scan, i, collc_cuda_reduce_into{j->values, op});
        return;
    case COLLC_CUDA_LOSSLESS: /* the deltas; a scan and REDUCE_WORDS finish the work */
        collc_lossless_decode_deltas_one(payload, n, scan, (collc_u32*)(j->slot + j->words), i);
        return;
    case COLLC_CUDA_FWQ:
        if (op < 0) collc_fwq_decode_block(payload, n, c->bits, c->block, i, collc_store_f32{j->values});
        else collc_fwq_decode_block(payload, n, c->bits, c->block, i, collc_cuda_reduce_into{j->values, op});
        return;
    case COLLC_CUDA_HQ: v = collc_grid_dequantize(((const collc_i32*)payload)[i], c->step); break;
    case COLLC_CUDA_FP16: v = collc_f16_to_f32(((const collc_u16*)payload)[i]); break;
    default: v = collc_bf16_to_f32(((const collc_u16*)payload)[i]); break;
    }
    j->values[i] = op < 0 ? v : collc_cuda_combine(op, j->values[i], v);
}

/* Item i of job j: everything a codec kernel of the executor does. */
COLLC_HD void collc_cuda_job_item(const struct collc_cuda_job* j, collc_u64 i) {
    collc_u8* payload = j->slot + COLLC_CUDA_SLOT_HEADER;
    collc_u64* scan = (collc_u64*)(j->slot + j->scan);
    switch (j->what) {
    case COLLC_CUDA_JOB_ENCODE_SIZES:
        if (j->codec.kind == COLLC_CUDA_EBQ)
            collc_cuda_note(j->bad, collc_ebq_encode_sizes_one(j->values, j->n, j->codec.inv2eb, payload, scan, i), j);
        else
            collc_lossless_encode_sizes_one((const collc_u32*)j->values, j->n, payload, scan, i);
        break;
    case COLLC_CUDA_JOB_ENCODE: collc_cuda_encode_item(j, i); break;
    case COLLC_CUDA_JOB_DECODE_SIZES:
        if (j->codec.kind == COLLC_CUDA_EBQ) collc_ebq_decode_sizes_one(payload, j->n, scan, i);
        else collc_lossless_decode_sizes_one(payload, j->n, scan, i);
        break;
    case COLLC_CUDA_JOB_DECODE: collc_cuda_decode_item(j, i, -1); break;
    case COLLC_CUDA_JOB_DECODE_REDUCE: collc_cuda_decode_item(j, i, j->op); break;
    case COLLC_CUDA_JOB_REDUCE_WORDS:
        j->values[i] = collc_cuda_combine(j->op, j->values[i], collc_u2f(((const collc_u32*)(j->slot + j->words))[i]));
        break;
    case COLLC_CUDA_JOB_FUSED_SIZES:
        collc_cuda_note(j->bad,
                        collc_ebq_reduce_sizes_one(j->other + COLLC_CUDA_SLOT_HEADER, (const collc_u64*)(j->other + j->scan),
                                                   j->values, j->n, j->codec.step, j->codec.inv2eb, payload, scan, i),
                        j);
        break;
    case COLLC_CUDA_JOB_FUSED_BODY:
        if (i + 1 == j->items) {
            *(collc_u64*)j->slot = collc_align4(i) + scan[i];
            break;
        }
        collc_ebq_reduce_body_one(j->other + COLLC_CUDA_SLOT_HEADER, (const collc_u64*)(j->other + j->scan), j->values,
                                  j->n, j->codec.step, j->codec.inv2eb, payload, scan, j->values, i);
        break;
    default: /* ADD */
        collc_cuda_note(j->bad,
                        collc_hq_add_one((const collc_i32*)payload, (const collc_i32*)(j->other + COLLC_CUDA_SLOT_HEADER),
                                         (collc_i32*)payload, i),
                        j);
        break;
    }
}

#if defined(__CUDACC__) && defined(COLLC_CUDA_NO_CODECS)

static inline cudaError_t collc_cuda_encode(struct collc_cuda_job, int, cudaStream_t) { return cudaErrorNotSupported; }
static inline cudaError_t collc_cuda_decode(struct collc_cuda_job, int, int, cudaStream_t)
{
    return cudaErrorNotSupported;
}
static inline cudaError_t collc_cuda_add_payloads(struct collc_cuda_job, const collc_u8 *, int, cudaStream_t)
{
    return cudaErrorNotSupported;
}
static inline cudaError_t collc_cuda_forward(collc_u8 *, const collc_u8 *, const struct collc_cuda_codec *, collc_u64,
                                             int, cudaStream_t)
{
    return cudaErrorNotSupported;
}
static inline cudaError_t collc_cuda_reduce_encode(struct collc_cuda_job, collc_u8 *, int, int, cudaStream_t)
{
    return cudaErrorNotSupported;
}
static inline struct collc_cuda_job collc_cuda_job_of(int, const struct collc_cuda_codec *, int, collc_u64, collc_u64,
                                                      float *, collc_u8 *, collc_u64 *)
{
    struct collc_cuda_job j;
    memset(&j, 0, sizeof j);
    return j;
}

#elif defined(__CUDACC__)

extern "C" {

/* One job, grid-stride over its items. */
__global__ void collc_cuda_job_kernel(struct collc_cuda_job job) {
    for (collc_u64 i = collc_thread_index(); i < job.items; i += (collc_u64)gridDim.x * blockDim.x)
        collc_cuda_job_item(&job, i);
}

/* Copies a payload and its size (not the slot's capacity) from slot `from` to slot `to`. */
__global__ void collc_cuda_payload_copy(collc_u8* to, const collc_u8* from) {
    const collc_u64 words = collc_div_up(COLLC_CUDA_SLOT_HEADER + *(const collc_u64*)from, 8);
    for (collc_u64 i = collc_thread_index(); i < words; i += (collc_u64)gridDim.x * blockDim.x)
        ((collc_u64*)to)[i] = ((const collc_u64*)from)[i];
}

} /* extern "C" */

/* Launches job j over its items, at most max_blocks blocks of COLLC_SCAN_THREADS threads. */
static inline cudaError_t collc_cuda_launch_job(const struct collc_cuda_job* j, int max_blocks, cudaStream_t stream) {
    collc_u64 blocks = collc_div_up(j->items, COLLC_SCAN_THREADS);
    if (j->items == 0) return cudaSuccess;
    if (blocks > (collc_u64)max_blocks) blocks = (collc_u64)max_blocks;
    collc_cuda_job_kernel<<<(unsigned)blocks, COLLC_SCAN_THREADS, 0, stream>>>(*j);
    return cudaGetLastError();
}

/* Exclusive scan of count u64 values in place (collc_codecs.cuh's three kernels). */
static inline cudaError_t collc_cuda_scan_u64(collc_u64* data, collc_u64 count, collc_u64* partials,
                                              cudaStream_t stream) {
    const unsigned tiles = (unsigned)collc_cuda_scan_tiles(count);
    collc_scan_u64_reduce<<<tiles, COLLC_SCAN_THREADS, 0, stream>>>(data, count, partials);
    collc_scan_u64_spine<<<1, COLLC_SCAN_THREADS, 0, stream>>>(partials, tiles);
    collc_scan_u64_apply<<<tiles, COLLC_SCAN_THREADS, 0, stream>>>(data, count, partials);
    return cudaGetLastError();
}

/* Inclusive, wrapping scan of count u32 values in place: lossless deltas -> words. */
static inline cudaError_t collc_cuda_scan_u32(collc_u32* data, collc_u64 count, collc_u32* partials,
                                              cudaStream_t stream) {
    const unsigned tiles = (unsigned)collc_cuda_scan_tiles(count);
    collc_scan_u32_reduce<<<tiles, COLLC_SCAN_THREADS, 0, stream>>>(data, count, partials);
    collc_scan_u32_spine<<<1, COLLC_SCAN_THREADS, 0, stream>>>(partials, tiles);
    collc_scan_u32_apply<<<tiles, COLLC_SCAN_THREADS, 0, stream>>>(data, count, partials);
    return cudaGetLastError();
}

/* A job on the chunk of `n` values at `values` (element `base` of its rank) and the slot `slot`. */
static inline struct collc_cuda_job collc_cuda_job_of(int what, const struct collc_cuda_codec* c, int codec_index,
                                                      collc_u64 n, collc_u64 base, float* values, collc_u8* slot,
                                                      collc_u64* bad) {
    struct collc_cuda_job j;
    const struct collc_cuda_slot s = collc_cuda_slot_of(c, n);
    memset(&j, 0, sizeof j);
    j.what = what;
    j.codec_index = codec_index;
    j.codec = *c;
    j.n = n;
    j.items = s.items;
    j.base = base;
    j.values = values;
    j.slot = slot;
    j.scan = s.scan;
    j.words = s.words;
    j.bad = bad;
    return j;
}

/* Encodes the chunk into the slot. */
static inline cudaError_t collc_cuda_encode(struct collc_cuda_job j, int max_blocks, cudaStream_t stream) {
    cudaError_t err;
    if (collc_cuda_codec_scans(&j.codec)) {
        const struct collc_cuda_slot s = collc_cuda_slot_of(&j.codec, j.n);
        j.items = s.items + 1;
        j.what = COLLC_CUDA_JOB_ENCODE_SIZES;
        if ((err = collc_cuda_launch_job(&j, max_blocks, stream)) != cudaSuccess) return err;
        err = collc_cuda_scan_u64((collc_u64*)(j.slot + s.scan), s.items + 1, (collc_u64*)(j.slot + s.partials), stream);
        if (err != cudaSuccess) return err;
    }
    j.what = COLLC_CUDA_JOB_ENCODE;
    return collc_cuda_launch_job(&j, max_blocks, stream);
}

/* Decodes the slot into the chunk (op < 0), or reduces the decoded values into it with op, fused. */
static inline cudaError_t collc_cuda_decode(struct collc_cuda_job j, int op, int max_blocks, cudaStream_t stream) {
    const struct collc_cuda_slot s = collc_cuda_slot_of(&j.codec, j.n);
    cudaError_t err;
    j.op = op;
    if (collc_cuda_codec_scans(&j.codec)) {
        j.items = s.items + 1;
        j.what = COLLC_CUDA_JOB_DECODE_SIZES;
        if ((err = collc_cuda_launch_job(&j, max_blocks, stream)) != cudaSuccess) return err;
        err = collc_cuda_scan_u64((collc_u64*)(j.slot + s.scan), s.items + 1, (collc_u64*)(j.slot + s.partials), stream);
        if (err != cudaSuccess) return err;
        j.items = s.items;
    }
    if (j.codec.kind != COLLC_CUDA_LOSSLESS) {
        j.what = op < 0 ? COLLC_CUDA_JOB_DECODE : COLLC_CUDA_JOB_DECODE_REDUCE;
        return collc_cuda_launch_job(&j, max_blocks, stream);
    }
    /* lossless: deltas into the slot's words, their scan, then the words into the buffer */
    j.what = COLLC_CUDA_JOB_DECODE;
    if ((err = collc_cuda_launch_job(&j, max_blocks, stream)) != cudaSuccess) return err;
    err = collc_cuda_scan_u32((collc_u32*)(j.slot + s.words), j.n, (collc_u32*)(j.slot + s.wpartials), stream);
    if (err != cudaSuccess) return err;
    j.items = j.n;
    j.what = COLLC_CUDA_JOB_REDUCE_WORDS;
    if (op < 0) /* a plain decode: the words are the values */
        return cudaMemcpyAsync(j.values, j.slot + s.words, 4 * j.n, cudaMemcpyDeviceToDevice, stream);
    return collc_cuda_launch_job(&j, max_blocks, stream);
}

/* Decompress + reduce + compress: the job's chunk op= decode(its slot), then the result encoded into slot `out`.
 * For ebq and sum, one fused pair of kernels (collc_ebq_reduce_*: the reduced values are encoded as they are
 * computed, and written back); otherwise the fused decompress-reduce, then an encode. */
static inline cudaError_t collc_cuda_reduce_encode(struct collc_cuda_job j, collc_u8* out, int op, int max_blocks,
                                                   cudaStream_t stream) {
    const struct collc_cuda_slot s = collc_cuda_slot_of(&j.codec, j.n);
    cudaError_t err;
    if (j.codec.kind != COLLC_CUDA_EBQ || op != 0 /* COLLC_CUDA_SUM */) {
        if ((err = collc_cuda_decode(j, op, max_blocks, stream)) != cudaSuccess) return err;
        j.slot = out;
        return collc_cuda_encode(j, max_blocks, stream);
    }
    j.items = s.items + 1;
    j.what = COLLC_CUDA_JOB_DECODE_SIZES;
    if ((err = collc_cuda_launch_job(&j, max_blocks, stream)) != cudaSuccess) return err;
    err = collc_cuda_scan_u64((collc_u64*)(j.slot + s.scan), s.items + 1, (collc_u64*)(j.slot + s.partials), stream);
    if (err != cudaSuccess) return err;
    j.other = j.slot;
    j.slot = out;
    j.what = COLLC_CUDA_JOB_FUSED_SIZES;
    if ((err = collc_cuda_launch_job(&j, max_blocks, stream)) != cudaSuccess) return err;
    err = collc_cuda_scan_u64((collc_u64*)(out + s.scan), s.items + 1, (collc_u64*)(out + s.partials), stream);
    if (err != cudaSuccess) return err;
    j.what = COLLC_CUDA_JOB_FUSED_BODY;
    return collc_cuda_launch_job(&j, max_blocks, stream);
}

/* hq: adds the payload of slot `other` into the job's slot, as exact integers. */
static inline cudaError_t collc_cuda_add_payloads(struct collc_cuda_job j, const collc_u8* other, int max_blocks,
                                                  cudaStream_t stream) {
    j.what = COLLC_CUDA_JOB_ADD;
    j.other = other;
    j.items = j.n;
    return collc_cuda_launch_job(&j, max_blocks, stream);
}

/* Copies the payload in slot `from` (its size, then its bytes) to slot `to`, on one device. */
static inline cudaError_t collc_cuda_forward(collc_u8* to, const collc_u8* from, const struct collc_cuda_codec* c,
                                             collc_u64 n, int max_blocks, cudaStream_t stream) {
    const struct collc_cuda_slot s = collc_cuda_slot_of(c, n);
    collc_u64 blocks = collc_div_up(collc_div_up(COLLC_CUDA_SLOT_HEADER + s.capacity, 8), COLLC_SCAN_THREADS);
    if (blocks > (collc_u64)max_blocks) blocks = (collc_u64)max_blocks;
    collc_cuda_payload_copy<<<(unsigned)blocks, COLLC_SCAN_THREADS, 0, stream>>>(to, from);
    return cudaGetLastError();
}

#endif /* __CUDACC__ */
#endif /* COLLC_CUDA_CODEC_CUH */
