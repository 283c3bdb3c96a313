"""Settings for the whole suite: mpi-c libraries are built with ``-Werror`` here, so that a new warning fails a
test rather than reaching users (whose builds warn without stopping: collc.backends.mpi_c.CFLAGS)."""

from __future__ import annotations

import os

os.environ.setdefault("COLLC_CFLAGS", "-Werror")
