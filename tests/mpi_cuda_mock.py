"""The CPU stand-in for the CUDA runtime that mpi-cuda libraries run on in tests without a GPU.

`build_mock` compiles tests/cuda/mock_cudart.c and tests/mpi_cuda/mock_host.c
(with the codecs of tests/cuda/mock_codecs.cpp) into ``libcudart.so.13``; a
library built with ``nvcc -cudart shared`` and run with ``LD_LIBRARY_PATH``
pointing at that folder moves and reduces host memory as if it were device
memory, running queued operations in an order CUDA's stream and event rules
allow.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNTIME = HERE.parent / "runtime"
MOCK_SOURCES = (HERE / "cuda" / "mock_cudart.c", HERE / "mpi_cuda" / "mock_host.c")


def transport_env(aware: str) -> dict[str, str]:
    """The ranks' transport settings for a test case: "1" CUDA-aware MPI, "0" staged through the host (both with
    COLLC_TRANSPORT=mpi), "ipc" CUDA IPC between the ranks (all on this host; stream-ordered where the schedule
    allows it), "ipc-host" CUDA IPC, host-driven (COLLC_STREAM_ORDERED=0)."""
    if aware in ("ipc", "ipc-host"):
        return {"COLLC_TRANSPORT": "ipc", "COLLC_CUDA_AWARE": "0", "COLLC_STREAM_ORDERED": str(int(aware == "ipc"))}
    return {"COLLC_TRANSPORT": "mpi", "COLLC_CUDA_AWARE": aware}


def mock_settings(mock: Path, aware: str, **more: str) -> dict[str, str]:
    """The environment of ranks on the stand-in (`build_mock`'s folder) with a transport (`transport_env`)."""
    return {"LD_LIBRARY_PATH": str(mock), "MOCK_CUDA_DEVICES": "2", **transport_env(aware), **more}


def build_mock(out: Path) -> Path:
    """``out`` holding the stand-in ``libcudart.so.13``; AssertionError with the compiler's output on failure."""
    (out / "cudart.map").write_text("libcudart.so.13 { global: *; };\n")
    warn = ["-O2", "-Wall", "-Wextra", "-Werror", "-fPIC"]
    codecs = out / "mock_codecs.o"
    compile_codecs = ["c++", "-std=c++17", *warn, "-ffp-contract=off", "-fno-strict-aliasing", "-I", str(RUNTIME)]
    compile_codecs += ["-c", "-o", str(codecs), str(HERE / "cuda" / "mock_codecs.cpp")]
    link = ["cc", *warn, "-shared", "-Wl,-soname,libcudart.so.13", f"-Wl,--version-script={out / 'cudart.map'}"]
    link += ["-o", str(out / "libcudart.so.13"), *map(str, MOCK_SOURCES), str(codecs), "-lstdc++", "-lm"]
    for command in (compile_codecs, link):
        proc = subprocess.run(command, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return out
