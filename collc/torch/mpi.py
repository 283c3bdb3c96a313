"""MPI for the torch backend: one MPI world per job, and an MPI communicator per process group.

Under ``mpiexec`` the processes already form an MPI world; torch's ranks must
be MPI's (`fill_env_from_mpi` sets torch's ``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT`` from MPI when the launcher did not).

Under ``torchrun`` there is no process manager for MPI: every process would
start as a singleton world of one.  The first collc group builds one instead
(`init_world`): its rank 0 starts a PMI server (`collc.torch.pmi`), announces
its address through the group's store, and every member connects to it and
hands the connected socket to MPI as ``PMI_FD`` with ``PMI_RANK`` (its rank in
the group) and ``PMI_SIZE``, exactly as ``mpiexec`` would, before MPI is
initialized.  MPI's own transports (shared memory, TCP, ...) then carry the
data; the server only takes part in start-up and shutdown.

A group's communicator (`group_comm`) is a duplicate of the world when the
group is the world, otherwise ``MPI_Comm_create_group`` over its members
(collective over the members only, as torch creates subgroups).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from collc.backends.mpitools import OVERSUBSCRIBE_ENV
from collc.torch.pmi import process_mapping

__all__ = ["MpiSetupError", "fill_env_from_mpi", "group_comm", "init_world", "launched_by_mpi"]

_LAUNCHER_VARS = ("PMI_FD", "PMI_PORT", "PMIX_RANK", "OMPI_COMM_WORLD_RANK")
"""Variables that a process started by an MPI launcher (MPICH's hydra, Open MPI, PMIx) has."""


class MpiSetupError(RuntimeError):
    """MPI cannot give the group a communicator; the message says why and what to do."""


_lock = threading.Lock()
_world_ranks: tuple[int, ...] | None = None  # torch global rank of each MPI world rank
_pmi_socket: int | None = None  # the PMI connection's descriptor, open until the process ends


def launched_by_mpi() -> bool:
    """Whether an MPI launcher (mpiexec, mpirun, srun with PMI) started this process."""
    return any(os.environ.get(var) for var in _LAUNCHER_VARS)


def _mpi_loaded() -> Any | None:
    """mpi4py's MPI module if it was imported (importing it initializes MPI), else None."""
    return sys.modules.get("mpi4py.MPI")


def fill_env_from_mpi() -> bool:
    """Under an MPI launcher, set torch's env:// variables that are missing from MPI; whether it did.

    ``RANK`` and ``WORLD_SIZE`` become MPI's; ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` those
    of the node's shared-memory communicator; ``MASTER_ADDR`` and ``MASTER_PORT`` a free port
    of MPI rank 0's host, broadcast to every rank.  Nothing is changed when ``RANK``,
    ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` are all set already.
    """
    wanted = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    if not launched_by_mpi() or all(os.environ.get(v) for v in wanted):
        return False
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    node = world.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    address: tuple[str, int] | None = None
    if rank == 0:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("", 0))
            address = (socket.gethostname(), probe.getsockname()[1])
    address = world.bcast(address, root=0)
    assert address is not None
    values = {
        "RANK": str(rank),
        "WORLD_SIZE": str(size),
        "LOCAL_RANK": str(node.Get_rank()),
        "LOCAL_WORLD_SIZE": str(node.Get_size()),
        "MASTER_ADDR": address[0],
        "MASTER_PORT": str(address[1]),
    }
    node.Free()
    for key, value in values.items():
        os.environ.setdefault(key, value)
    return True


def _store_get(store: Any, key: str) -> str:
    return bytes(store.get(key)).decode()


def init_world(store: Any, rank: int, size: int, global_ranks: Sequence[int], timeout: timedelta) -> None:
    """Make sure MPI is initialized with a world this group's processes belong to (see the module's doc)."""
    global _world_ranks
    with _lock:
        if _world_ranks is not None:
            return
        loaded = _mpi_loaded()
        if (loaded is not None and loaded.Is_initialized()) or launched_by_mpi():
            from mpi4py import MPI

            _check_thread_level(MPI)
            world = MPI.COMM_WORLD
            if world.Get_size() == 1 and size > 1 and not launched_by_mpi():
                raise MpiSetupError(
                    "collc: MPI was initialized in this process as a world of one (mpi4py imported "
                    f"before the collc group of {size} ranks was created): under torchrun, import mpi4py "
                    "after dist.init_process_group(...), or launch with mpiexec"
                )
            _world_ranks = tuple(range(world.Get_size()))
            return
        _start_world(store, rank, size, timeout)
        _world_ranks = tuple(global_ranks)


def _start_world(store: Any, rank: int, size: int, timeout: timedelta) -> None:
    """The torchrun case: a PMI server at rank 0 and MPI initialized in every member (see the module's doc)."""
    global _pmi_socket
    store.set(f"collc/pmi/host/{rank}", socket.gethostname())
    if rank == 0:
        hosts = [_store_get(store, f"collc/pmi/host/{r}") for r in range(size)]
        command = [
            sys.executable, "-I", str(Path(__file__).with_name("pmi.py")), "--size", str(size), "--kvsname",
            f"collc_{secrets.token_hex(6)}", "--mapping", process_mapping(hosts), "--timeout",
            str(max(timeout.total_seconds(), 60.0)), "--detach",
        ]  # fmt: skip
        with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as starter:
            assert starter.stdout is not None
            port = starter.stdout.readline().strip()
        if not port.isdigit():
            raise MpiSetupError(f"collc: the PMI server did not start ({' '.join(command)})")
        store.set("collc/pmi/hosts", json.dumps(hosts))
        store.set("collc/pmi/address", f"{socket.gethostname()} {_reachable_address()} {port}")
    host, ip, port = _store_get(store, "collc/pmi/address").split()
    hosts = json.loads(_store_get(store, "collc/pmi/hosts"))
    conn = _connect([(ip, int(port)), (host, int(port))])
    conn.settimeout(None)  # blocking, as MPI expects its PMI descriptor
    _pmi_socket = conn.detach()  # MPI owns it from now on: Python must never close it
    local = hosts.count(hosts[rank])
    env = {"PMI_FD": str(_pmi_socket), "PMI_RANK": str(rank), "PMI_SIZE": str(size)}
    if local > (os.cpu_count() or 1):
        for key, value in OVERSUBSCRIBE_ENV.items():
            os.environ.setdefault(key, value)
    os.environ.update(env)
    try:
        from mpi4py import MPI
    finally:
        for key in env:  # a process this one starts must not take this connection for its own
            os.environ.pop(key, None)
    _check_thread_level(MPI)
    if MPI.COMM_WORLD.Get_size() != size or MPI.COMM_WORLD.Get_rank() != rank:
        raise MpiSetupError(
            f"collc: MPI started as rank {MPI.COMM_WORLD.Get_rank()} of {MPI.COMM_WORLD.Get_size()}, "
            f"expected rank {rank} of {size} (is the MPI library MPICH, as collc installs it?)"
        )


def _reachable_address() -> str:
    """This host's address on the interface that reaches the torch store's host (else its name's)."""
    target = os.environ.get("MASTER_ADDR") or "127.0.0.1"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((target, int(os.environ.get("MASTER_PORT", "29500") or 29500)))
            return str(probe.getsockname()[0])
    except OSError:
        return socket.gethostbyname(socket.gethostname())


def _connect(candidates: list[tuple[str, int]]) -> socket.socket:
    errors = []
    for host, port in candidates:
        try:
            return socket.create_connection((host, port), timeout=30)
        except OSError as err:
            errors.append(f"{host}:{port}: {err}")
    raise MpiSetupError("collc: cannot reach the PMI server of rank 0: " + "; ".join(errors))


def _check_thread_level(mpi: Any) -> None:
    if mpi.Query_thread() < mpi.THREAD_MULTIPLE:
        raise MpiSetupError(
            "collc: the collc backend runs MPI from a thread of each group and needs MPI_THREAD_MULTIPLE; "
            "MPI was initialized with less (mpi4py.rc.thread_level must stay 'multiple')"
        )


def group_comm(global_ranks: Sequence[int], group_rank: int) -> Any:
    """An MPI communicator of the group's processes, ranked as the group ranks them."""
    from mpi4py import MPI

    assert _world_ranks is not None, "init_world first"
    world = MPI.COMM_WORLD
    members = list(global_ranks)
    if members == list(_world_ranks):
        comm = world.Dup()
    else:
        missing = [r for r in members if r not in _world_ranks]
        if missing:
            raise MpiSetupError(
                f"collc: ranks {missing} are not in the MPI world of this job (global ranks "
                f"{list(_world_ranks)}): create the default group with the collc backend, so that every "
                "process joins MPI"
            )
        group = world.Get_group().Incl([_world_ranks.index(r) for r in members])
        comm = world.Create_group(group, tag=7)
        group.Free()
    if comm.Get_rank() != group_rank or comm.Get_size() != len(members):
        raise MpiSetupError(
            f"collc: the MPI communicator ranks this process {comm.Get_rank()} of {comm.Get_size()}, "
            f"torch ranks it {group_rank} of {len(members)}"
        )
    return comm
