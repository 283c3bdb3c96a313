"""Finding and driving the MPI installation: ``mpiexec``, ``mpicc`` and the environment they need.

collc uses the MPICH that ``pip install`` puts next to the Python interpreter
(the ``mpich`` wheel); an MPI found on ``PATH`` is used when there is none
there.  ``COLLC_MPIEXEC`` and ``COLLC_MPICC`` name others explicitly.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from collc.diagnostics import CollError

__all__ = ["OVERSUBSCRIBE_ENV", "mpi_env", "mpicc", "mpiexec", "tool"]

OVERSUBSCRIBE_ENV: dict[str, str] = {
    "MPIR_CVAR_POLLS_BEFORE_YIELD": "1",
    "MPIR_CVAR_CH4_PROGRESS_THROTTLE": "true",
    "MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT": "1",
}
"""MPICH settings that make ranks yield the CPU instead of busy-polling when ranks outnumber cores."""


def tool(name: str, env_var: str) -> Path:
    """The MPI tool ``name``: ``$env_var``, else next to this Python, else on PATH."""
    explicit = os.environ.get(env_var)
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise CollError(f"{env_var}={explicit}: no such file")
        return path
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return beside
    found = shutil.which(name)
    if found is None:
        raise CollError(
            f"cannot find {name}: install MPICH with 'pip install mpich' (a dependency of collc), "
            f"or set {env_var} to the {name} of another MPI"
        )
    return Path(found)


def mpiexec() -> Path:
    return tool("mpiexec", "COLLC_MPIEXEC")


def mpicc() -> Path:
    return tool("mpicc", "COLLC_MPICC")


def mpi_env(nranks: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for an ``nranks``-process job on this machine.

    When ranks outnumber cores, MPICH's busy-polling makes every call thousands
    of times slower; the `OVERSUBSCRIBE_ENV` settings are added then (a value
    the user set already wins).
    """
    env = dict(os.environ if base is None else base)
    if nranks > (os.cpu_count() or 1):
        for key, value in OVERSUBSCRIBE_ENV.items():
            env.setdefault(key, value)
    return env
