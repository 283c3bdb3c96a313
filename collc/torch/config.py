"""Which schedule runs each collective of the ``collc`` torch.distributed backend, and how.

Settings come from three places, the first that gives a value winning:
`configure` (in the program, identically on every rank, before the first
collective), the environment (``COLLC_ALLREDUCE=path.coll`` ...), and the
defaults (`DEFAULTS`: bundled examples).  A schedule is a ``.coll`` path or the
name of a bundled example; ``"gloo"`` runs that collective on the group's
inner gloo group instead, quietly.

Environment variables (read when the settings are first needed):

``COLLC_ALLREDUCE``, ``COLLC_ALLGATHER``, ``COLLC_REDUCE_SCATTER``, ``COLLC_BROADCAST``,
``COLLC_GATHER``, ``COLLC_SCATTER``, ``COLLC_BARRIER``, ``COLLC_ALLTOALL``
    the schedule of each collective;
``COLLC_CODEC``
    codec settings for compressed schedules, ``name=spec`` separated by ``;``
    (``q=ebq(eb=1e-4);r=fp16``), as ``collc run --codec``;
``COLLC_TORCH_CHECK``
    ``0`` turns off the agreement check that precedes every collective;
``COLLC_TORCH_CACHE``
    the folder of compiled libraries (default ``$XDG_CACHE_HOME/collc/torch``);
``COLLC_CUDA_ARCH``
    the ``-arch`` the mpi-cuda libraries of CUDA tensors are built for (default:
    the tensor's device, e.g. ``sm_90``);
``COLLC_NVCC_FLAGS``
    more nvcc flags for those builds, split as a shell would (e.g. ``-cudart shared``).
"""

from __future__ import annotations

import os
import shlex
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

__all__ = [
    "COLLECTIVES",
    "DEFAULTS",
    "ENV",
    "GLOO",
    "Settings",
    "configure",
    "current",
    "parse_codecs",
    "reset",
]

COLLECTIVES: tuple[str, ...] = (
    "allreduce", "allgather", "reduce_scatter", "broadcast", "gather", "scatter", "barrier", "alltoall"
)  # fmt: skip
"""The collectives a schedule can serve, by the name `configure` takes.  torch.distributed has no scan or
exscan, so collc's scan and exscan schedules serve nothing here."""

DEFAULTS: dict[str, str] = {
    "allreduce": "swing_bw",
    "allgather": "ring_allgather",
    "reduce_scatter": "ring_reduce_scatter",
    "broadcast": "binomial_broadcast",
    "gather": "binomial_gather",
    "scatter": "binomial_scatter",
    "barrier": "dissemination_barrier",
    "alltoall": "pairwise_alltoall",
}
"""The bundled example that serves each collective unless configured otherwise."""

ENV: dict[str, str] = {name: f"COLLC_{name.upper()}" for name in COLLECTIVES}
"""The environment variable naming each collective's schedule."""

GLOO = "gloo"
"""The schedule value that sends a collective to the inner gloo group."""


@dataclass(frozen=True, slots=True)
class Settings:
    """The resolved settings: a schedule (path, example name or `GLOO`) per collective, and the rest."""

    schedules: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULTS))
    codecs: Mapping[str, str] = field(default_factory=dict)
    check: bool = True
    cache_dir: Path = field(default_factory=lambda: _default_cache())
    cuda_arch: str | None = None  # None: the device's own
    nvcc_flags: tuple[str, ...] = ()

    def schedule(self, collective: str) -> str:
        return self.schedules[collective]


def _default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "collc" / "torch"


def parse_codecs(text: str | Mapping[str, str], where: str) -> dict[str, str]:
    """``"q=ebq(eb=1e-4);r=fp16"`` (or a mapping) -> ``{"q": "ebq(eb=1e-4)", "r": "fp16"}``.

    ``where`` names where the text came from, for errors."""
    if isinstance(text, Mapping):
        items = [(str(k), str(v)) for k, v in text.items()]
    else:
        items = []
        for part in text.split(";"):
            part = part.strip()
            if not part:
                continue
            name, eq, spec = part.partition("=")
            if not eq or not name.strip() or not spec.strip():
                raise ValueError(f"{where}: {part!r} is not a codec setting NAME=SPEC (e.g. q=ebq(eb=1e-4))")
            items.append((name.strip(), spec.strip()))
    out: dict[str, str] = {}
    for name, spec in items:
        if not name.isidentifier():
            raise ValueError(f"{where}: codec name {name!r} is not an identifier")
        out[name] = spec
    return out


def _flag(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name}={value!r}: expected 0 or 1")


def from_environment(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings that the environment gives, defaults elsewhere."""
    env = os.environ if environ is None else environ
    schedules = dict(DEFAULTS)
    for coll, var in ENV.items():
        value = env.get(var, "").strip()
        if value:
            schedules[coll] = value
    settings = Settings(schedules=schedules)
    if env.get("COLLC_CODEC", "").strip():
        settings = replace(settings, codecs=parse_codecs(env["COLLC_CODEC"], "COLLC_CODEC"))
    if env.get("COLLC_TORCH_CHECK", "").strip():
        settings = replace(settings, check=_flag("COLLC_TORCH_CHECK", env["COLLC_TORCH_CHECK"]))
    if env.get("COLLC_TORCH_CACHE", "").strip():
        settings = replace(settings, cache_dir=Path(env["COLLC_TORCH_CACHE"]).expanduser())
    arch = env.get("COLLC_CUDA_ARCH", "").strip()
    if arch:
        if not (arch.startswith("sm_") and arch[3:].rstrip("a").isdigit()):
            raise ValueError(f"COLLC_CUDA_ARCH={arch!r}: expected an nvcc -arch such as sm_90")
        settings = replace(settings, cuda_arch=arch)
    if env.get("COLLC_NVCC_FLAGS", "").strip():
        try:
            flags = tuple(shlex.split(env["COLLC_NVCC_FLAGS"]))
        except ValueError as err:
            raise ValueError(f"COLLC_NVCC_FLAGS={env['COLLC_NVCC_FLAGS']!r}: {err}") from None
        settings = replace(settings, nvcc_flags=flags)
    return settings


_lock = threading.Lock()
_overrides: dict[str, object] = {}
_generation = 0


def configure(
    *,
    allreduce: str | os.PathLike[str] | None = None,
    allgather: str | os.PathLike[str] | None = None,
    reduce_scatter: str | os.PathLike[str] | None = None,
    broadcast: str | os.PathLike[str] | None = None,
    gather: str | os.PathLike[str] | None = None,
    scatter: str | os.PathLike[str] | None = None,
    barrier: str | os.PathLike[str] | None = None,
    alltoall: str | os.PathLike[str] | None = None,
    codec: str | Mapping[str, str] | None = None,
    check: bool | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Settings:
    """Choose the schedules (and codec settings) of the collc backend; returns the settings now in force.

    Call it on every rank with the same arguments, before the collectives it
    should affect: groups look their schedules up at their first collective of
    each kind and keep them.  An argument left out keeps its current value;
    the environment and `DEFAULTS` fill in what was never configured.
    """
    global _generation
    given: dict[str, object] = {}
    for name, value in (
        ("allreduce", allreduce), ("allgather", allgather), ("reduce_scatter", reduce_scatter),
        ("broadcast", broadcast), ("gather", gather), ("scatter", scatter), ("barrier", barrier),
        ("alltoall", alltoall),
    ):  # fmt: skip
        if value is not None:
            text = os.fspath(value)
            if not text.strip():
                raise ValueError(f"collc.torch.configure: {name} must name a .coll file, an example or 'gloo'")
            given[name] = text
    if codec is not None:
        given["codec"] = parse_codecs(codec, "collc.torch.configure(codec=...)")
    if check is not None:
        given["check"] = bool(check)
    if cache_dir is not None:
        given["cache_dir"] = Path(cache_dir).expanduser()
    with _lock:
        _overrides.update(given)
        _generation += 1
    return current()


def reset() -> None:
    """Forget what `configure` set (the environment and defaults apply again)."""
    global _generation
    with _lock:
        _overrides.clear()
        _generation += 1


def generation() -> int:
    """A number that changes at every `configure` or `reset` (groups compare it to refresh their choices)."""
    return _generation


def current() -> Settings:
    """The settings in force: `configure`'s, then the environment's, then the defaults."""
    settings = from_environment()
    with _lock:
        given = dict(_overrides)
    schedules = dict(settings.schedules)
    for coll in COLLECTIVES:
        if coll in given:
            schedules[coll] = str(given[coll])
    out = replace(settings, schedules=schedules)
    if "codec" in given:
        out = replace(out, codecs=dict(given["codec"]))  # type: ignore[call-overload]
    if "check" in given:
        out = replace(out, check=bool(given["check"]))
    if "cache_dir" in given:
        out = replace(out, cache_dir=Path(str(given["cache_dir"])))
    return out
