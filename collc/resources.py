"""Where the files that ship with collc live (grammar, templates, runtime, examples).

In an installed wheel they sit in ``collc/_data/``; in a checkout (or an
editable install) they are the top-level folders of the repository.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """The folder ``name`` (``grammar``, ``codegen``, ``runtime``, ``examples``)."""
    installed = _PACKAGE / "_data" / name
    if installed.is_dir():
        return installed
    checkout = _PACKAGE.parent / name
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"collc data folder {name!r} is missing from the installation")
