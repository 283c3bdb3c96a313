/* collc_dtype.h: datatypes as the collectives see them, and packing.
 *
 * MPI lets the ranks of one collective pass different datatypes, as long as the
 * type signatures (the sequences of basic types) match: a root may broadcast 8
 * MPI_INT that the other ranks receive as one MPI_Type_vector(8, 1, 2, MPI_INT),
 * and a rank may send an allgather block as a vector and receive the blocks as
 * contiguous ints.  Whether a call runs on the schedule must therefore follow
 * from what every rank knows alike (collc_shim.h), never from one rank's layout:
 *
 *   - data movement (allgather, bcast, alltoall): the signature's bytes, count
 *     times MPI_Type_size.  The schedule moves bytes (a schedule with compression
 *     points: the float or double elements of a signature of one basic type,
 *     collc_leaf), so the split into chunks is the same on every rank whatever its
 *     datatype.  A rank whose layout is its packed bytes (collc_dense) lets the
 *     schedule work in its own buffer; any other rank packs its data into
 *     collc's work buffer (MPI_Pack) and unpacks the result from it (MPI_Unpack),
 *     which writes only the bytes of the type map: holes stay as they were.
 *   - reductions: MPI defines predefined ops on predefined datatypes only (MPICH
 *     refuses a derived one with MPI_ERR_OP), so such a call is the MPI library's
 *     to take or refuse on every rank that passes one; user-defined ops are
 *     agreed on by the ranks (collc_shim.h).
 *
 * Packing relies on MPI_Pack's output on one machine being the type map's bytes
 * in order, as collc_fields_of does.
 */
#ifndef COLLC_DTYPE_H
#define COLLC_DTYPE_H

#include <stdlib.h>
#include <string.h>

#include <mpi.h>

static inline MPI_Count collc_type_size(MPI_Datatype dt)
{
    MPI_Count size = 0;
#if MPI_VERSION >= 4
    PMPI_Type_size_c(dt, &size);
#else
    PMPI_Type_size_x(dt, &size);
#endif
    return size;
}

/* A datatype's envelope and contents (MPI_Type_get_envelope / _get_contents, large counts too). */
struct collc_contents {
    int combiner;
    MPI_Count ni, na, nc, nd;
    int *ints;
    MPI_Aint *addrs;
    MPI_Count *counts;
    MPI_Datatype *types;
    void *block;
};

static inline int collc_combiner(MPI_Datatype dt)
{
    int combiner = MPI_COMBINER_NAMED;
#if MPI_VERSION >= 4
    MPI_Count ni, na, nc, nd;
    PMPI_Type_get_envelope_c(dt, &ni, &na, &nc, &nd, &combiner);
#else
    int ni, na, nd;
    PMPI_Type_get_envelope(dt, &ni, &na, &nd, &combiner);
#endif
    return combiner;
}

/* Fills k for a derived datatype; 0 when that fails (out of memory). */
static inline int collc_contents_of(MPI_Datatype dt, struct collc_contents *k)
{
    size_t bytes;
    char *at;
    memset(k, 0, sizeof *k);
#if MPI_VERSION >= 4
    if (PMPI_Type_get_envelope_c(dt, &k->ni, &k->na, &k->nc, &k->nd, &k->combiner) != MPI_SUCCESS) return 0;
#else
    {
        int ni, na, nd;
        if (PMPI_Type_get_envelope(dt, &ni, &na, &nd, &k->combiner) != MPI_SUCCESS) return 0;
        k->ni = ni, k->na = na, k->nd = nd;
    }
#endif
    if (k->combiner == MPI_COMBINER_NAMED) return 1;
    bytes = (size_t)k->nd * sizeof(MPI_Datatype) + (size_t)k->na * sizeof(MPI_Aint) +
            (size_t)k->nc * sizeof(MPI_Count) + (size_t)k->ni * sizeof(int) + 1;
    k->block = malloc(bytes);
    if (k->block == NULL) return 0;
    at = (char *)k->block;
    k->types = (MPI_Datatype *)at, at += (size_t)k->nd * sizeof(MPI_Datatype);
    k->addrs = (MPI_Aint *)at, at += (size_t)k->na * sizeof(MPI_Aint);
    k->counts = (MPI_Count *)at, at += (size_t)k->nc * sizeof(MPI_Count);
    k->ints = (int *)at;
#if MPI_VERSION >= 4
    if (PMPI_Type_get_contents_c(dt, k->ni, k->na, k->nc, k->nd, k->ints, k->addrs, k->counts, k->types) !=
        MPI_SUCCESS)
#else
    if (PMPI_Type_get_contents(dt, (int)k->ni, (int)k->na, (int)k->nd, k->ints, k->addrs, k->types) != MPI_SUCCESS)
#endif
    {
        free(k->block);
        k->block = NULL, k->nd = 0;
        return 0;
    }
    return 1;
}

/* Frees what collc_contents_of allocated, the derived datatypes it returned included. */
static inline void collc_contents_free(struct collc_contents *k)
{
    for (MPI_Count i = 0; i < k->nd; i++)
        if (collc_combiner(k->types[i]) != MPI_COMBINER_NAMED) PMPI_Type_free(&k->types[i]);
    free(k->block);
    k->block = NULL, k->nd = 0;
}

/* Whether n elements of `dt` lie in memory as their packed bytes: from the buffer's start, in the order of
 * the type map, without holes or gaps between elements.  Such a buffer is used as it is; any other is packed.
 * Derived datatypes other than duplicates, contiguous and resized ones are tested by packing one element of
 * labelled bytes (extents up to 64 KiB; larger ones are packed). */
static inline int collc_dense(MPI_Datatype dt)
{
    MPI_Count size = collc_type_size(dt);
    MPI_Aint lb = 0, extent = 0, true_lb = 0, true_extent = 0;
    struct collc_contents k;
    int dense = 0;
    PMPI_Type_get_extent(dt, &lb, &extent);
    PMPI_Type_get_true_extent(dt, &true_lb, &true_extent);
    if (size != (MPI_Count)extent || lb != 0 || true_lb != 0 || true_extent != extent) return 0;
    if (size == 0 || collc_combiner(dt) == MPI_COMBINER_NAMED) return 1;
    if (!collc_contents_of(dt, &k)) return 0;
    if ((k.combiner == MPI_COMBINER_DUP || k.combiner == MPI_COMBINER_CONTIGUOUS ||
         k.combiner == MPI_COMBINER_RESIZED) && k.nd == 1) {
        dense = collc_dense(k.types[0]); /* whole elements of a dense type, back to back */
    } else if (extent <= 65536) {
        unsigned char *elem = (unsigned char *)malloc((size_t)extent * 2);
        dense = elem != NULL;
        for (int pass = 0; dense && pass < (extent > 256 ? 2 : 1); pass++) {
            unsigned char *packed = elem + extent;
            int position = 0;
            for (MPI_Aint j = 0; j < extent; j++) elem[j] = (unsigned char)(j >> (8 * pass));
            dense = PMPI_Pack(elem, 1, dt, packed, (int)extent, &position, MPI_COMM_SELF) == MPI_SUCCESS &&
                    position == (int)extent;
            for (MPI_Aint j = 0; dense && j < extent; j++) dense = packed[j] == (unsigned char)(j >> (8 * pass));
        }
        free(elem);
    }
    collc_contents_free(&k);
    return dense;
}

/* The one predefined datatype that the type map of `dt` is made of: *leaf is set to it (it stays
 * MPI_DATATYPE_NULL for an empty type).  Returns 0 when the map mixes several, or cannot be read.  A
 * Fortran REAL of a given precision counts as MPI_FLOAT or MPI_DOUBLE of its size. */
static inline int collc_leaf_scan(MPI_Datatype dt, MPI_Datatype *leaf, int depth)
{
    struct collc_contents k;
    int ok = 1;
    if (collc_type_size(dt) == 0) return 1; /* adds nothing to the signature */
    if (depth > 64) return 0;
    if (collc_combiner(dt) == MPI_COMBINER_NAMED) {
        if (*leaf != MPI_DATATYPE_NULL && *leaf != dt) return 0;
        *leaf = dt;
        return 1;
    }
    if (!collc_contents_of(dt, &k)) return 0;
    if (k.combiner == MPI_COMBINER_F90_REAL) {
        MPI_Count size = collc_type_size(dt);
        MPI_Datatype as = size == (MPI_Count)sizeof(float) ? MPI_FLOAT
                          : size == (MPI_Count)sizeof(double) ? MPI_DOUBLE : MPI_DATATYPE_NULL;
        ok = as != MPI_DATATYPE_NULL && (*leaf == MPI_DATATYPE_NULL || *leaf == as);
        if (ok) *leaf = as;
    } else if (k.nd == 0) {
        ok = 0; /* F90 integer and complex types: not float or double data */
    }
    for (MPI_Count i = 0; ok && i < k.nd; i++) {
        if (k.combiner == MPI_COMBINER_STRUCT) { /* a member of no blocks adds nothing */
            MPI_Count blocks = k.nc > 0 ? k.counts[1 + i] : (MPI_Count)k.ints[1 + i];
            if (blocks == 0) continue;
        }
        ok = collc_leaf_scan(k.types[i], leaf, depth + 1);
    }
    collc_contents_free(&k);
    return ok;
}

/* Packs n elements of `dt` at `buf` into `bytes` contiguous bytes at `out` (a dense type: a copy). */
static inline int collc_pack(const void *buf, MPI_Count n, MPI_Datatype dt, int dense, char *out, MPI_Count bytes)
{
    if (bytes == 0) return MPI_SUCCESS;
    if (dense) {
        if (out != (const char *)buf) memmove(out, buf, (size_t)bytes);
        return MPI_SUCCESS;
    }
#if MPI_VERSION >= 4
    {
        MPI_Count position = 0;
        return PMPI_Pack_c(buf, n, dt, out, bytes, &position, MPI_COMM_SELF);
    }
#else
    {
        int position = 0;
        return PMPI_Pack(buf, (int)n, dt, out, (int)bytes, &position, MPI_COMM_SELF);
    }
#endif
}

/* Unpacks `bytes` contiguous bytes at `in` into n elements of `dt` at `buf` (only the bytes of its type map). */
static inline int collc_unpack(const char *in, MPI_Count bytes, void *buf, MPI_Count n, MPI_Datatype dt, int dense)
{
    if (bytes == 0) return MPI_SUCCESS;
    if (dense) {
        if ((char *)buf != in) memmove(buf, in, (size_t)bytes);
        return MPI_SUCCESS;
    }
#if MPI_VERSION >= 4
    {
        MPI_Count position = 0;
        return PMPI_Unpack_c(in, bytes, &position, buf, n, dt, MPI_COMM_SELF);
    }
#else
    {
        int position = 0;
        return PMPI_Unpack(in, (int)bytes, &position, buf, (int)n, dt, MPI_COMM_SELF);
    }
#endif
}

#endif /* COLLC_DTYPE_H */
