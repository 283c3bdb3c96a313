"""The Python API of collc; the CLI and `collc.testing` sit on top of it.

>>> import collc
>>> alg = collc.load("examples/swing_bw.coll")
>>> inst = alg.instantiate(p=16)
>>> inst.verify().ok
True
>>> inst.run(count=1000).wrong
0
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collc.backends import local
from collc.diagnostics import CollError
from collc.elaborate import elaborate
from collc.frontend.program import Program, load_program, parse_program
from collc.ir import Collective, ParamValue, Schedule, schedule_to_json
from collc.resources import data_dir
from collc.verify.check import CheckReport, check

BACKENDS = ("local",)


def example_path(name: str) -> Path | None:
    """The bundled example called ``name`` (with or without ``.coll``), if there is one."""
    stem = name[:-5] if name.endswith(".coll") else name
    try:
        candidate = data_dir("examples") / f"{stem}.coll"
    except FileNotFoundError:
        return None
    return candidate if candidate.is_file() else None


def list_examples() -> list[Path]:
    return sorted(data_dir("examples").glob("*.coll"))


def resolve_path(name: str | Path) -> Path:
    """A `.coll` file: the path itself when it exists, else a bundled example of that name."""
    path = Path(name)
    if path.exists():
        return path
    bundled = example_path(str(name))
    if bundled is not None:
        return bundled
    raise CollError(f"no such file: {name} (and no bundled example of that name; see 'collc examples')")


def load(path: str | Path) -> Algorithm:
    """Load a `.coll` file (or a bundled example by name)."""
    return Algorithm(load_program(resolve_path(path)))


def parse(text: str, file: str = "<input>") -> Algorithm:
    """Load a program from text."""
    return Algorithm(parse_program(text, file))


@dataclass(frozen=True, slots=True)
class Algorithm:
    """A loaded program, not yet given parameter values."""

    program: Program

    @property
    def name(self) -> str:
        return self.program.name

    @property
    def collective(self) -> Collective:
        return self.program.collective

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.program.params)

    @property
    def sources(self) -> dict[str, str]:
        return self.program.sources

    def instantiate(self, **params: ParamValue) -> Instance:
        """Elaborate with the given parameter values (``p=16``, ``dims=(4, 4)``)."""
        return Instance(self, elaborate(self.program, params))


@dataclass(frozen=True, slots=True)
class Instance:
    """One concrete schedule of an algorithm."""

    algorithm: Algorithm
    schedule: Schedule

    @property
    def nranks(self) -> int:
        return self.schedule.nranks

    def verify(self) -> CheckReport:
        return check(self.schedule)

    def run(
        self,
        count: int,
        dtype: str = "float32",
        op: str = "sum",
        *,
        backend: str = "local",
        iters: int = 1,
        seed: int = 0,
    ) -> local.RunResult:
        """Run on ``backend`` with random data and count the wrong elements."""
        if backend != "local":
            raise CollError(f"unknown backend {backend!r}; available: {', '.join(BACKENDS)}")
        try:
            return local.run(self.schedule, count, dtype, op, seed=seed, iters=iters)
        except ValueError as err:
            raise CollError(str(err)) from None

    def to_json(self) -> dict[str, Any]:
        return schedule_to_json(self.schedule)
