"""collc schedules under torch.distributed: ``import collc.torch`` registers the ``collc`` backend.

::

    import torch.distributed as dist
    import collc.torch

    collc.torch.configure(allreduce="swing_bw", allgather="ring_allgather")   # optional
    dist.init_process_group("collc")          # under torchrun, or mpiexec
    dist.all_reduce(tensor)                    # runs the verified Swing schedule

Each collective runs the schedule configured for it (`configure`, the
``COLLC_*`` environment variables, else `config.DEFAULTS`), verified for the
group's size at its first use and compiled into an mpi-c library; what no
schedule covers runs on an inner gloo group.  docs/torch.md has the details.

Under ``mpiexec``, importing this module sets torch's env:// variables
(``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ...) from MPI when the launcher
did not set them (`collc.torch.mpi.fill_env_from_mpi`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

try:
    import torch.distributed as dist
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError(f"collc.torch needs PyTorch ({err}): pip install 'collc[torch]'") from err

from collc.torch.config import DEFAULTS, GLOO, Settings, configure, current, reset
from collc.torch.mpi import fill_env_from_mpi, launched_by_mpi
from collc.torch.process_group import CollcError, ProcessGroupCollc
from collc.torch.schedules import CODEC_DTYPES, ScheduleError

__all__ = [
    "BACKEND",
    "CODEC_DTYPES",
    "DEFAULTS",
    "GLOO",
    "CollcError",
    "ProcessGroupCollc",
    "ScheduleError",
    "Settings",
    "configure",
    "current",
    "register",
    "reset",
]

BACKEND = "collc"
"""The backend's name for `torch.distributed.init_process_group`."""


def _create(options: Any, backend_options: Any = None) -> ProcessGroupCollc:
    """The creator torch calls for every group of the backend (extended API: it passes the global ranks)."""
    timeout = options.timeout if isinstance(options.timeout, timedelta) else timedelta(seconds=1800)
    return ProcessGroupCollc(
        options.store, options.group_rank, options.group_size, timeout, list(options.global_ranks_in_group)
    )


def register() -> None:
    """Register the ``collc`` backend with torch.distributed (done on import; repeating it is harmless)."""
    if BACKEND in dist.Backend.backend_list:
        return
    dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu", "cuda"])


register()
if launched_by_mpi():
    fill_env_from_mpi()
