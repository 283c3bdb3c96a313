"""Run a generated cuda library on the CPU stand-in for the CUDA runtime (``mock_cudart.c``).

    python mock_run.py LIBMOCK LIBCOLLC EXAMPLE PARAMS_JSON CASES_JSON [CODECS_JSON]

loads LIBMOCK (soname libcudart.so.13) first, so that LIBCOLLC (built with
``nvcc -cudart shared``) binds to it, then runs every case
(``{"dtype", "op", "count", "seed", "devices"}``, optionally ``"null_buffers"`` (pass NULL for every
buffer, as CuPy gives for empty arrays) and ``"own_scratch"``:
pass scratch space of the library's ``scratch_bytes``; ``"counts"`` in place of ``"count"``: counts given at
run time, through ``run_v``, and ``"save"``: a path where the inputs, the results and the library's chunk
offsets go, as an ``.npz``, for the test to judge) on numpy buffers
standing in for device memory, drains the mock's queues in a random valid
order (seeded by the case) and prints one JSON object per case: the wrong elements
(`local.count_wrong`; for a schedule that compresses, `cuda.judge_compressed`:
bit for bit against the numpy executor, and within the error bound), whether the library's chunk layout is collc's, and
the kernel launches and peer copies it took.  Run in a subprocess: the mock
must not meet a real CUDA runtime.
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collc.ir import Schedule


def _cut(schedule: Schedule, counts: list[int]) -> np.ndarray | None:
    """The numpy cut of the chunks by counts given at run time (the library's own is compared with it), also for
    a schedule with chunk weights or compression points (whose library must refuse the counts); None for counts
    that cut nothing (negative, too few: the library must refuse them, and the buffers hold ``count``)."""
    from collc import collectives

    try:
        return collectives.counts_offsets(schedule.collective, schedule.nranks, schedule.nchunks, counts)
    except ValueError:
        return None


def main() -> int:
    mock_path, lib_path, example, params, cases = sys.argv[1:6]
    codecs = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
    mock = ctypes.CDLL(mock_path, mode=ctypes.RTLD_GLOBAL)
    mock.mock_cuda_drain.restype = ctypes.c_long
    mock.mock_cuda_drain.argtypes = [ctypes.c_uint]
    mock.mock_cuda_launches.restype = ctypes.c_long
    mock.mock_cuda_peer_copies.restype = ctypes.c_long

    import collc
    from collc import collectives
    from collc.backends import cuda, local
    from collc.diagnostics import CollError
    from collc.verify.compression import analyse

    schedule = collc.load(example).with_codecs(codecs).instantiate(**json.loads(params)).schedule
    lib = cuda.Library(Path(lib_path), schedule)
    for case in json.loads(cases):
        dtype, op, seed, devices = case["dtype"], case["op"], case["seed"], case["devices"]
        vcounts, count = case.get("counts"), case.get("count", 0)
        offsets = None if vcounts is None else _cut(schedule, vcounts)
        inputs = local.make_inputs(schedule, count, dtype, seed, op=op, offsets=offsets)
        buffers = [np.array(row) for row in inputs]  # one allocation per rank
        scratch = None
        if case.get("own_scratch"):  # the caller's scratch space, NULL where a rank needs none
            if vcounts is None:
                sizes = [lib.scratch_bytes(count, dtype, r) for r in range(schedule.nranks)]
            else:
                sizes = [lib.scratch_bytes_v(vcounts, dtype, r) for r in range(schedule.nranks)]
            scratch = [np.full(size, 0xAB, dtype=np.uint8) if size else None for size in sizes]
        launches, peers = mock.mock_cuda_launches(), mock.mock_cuda_peer_copies()
        try:
            pointers = None if scratch is None else [0 if s is None else s.ctypes.data for s in scratch]
            pointers_in = [0] * len(buffers) if case.get("null_buffers") else [b.ctypes.data for b in buffers]
            if vcounts is None:
                lib.run(pointers_in, count, dtype, op, devices, scratch=pointers)
            else:
                lib.run_v(pointers_in, vcounts, dtype, op, devices, scratch=pointers)
        except CollError as err:
            print(json.dumps({"error": str(err)}), flush=True)
            continue
        if mock.mock_cuda_drain(seed + 1) < 0:
            print(json.dumps({"error": "deadlock: queued work waits for an event that is never reached"}))
            continue
        try:
            lib.check()
        except CollError as err:
            print(json.dumps({"error": str(err)}), flush=True)
            continue
        result = np.stack(buffers)
        row = {}
        if case.get("save"):
            np.savez(case["save"], inputs=inputs, result=result, offsets=lib.layout_v(vcounts))
        if schedule.compresses():
            bounds = analyse(schedule, input_bound=1.0, dtype=dtype).bound  # the inputs lie in [-1, 1]
            judged = cuda.judge_compressed(schedule, result, inputs, op, count, bounds)
            wrong, row["max_abs_error"], row["error_bound"] = judged
        else:
            values, mask = local.expected(schedule, inputs, op, offsets)
            p, reduces = schedule.nranks, schedule.collective.reduces
            wrong = local.count_wrong(result, values, mask, dtype, op, p, reduces=reduces)
        if offsets is None:
            offsets = collectives.element_offsets(
                schedule.collective, schedule.nranks, schedule.nchunks, count, schedule.chunk_weights
            )
        layout = lib.layout(count) if vcounts is None else lib.layout_v(vcounts)
        row |= {
            "wrong": wrong,
            "layout_ok": layout.tolist() == offsets.tolist(),
            "launches": mock.mock_cuda_launches() - launches,
            "peer_copies": mock.mock_cuda_peer_copies() - peers,
        }
        print(json.dumps(row), flush=True)
    lib.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
