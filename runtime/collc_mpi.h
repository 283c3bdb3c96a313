/* collc_mpi.h: the runtime of collc's mpi-c target, included by every generated collc_<algorithm>.c.
 *
 *   collc_reduce.h  reduction kernels (inline loops, PMPI_Reduce_local for the rest)
 *   collc_exec.h    step tables, element layout, the private communicator, running steps, faults
 *   collc_flow.h    running the tables by dataflow: each message issued as soon as what it waits for is done
 *   collc_zexec.h   running the steps of a schedule with compression points
 *   collc_zcodec.h  the codecs, whole payloads (collc_codecs.h: their per-item functions)
 *   collc_dtype.h   datatypes: the signature a call is decided on, dense layouts, packing
 *   collc_shim.h    admission and fallback, COLLC_SHIM_LOG
 *   collc_check.h   COLLC_SHIM_CHECK: every call compared with the PMPI collective
 *   collc_coll.h    the collectives in MPI's terms
 *   collc_vcoll.h   the collectives whose counts are given at run time (MPI_Allgatherv, MPI_Reduce_scatter)
 *
 * Everything here is static: each generated library carries its own copy, and
 * exports only its collc_<algorithm>_* functions and the MPI_* entry points of
 * its collective.  The only state kept between calls is the attribute keyval
 * (the private communicator and its memory live on the user's communicator),
 * the environment flags read at the first call, the reasons already noted, and
 * the text of the last error.  None of it is protected against concurrent
 * calls from several threads.
 */
#ifndef COLLC_MPI_H
#define COLLC_MPI_H

#include "collc_reduce.h"
#include "collc_exec.h"
#include "collc_flow.h"
#include "collc_zexec.h"
#include "collc_dtype.h"
#include "collc_shim.h"
#include "collc_check.h"
#include "collc_coll.h"
#include "collc_vcoll.h"

#endif /* COLLC_MPI_H */
