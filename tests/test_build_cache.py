"""The build cache (collc.backends.buildcache): an output is shared between folders holding the same files,
never across a changed source or header, a changed command or compiler variable, a failed build, or a
command whose output would remember its folder."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from collc.backends import buildcache, csource
from collc.backends.mpitools import mpicc
from collc.diagnostics import CollError

MAIN = '#include "value.h"\nint collc_value(void) { return VALUE; }\n'


def _folder(root: Path, name: str, value: int) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "lib.c").write_text(MAIN)
    (folder / "value.h").write_text(f"#define VALUE {value}\n")
    return folder


def _command(folder: Path, *extra: str) -> list[str]:
    return [
        str(mpicc()),
        "-shared",
        "-fPIC",
        *extra,
        "-I",
        str(folder),
        "-o",
        str(folder / "lib.so"),
        str(folder / "lib.c"),
    ]


def _value(lib: Path) -> int:
    """The value the built library returns (so that a copied output is checked to be the right one)."""
    return ctypes.CDLL(str(lib)).collc_value()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv(buildcache.ENV_VAR, str(path))
    return path


def test_same_files_elsewhere_share_one_build(tmp_path: Path, cache: Path) -> None:
    a, b = _folder(tmp_path, "a", 7), _folder(tmp_path, "b", 7)
    csource.run_compiler(_command(a), a, a / "lib.c")
    assert len(list(cache.iterdir())) == 1
    csource.run_compiler(_command(b), b, b / "lib.c")
    assert len(list(cache.iterdir())) == 1  # a hit: nothing new stored
    assert _value(b / "lib.so") == 7


def test_a_changed_header_command_or_variable_builds_again(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = _folder(tmp_path, "a", 7), _folder(tmp_path, "b", 8)
    csource.run_compiler(_command(a), a, a / "lib.c")
    csource.run_compiler(_command(b), b, b / "lib.c")
    assert _value(a / "lib.so") == 7 and _value(b / "lib.so") == 8
    c = _folder(tmp_path, "c", 7)
    csource.run_compiler(_command(c, "-DUNUSED=1"), c, c / "lib.c")
    monkeypatch.setenv("CPATH", str(tmp_path))
    d = _folder(tmp_path, "d", 7)
    csource.run_compiler(_command(d), d, d / "lib.c")
    assert len(list(cache.iterdir())) == 4


def test_failures_and_folder_bound_outputs_are_not_kept(tmp_path: Path, cache: Path) -> None:
    a = _folder(tmp_path, "a", 7)
    (a / "value.h").write_text("#define VALUE (\n")
    with pytest.raises(CollError, match="failed on"):
        csource.run_compiler(_command(a), a, a / "lib.c")
    assert not cache.exists() or not list(cache.iterdir())
    b = _folder(tmp_path, "b", 7)
    bound = _command(b, f"-Wl,-rpath,{b}")
    assert buildcache.key(bound, b) is None
    csource.run_compiler(bound, b, b / "lib.c")
    assert not cache.exists() or not list(cache.iterdir())
    assert _value(b / "lib.so") == 7


def test_off_without_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(buildcache.ENV_VAR, raising=False)
    assert buildcache.cache_dir() is None
    a = _folder(tmp_path, "a", 3)
    csource.run_compiler(_command(a), a, a / "lib.c")
    assert _value(a / "lib.so") == 3
