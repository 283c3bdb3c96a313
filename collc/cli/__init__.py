"""The `collc` command line.  Exit codes: 0 ok, 1 the schedule is wrong, 2 usage or input error.

The `main` group lives in `collc.cli.common`; each module here adds its commands to it.
"""

from collc.cli import building, catalog, checking, interop, pictures, simulation, tune
from collc.cli.common import EXIT_INPUT, EXIT_OK, EXIT_WRONG, main, parse_size, parse_sizes

__all__ = [
    "EXIT_INPUT",
    "EXIT_OK",
    "EXIT_WRONG",
    "building",
    "catalog",
    "checking",
    "interop",
    "main",
    "parse_size",
    "parse_sizes",
    "pictures",
    "simulation",
    "tune",
]
