"""Settings for the whole suite: mpi-c libraries are built with ``-Werror`` here, so that a new warning fails a
test rather than reaching users (whose builds warn without stopping: collc.backends.mpi_c.CFLAGS); and every
compiler output is kept in one build cache for the run (collc.backends.buildcache), shared by the
pytest-xdist workers and the `collc` commands the tests start, so that a library generated alike by several
tests is compiled once."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from collc.backends import buildcache

os.environ.setdefault("COLLC_CFLAGS", "-Werror")

_MADE = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    # The controller makes the folder before the workers start; they inherit the variable.
    if buildcache.ENV_VAR not in os.environ and "PYTEST_XDIST_WORKER" not in os.environ:
        path = tempfile.mkdtemp(prefix="collc-build-cache-")
        os.environ[buildcache.ENV_VAR] = path
        config.stash[_MADE] = path


def pytest_unconfigure(config: pytest.Config) -> None:
    path = config.stash.get(_MADE, None)
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)
        os.environ.pop(buildcache.ENV_VAR, None)
