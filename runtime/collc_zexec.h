/* collc_zexec.h: running the steps of a schedule with compression points on one rank.
 *
 * The semantics of docs/compression.md, with the codecs of collc_zcodec.h.
 * Every chunk is a payload of its own.  A chunk of the rank is raw (its values
 * in the work buffer) or compressed: then its payload is in its slot
 * (ctx->slots, ctx->zsize[chunk] bytes) and its values in the work buffer are
 * stale until it is decompressed.  A step:
 *
 *   1. the rank's local ops, in order: compress a chunk into its slot, or
 *      decompress a slot into the work buffer;
 *   2. post the receives: a "direct" one (one raw copied run) into the work
 *      buffer, the others into scratch, room for the largest payloads;
 *   3. build and post the sends, in scratch: per run, raw chunks as their
 *      elements, wire runs compressed chunk by chunk (the values as they are at
 *      the start of the step), payload runs as the slots' payloads, unchanged;
 *   4. wait (collc_wait: timeouts and MPI errors end the job);
 *      messages are received with any tag: the tag is a signature of the
 *      step, the count and the datatype (collc_zsig), which must be the
 *      receiver's own.  Payload sizes alone could not tell two counts apart
 *      (ebq's header is the same for 250 and 252 values); matching by order is
 *      safe since both ends derive the sequence of messages between two ranks
 *      from the same tables and MPI keeps it;
 *   5. take every scratch receive apart, chunk by chunk: the payloads need no
 *      size header, their sizes follow from their own headers
 *      (collc_zpayload_bytes); raw data is copied or reduced, a wire payload is
 *      decoded and copied or reduced, a forwarded payload lands in the slot
 *      (copy) or is added to it (reduce: homomorphic codecs).  A message whose
 *      chunks do not add up to its size ends the job.
 *
 * Messages thus have exactly the compressed size.  Lossy codecs work in
 * float32: float64 chunks are rounded first (a value that overflows float32 is
 * refused), as the numpy codecs do; lossless encodes float64 natively.  A value
 * a codec refuses ends the job naming the codec, the chunk and the value: the
 * peers would otherwise wait for a message that cannot be sent correctly.
 */
#ifndef COLLC_ZEXEC_H
#define COLLC_ZEXEC_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <mpi.h>

#include "collc_exec.h"
#include "collc_zcodec.h"

/* Elements of chunk c. */
static inline MPI_Count collc_chunk_elems(const struct collc_ctx *ctx, int c)
{
    return collc_chunk_offset(&ctx->layout, c + 1) - collc_chunk_offset(&ctx->layout, c);
}

static inline char *collc_chunk_at(const struct collc_ctx *ctx, int c)
{
    return ctx->work + collc_chunk_pos(ctx, c) * ctx->extent;
}

static inline int collc_dim(const struct collc_ctx *ctx)
{
    return ctx->extent == 8 ? 2 : 1; /* 32-bit words per value */
}

static inline MPI_Count collc_align8(MPI_Count bytes)
{
    return (bytes + 7) & ~(MPI_Count)7;
}

/* The most bytes run r of a message takes. */
static inline MPI_Count collc_zrun_bytes(const struct collc_ctx *ctx, const struct collc_run *r)
{
    MPI_Count total = 0;
    if (r->how == COLLC_RAW) return collc_runs_elems(ctx, r, 1) * ctx->extent;
    for (int c = r->lo; c < r->hi; c++) {
        MPI_Count n = collc_chunk_elems(ctx, c);
        if (n > 0) total += (MPI_Count)collc_zmax_bytes(&ctx->sched->codecs[r->codec], (collc_u64)n, collc_dim(ctx));
    }
    return total;
}

/* The most bytes message m takes (0: all its chunks are empty, it is not sent). */
static inline MPI_Count collc_zmsg_bytes(const struct collc_ctx *ctx, const struct collc_msg *m,
                                         const struct collc_run *runs)
{
    MPI_Count total = 0;
    for (int k = 0; k < m->nruns; k++) total += collc_zrun_bytes(ctx, &runs[m->first_run + k]);
    return total;
}

/* Whether send m leaves straight from the work buffer: one raw run. */
static inline int collc_zsend_direct(const struct collc_msg *m, const struct collc_run *runs)
{
    return m->nruns == 1 && runs[m->first_run].how == COLLC_RAW;
}

/* Scratch bytes of the busiest step among rows.first .. of one phase (collc_sched.zscratch adds up the phases). */
static inline MPI_Count collc_zphase_scratch(const struct collc_ctx *ctx, const struct collc_msg *msgs,
                                             const struct collc_run *runs, struct collc_span rows)
{
    MPI_Count most = 0, step_bytes = 0;
    for (int i = rows.first; i < rows.first + rows.n; i++) {
        const struct collc_msg *m = &msgs[i];
        if (i > rows.first && m->step != msgs[i - 1].step) step_bytes = 0;
        if (m->kind == COLLC_RECV_DIRECT || (m->kind == COLLC_SEND && collc_zsend_direct(m, runs))) continue;
        step_bytes += collc_align8(collc_zmsg_bytes(ctx, m, runs));
        if (step_bytes > most) most = step_bytes;
    }
    return most;
}

/* Encodes chunk c of the work buffer with `codec` into out (4-byte aligned); returns the payload's size. */
static inline MPI_Count collc_zencode_chunk(struct collc_ctx *ctx, int step, int codec_index, int c, collc_u8 *out)
{
    const struct collc_codec *codec = &ctx->sched->codecs[codec_index];
    const MPI_Count n = collc_chunk_elems(ctx, c);
    const char *at = collc_chunk_at(ctx, c);
    const float *x = (const float *)at;
    collc_u64 bad = COLLC_NONE, bytes;
    if (codec->kind == COLLC_CODEC_LOSSLESS)
        return (MPI_Count)collc_zencode_words((const collc_u32 *)at, (collc_u64)n * collc_dim(ctx), collc_dim(ctx),
                                              out);
    if (ctx->extent == 8) { /* float64: rounded to float32 first */
        const double *d = (const double *)at;
        for (MPI_Count i = 0; i < n; i++) {
            ctx->zf32[i] = (float)d[i];
            if (isfinite(d[i]) && !isfinite(ctx->zf32[i]))
                collc_step_fatal(ctx, step, "%s refuses element %lld of chunk %d: %.17g overflows float32",
                                 codec->spec, (long long)i, c, d[i]);
        }
        x = ctx->zf32;
    }
    bytes = collc_zencode(codec, x, (collc_u64)n, out, &bad);
    if (bytes == COLLC_NONE)
        collc_step_fatal(ctx, step,
                         "%s refuses element %llu of chunk %d (value %.9g): not finite, or beyond what the codec "
                         "encodes (docs/codecs.md); nothing was sent",
                         codec->spec, bad, c, (double)x[bad]);
    return (MPI_Count)bytes;
}

/* Decodes a payload (4-byte aligned) of chunk c's size into dst, as values of the call's datatype. */
static inline void collc_zdecode_chunk(struct collc_ctx *ctx, int codec_index, int c, const collc_u8 *payload,
                                       char *dst)
{
    const struct collc_codec *codec = &ctx->sched->codecs[codec_index];
    const MPI_Count n = collc_chunk_elems(ctx, c);
    if (codec->kind == COLLC_CODEC_LOSSLESS) {
        collc_zdecode_words(payload, (collc_u64)n * collc_dim(ctx), collc_dim(ctx), (collc_u32 *)dst);
    } else if (ctx->extent == 8) {
        collc_zdecode(codec, payload, (collc_u64)n, ctx->zf32);
        for (MPI_Count i = 0; i < n; i++) ((double *)dst)[i] = ctx->zf32[i];
    } else {
        collc_zdecode(codec, payload, (collc_u64)n, (float *)dst);
    }
}

/* Payload `at` (size bytes) at a 4-byte aligned address: itself, or a copy in ctx->zpay. */
static inline const collc_u8 *collc_zaligned(struct collc_ctx *ctx, const collc_u8 *at, MPI_Count size)
{
    if (((uintptr_t)at & 3) == 0) return at;
    memcpy(ctx->zpay, at, (size_t)size);
    return ctx->zpay;
}

static inline void collc_zreduce(struct collc_ctx *ctx, int step, char *dst, const char *src, MPI_Count n)
{
    int err = collc_reduce(ctx->kernel, dst, src, n, ctx->dt, ctx->op, ctx->extent);
    if (err != MPI_SUCCESS) collc_mpi_fatal(ctx, step, err, -1, 0);
}

/* The local ops of one step, in order. */
static inline void collc_zlocal(struct collc_ctx *ctx, int step, const struct collc_local *ops, int nops)
{
    for (int i = 0; i < nops; i++) {
        for (int c = ops[i].lo; c < ops[i].hi; c++) {
            collc_u8 *slot = (collc_u8 *)ctx->slots + (MPI_Count)c * ctx->slot_cap;
            if (collc_chunk_elems(ctx, c) == 0) continue;
            if (!ops[i].decompress) {
                ctx->zsize[c] = collc_zencode_chunk(ctx, step, ops[i].codec, c, slot);
            } else {
                if (ctx->zsize[c] < 0) collc_step_fatal(ctx, step, "decompress of chunk %d, which is raw", c);
                collc_zdecode_chunk(ctx, ops[i].codec, c, slot, collc_chunk_at(ctx, c));
                ctx->zsize[c] = -1;
            }
        }
    }
}

/* Packs send m into `to`; returns its size. */
static inline MPI_Count collc_zpack(struct collc_ctx *ctx, int step, const struct collc_msg *m,
                                    const struct collc_run *runs, char *to)
{
    char *start = to;
    for (int k = 0; k < m->nruns; k++) {
        const struct collc_run *r = &runs[m->first_run + k];
        if (r->how == COLLC_RAW) {
            MPI_Count bytes = collc_runs_elems(ctx, r, 1) * ctx->extent;
            if (bytes > 0) memcpy(to, collc_chunk_at(ctx, r->lo), (size_t)bytes);
            to += bytes;
            continue;
        }
        for (int c = r->lo; c < r->hi; c++) {
            MPI_Count size;
            if (collc_chunk_elems(ctx, c) == 0) continue;
            if (r->how == COLLC_PAYLOAD) {
                size = ctx->zsize[c];
                if (size < 0) collc_step_fatal(ctx, step, "a send of chunk %d's payload, but the chunk is raw", c);
                memcpy(to, ctx->slots + (MPI_Count)c * ctx->slot_cap, (size_t)size);
            } else if (((uintptr_t)to & 3) == 0) {
                size = collc_zencode_chunk(ctx, step, r->codec, c, (collc_u8 *)to);
            } else { /* after an odd-length cast payload: encode aside */
                size = collc_zencode_chunk(ctx, step, r->codec, c, ctx->zpay);
                memcpy(to, ctx->zpay, (size_t)size);
            }
            to += size;
        }
    }
    return (MPI_Count)(to - start);
}

/* Takes receive m (got bytes at `data`) apart into the work buffer and the slots. */
static inline void collc_zunpack(struct collc_ctx *ctx, int step, const struct collc_msg *m,
                                 const struct collc_run *runs, const collc_u8 *data, MPI_Count got)
{
    const MPI_Aint ext = ctx->extent;
    MPI_Count left = got;
    for (int k = 0; k < m->nruns; k++) {
        const struct collc_run *r = &runs[m->first_run + k];
        for (int c = r->lo; c < r->hi; c++) {
            const MPI_Count n = collc_chunk_elems(ctx, c);
            char *dst = collc_chunk_at(ctx, c);
            collc_u8 *slot = (collc_u8 *)ctx->slots + (MPI_Count)c * ctx->slot_cap;
            MPI_Count size;
            const collc_u8 *payload;
            if (n == 0) continue;
            if (r->how == COLLC_RAW) {
                size = n * ext;
                if (size > left)
                    collc_step_fatal(ctx, step,
                                     "received %lld bytes from rank %d, fewer than its chunks take: the ranks called "
                                     "the collective with different counts or datatypes",
                                     (long long)got, m->peer);
                if (r->action == COLLC_REDUCE) {
                    memcpy(ctx->zvals, data, (size_t)size); /* aligned */
                    collc_zreduce(ctx, step, dst, ctx->zvals, n);
                } else {
                    memcpy(dst, data, (size_t)size);
                    ctx->zsize[c] = -1;
                }
                data += size;
                left -= size;
                continue;
            }
            size = (MPI_Count)collc_zpayload_bytes(&ctx->sched->codecs[r->codec], data, (collc_u64)left,
                                                   (collc_u64)n, collc_dim(ctx));
            if ((collc_u64)size == COLLC_NONE)
                collc_step_fatal(ctx, step,
                                 "a malformed message from rank %d: chunk %d's %s payload does not fit in the %lld "
                                 "bytes left (the ranks called the collective with different counts or datatypes)",
                                 m->peer, c, ctx->sched->codecs[r->codec].spec, (long long)left);
            payload = collc_zaligned(ctx, data, size);
            if (r->how == COLLC_PAYLOAD && r->action == COLLC_REDUCE) { /* homomorphic: add the payloads */
                collc_u64 bad;
                if (ctx->zsize[c] != size)
                    collc_step_fatal(ctx, step, "adding payloads of %lld and %lld bytes (chunk %d)",
                                     (long long)ctx->zsize[c], (long long)size, c);
                bad = collc_zhq_add(slot, payload, (collc_u64)n);
                if (bad != COLLC_NONE)
                    collc_step_fatal(ctx, step, "%s: the sum of the payloads leaves int32 at element %llu of chunk %d",
                                     ctx->sched->codecs[r->codec].spec, bad, c);
            } else if (r->how == COLLC_PAYLOAD) {
                memcpy(slot, payload, (size_t)size);
                ctx->zsize[c] = size;
            } else if (r->action == COLLC_REDUCE) {
                collc_zdecode_chunk(ctx, r->codec, c, payload, ctx->zvals);
                collc_zreduce(ctx, step, dst, ctx->zvals, n);
            } else {
                collc_zdecode_chunk(ctx, r->codec, c, payload, dst);
                ctx->zsize[c] = -1;
            }
            data += size;
            left -= size;
        }
    }
    if (left != 0)
        collc_step_fatal(ctx, step,
                         "received %lld bytes from rank %d, its chunks take %lld: the ranks called the collective "
                         "with different counts or datatypes",
                         (long long)got, m->peer, (long long)(got - left));
}

/* The tag of step `step`'s messages: a signature of the step, the call's count and its datatype's extent. */
static inline int collc_zsig(const struct collc_ctx *ctx, int step)
{
    collc_u64 h = (collc_u64)ctx->count * 0x9E3779B97F4A7C15ull;
    h ^= ((collc_u64)ctx->extent << 48) ^ ((collc_u64)(unsigned)step * 0xC2B2AE3D27D4EB4Full);
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return (int)(h % 32768);
}

/* Runs one step of the calling rank: its local ops, then its messages msgs[0 .. n-1]. */
static inline int collc_run_zstep(struct collc_ctx *ctx, int step, const struct collc_msg *msgs, int n,
                                  const struct collc_run *runs, const struct collc_local *ops, int nops)
{
    const int tag = collc_zsig(ctx, step);
    char *scratch = ctx->scratch;
    int nreq = 0, nrecv, err = MPI_SUCCESS;
    collc_zlocal(ctx, step, ops, nops);
    for (int i = 0; i < n && err == MPI_SUCCESS; i++) {
        const struct collc_msg *m = &msgs[i];
        MPI_Count room = collc_zmsg_bytes(ctx, m, runs);
        if (m->kind == COLLC_SEND || room == 0) continue;
        ctx->req_peer[nreq] = m->peer;
        if (m->kind == COLLC_RECV_DIRECT) {
            ctx->landing[nreq] = collc_chunk_at(ctx, runs[m->first_run].lo);
        } else {
            ctx->landing[nreq] = scratch;
            scratch += collc_align8(room);
        }
        err = collc_irecv(ctx->landing[nreq], room, m->peer, MPI_ANY_TAG, ctx->comm, &ctx->reqs[nreq]);
        nreq++;
    }
    nrecv = nreq;
    for (int i = 0; i < n && err == MPI_SUCCESS; i++) {
        const struct collc_msg *m = &msgs[i];
        MPI_Count room = collc_zmsg_bytes(ctx, m, runs), bytes;
        const char *from;
        if (m->kind != COLLC_SEND || room == 0) continue;
        if (collc_zsend_direct(m, runs)) {
            from = collc_chunk_at(ctx, runs[m->first_run].lo);
            bytes = room;
        } else {
            bytes = collc_zpack(ctx, step, m, runs, scratch);
            from = scratch;
            scratch += collc_align8(room);
        }
        ctx->req_peer[nreq] = m->peer;
        err = collc_isend(from, bytes, m->peer, tag, ctx->comm, &ctx->reqs[nreq++]);
        *ctx->wire += bytes;
    }
    if (err != MPI_SUCCESS) collc_mpi_fatal(ctx, step, err, -1, nrecv);
    collc_wait(ctx, step, nreq, nrecv, NULL);
    for (int i = 0, r = 0; i < n; i++) {
        const struct collc_msg *m = &msgs[i];
        MPI_Count room = collc_zmsg_bytes(ctx, m, runs);
        if (m->kind == COLLC_SEND || room == 0) continue;
        if (ctx->statuses[r].MPI_TAG != tag)
            collc_step_fatal(ctx, step,
                             "the message from rank %d belongs to another call (its tag %d, not %d: the signature of "
                             "the step, the count and the datatype): the ranks called the collective with different "
                             "counts or datatypes",
                             m->peer, ctx->statuses[r].MPI_TAG, tag);
        if (m->kind == COLLC_RECV_DIRECT) {
            collc_check_received(ctx, step, r, room);
            for (int c = runs[m->first_run].lo; c < runs[m->first_run].hi; c++) ctx->zsize[c] = -1;
        } else {
            collc_zunpack(ctx, step, m, runs, (const collc_u8 *)ctx->landing[r], collc_received(&ctx->statuses[r]));
        }
        r++;
    }
    return MPI_SUCCESS;
}

/* Runs the calling rank's rows of one phase: messages msgs[rows.first ..], local ops ops[op_rows.first ..], step
 * by step (a step may have local ops only). */
static inline int collc_run_zphase(struct collc_ctx *ctx, const struct collc_msg *msgs, const struct collc_run *runs,
                                   struct collc_span rows, const struct collc_local *ops, struct collc_span op_rows)
{
    int i = rows.first, iend = rows.first + rows.n, k = op_rows.first, kend = op_rows.first + op_rows.n;
    while (i < iend || k < kend) {
        int step = i < iend ? msgs[i].step : ops[k].step, j = i, l = k, err;
        if (k < kend && ops[k].step < step) step = ops[k].step;
        while (j < iend && msgs[j].step == step) j++;
        while (l < kend && ops[l].step == step) l++;
        err = collc_run_zstep(ctx, step, msgs + i, j - i, runs, ops + k, l - k);
        if (err != MPI_SUCCESS) return err;
        i = j;
        k = l;
    }
    return MPI_SUCCESS;
}

#endif /* COLLC_ZEXEC_H */
