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

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from collc.backends import (
    cuda,
    local,
    local_codecs,
    mpi_c,
    mpi_c_anyp,
    mpi_cuda,
    mpi_cuda_anyp,
    mpi_launch,
    mpi_py,
    msccl,
    order,
    tables,
)
from collc.collectives import count_error, layout_error
from collc.diagnostics import CollError
from collc.elaborate import elaborate
from collc.elaborate.codec_ops import codec_table, override_codecs
from collc.elaborate.driver import missing_param, param_problem
from collc.elaborate.emitter import MAX_SLOTS
from collc.frontend.program import Program, load_program, parse_program
from collc.ir import Collective, ParamValue, Schedule, schedule_to_json
from collc.resources import data_dir
from collc.verify.check import CheckReport, check
from collc.verify.compression import analyse

BACKENDS = ("local", "mpi", "mpi-py", "mpi-c", "cuda", "mpi-cuda")
"""Where `Instance.run` executes: numpy in this process, MPI processes running the generated mpi-py (``mpi`` or
``mpi-py``) or mpi-c code, the cuda executor (virtual ranks on this machine's GPUs), or the mpi-cuda executor (one MPI
process per GPU)."""

MPI_BACKENDS = ("mpi", "mpi-py", "mpi-c")

COUNTS_BACKENDS = ("local", "cuda", "mpi-cuda")
"""The backends `Instance.run` and ``collc run --counts`` run counts given at run time on."""

TARGETS = ("mpi-py", "mpi-c", "cuda", "mpi-cuda")

"""What `Instance.compile` generates."""

ANY_P_VERIFIED = 64
"""`Algorithm.compile_any_p` verifies the schedule at p = 1 .. this one unless told otherwise: the library it builds
serves those sizes (the others the constraints allow go to the MPI library, with the reason)."""

ANY_P_PROOF_LIMIT = MAX_SLOTS
"""The largest p the all-p proof covers (p x chunks <= 2^28: no instance of any program has more ranks)."""

ANY_P_PROOF_BOUND = 16
"""Without an all-p proof, `Algorithm.compile_any_p` checks p = 1 .. this one for a counterexample to report."""

ANY_P_PROOF_SECONDS = 600
"""The time the all-p proof of `Algorithm.compile_any_p` may take (as `collc check --ranks all --time-limit`)."""


EXAMPLE_FOLDERS = (".", "compression", "torus", "hierarchical")
"""Where the bundled examples live in ``examples/``: ``compression/`` holds those with compression
points, ``torus/`` the algorithms for tori (they take ``dims``), ``hierarchical/`` those for machines of
several nodes (they take ``nodes`` and ``local``)."""


def example_path(name: str) -> Path | None:
    """The bundled example called ``name`` (with or without ``.coll``), if there is one."""
    stem = name[:-5] if name.endswith(".coll") else name
    if "/" in stem or "\\" in stem:
        return None
    try:
        root = data_dir("examples")
    except FileNotFoundError:
        return None
    for folder in EXAMPLE_FOLDERS:
        candidate = root / folder / f"{stem}.coll"
        if candidate.is_file():
            return candidate
    return None


def list_examples() -> list[Path]:
    """The bundled examples: those of ``examples/``, then those of the other `EXAMPLE_FOLDERS` in order."""
    root = data_dir("examples")
    return [path for folder in EXAMPLE_FOLDERS for path in sorted((root / folder).glob("*.coll"))]


def resolve_path(name: str | Path) -> Path:
    """A `.coll` file: the path itself when it exists, else a bundled example of that name."""
    path = Path(name)
    if path.is_file():
        return path
    bundled = example_path(str(name))
    if bundled is not None:
        return bundled
    if path.is_dir():
        raise CollError(f"{name} is a folder, not a .coll file (and no bundled example has that name)")
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

    @property
    def codecs(self) -> dict[str, str]:
        """The declared codecs: name -> canonical spec (``{"q": "ebq(eb=0.001)"}``)."""
        return codec_table(self.program)

    def with_codecs(self, codecs: Mapping[str, str]) -> Algorithm:
        """The algorithm with declared codecs replaced (``{"q": "ebq(eb=1e-4)"}``, as ``--codec q=...``)."""
        return Algorithm(override_codecs(self.program, codecs))

    def param_problem(self, name: str, value: ParamValue) -> str | None:
        """Why ``value`` cannot be parameter ``name`` (unknown name, wrong type), or None; constraints aside."""
        return param_problem(self.program, name, value)

    def check_given(self, names: Iterable[str]) -> None:
        """Raise the error of the first parameter without a default that ``names`` leaves out."""
        given = set(names)
        if "p" in given and self.program.hierarchy is not None:  # a total p stands for the levels it splits into
            given |= {level.id for level in self.program.hierarchy.levels}
        for param in self.program.params:
            if param.default is None and param.name not in given:
                raise missing_param(param)

    def instantiate(self, **params: ParamValue) -> Instance:
        """Elaborate with the given parameter values (``p=16``, ``dims=(4, 4)``)."""
        return Instance(self, elaborate(self.program, params))

    def allowed(self, ranks: Iterable[int], **params: ParamValue) -> tuple[list[Instance], list[int]]:
        """The instances for the rank counts in ``ranks`` that the constraints allow, and those they exclude
        (any other error is raised)."""
        kept: list[Instance] = []
        excluded: list[int] = []
        for p in ranks:
            try:
                kept.append(self.instantiate(p=p, **params))
            except CollError as err:
                if "violates the constraint" not in err.message:
                    raise
                excluded.append(p)
        return kept, excluded

    def compile_library(
        self,
        ranks: Iterable[int],
        out_dir: str | Path,
        *,
        params: Mapping[str, ParamValue] | None = None,
        small: Algorithm | None = None,
        small_below: int = mpi_c.SMALL_BELOW,
        build: bool = True,
        exact: bool = False,
    ) -> tuple[list[Path], list[int]]:
        """One mpi-c library running this algorithm at every rank count in ``ranks`` its constraints allow (on
        the schedule of the communicator's size), each schedule verified; with ``small``, calls below
        ``small_below`` bytes run its schedule where its constraints allow it; ``exact``: floating-point
        ``MPI_SUM`` and ``MPI_PROD`` go to the MPI library (`mpi_c.generate`).  The files written and the rank
        counts compiled."""
        ranks = list(ranks)
        kept, _ = self.allowed(ranks, **(params or {}))
        if not kept:
            shown = ", ".join(map(str, ranks[:8])) + (", ..." if len(ranks) > 8 else "")
            try:
                self.instantiate(p=ranks[0], **(params or {}))
            except CollError as err:
                raise CollError(f"no rank count in {shown} is allowed: {err.message}", err.span) from None
        variants = []
        for inst in kept:
            inst._require_verified("compile --target mpi-c")
            variant_small = None
            if small is not None:
                smalls, _ = small.allowed([inst.nranks])
                if smalls:
                    smalls[0]._require_verified("compile --target mpi-c (the small-message schedule)")
                    variant_small = smalls[0].schedule
            variants.append(mpi_c.SizeVariant(inst.schedule, _worst_bounds(inst.schedule), variant_small))
        out = Path(out_dir)
        first = variants[0]
        files = mpi_c.generate(
            first.schedule, out, error_bound=first.error_bound, small=first.small, small_below=small_below,
            sizes=variants[1:], exact=exact,
        )  # fmt: skip
        if build:
            files.append(mpi_c.build(out, first.schedule))
        return files, [v.schedule.nranks for v in variants]

    def compile_any_p(
        self,
        out_dir: str | Path,
        *,
        target: str = "mpi-c",
        params: Mapping[str, ParamValue] | None = None,
        verify_ranks: Iterable[int] | str | None = None,
        verify_up_to: int | None = None,
        jobs: int | None = None,
        build: bool = True,
        on_progress: Callable[[int, int], None] | None = None,
        exact: bool = False,
    ) -> tuple[list[Path], mpi_c_anyp.Coverage]:
        """One library for every communicator size it covers: the program itself in C, which computes a rank's step
        tables at the first call on a communicator of p ranks (``target`` mpi-c: `collc.backends.mpi_c_anyp`;
        mpi-cuda: `collc.backends.mpi_cuda_anyp`, the library and its driver).  ``params`` gives every parameter
        but p (those with a default may be left out).

        The library serves only the sizes covered here; a call on a communicator of another size goes to the MPI
        library (mpi-c) or fails (mpi-cuda), with the reason.  ``verify_ranks``: the rank counts to verify one by
        one (``verify_up_to=N``: 1 .. N; default 1 .. `ANY_P_VERIFIED`), in ``jobs`` processes (default: every
        core) with the fast exact paths of `collc.verify.sweep` (``on_progress(done, total)`` after each); the
        program refuses those the constraints exclude at run time, and a wrong instance is a CollError naming it.
        ``verify_ranks="all"``: the all-p proof (`collc.verify.forall.check_all_p`, as ``collc check --ranks
        all``), covering every p up to its limit; no proof is a CollError with the prover's reason.  ``exact``
        (mpi-c): floating-point ``MPI_SUM`` and ``MPI_PROD`` go to the MPI library.  The files written and the
        `Coverage`."""
        if target not in ("mpi-c", "mpi-cuda"):
            raise CollError(f"one library for any p is built for the mpi-c and mpi-cuda targets, not {target}")
        if verify_ranks is not None and verify_up_to is not None:
            raise CollError("give verify_ranks or verify_up_to, not both")
        values = dict(params or {})
        mpi_c_anyp.check_supported(self.program, values)
        what = f"compile --target {target} -p any"
        if isinstance(verify_ranks, str):
            if verify_ranks.strip().lower() != "all":
                raise CollError(f"verify_ranks: {verify_ranks!r}; expected rank counts or 'all'")
            coverage = self._prove_all_p(values, what)
        else:
            ranks = verify_ranks if verify_ranks is not None else range(1, (verify_up_to or ANY_P_VERIFIED) + 1)
            coverage = self._verify_sizes(sorted(set(ranks)), values, what, jobs, on_progress)
        out = Path(out_dir)
        if target == "mpi-cuda":
            files = mpi_cuda_anyp.generate(self.program, out, values, coverage)
            if build:
                files.extend(mpi_cuda_anyp.build(out, self.program))
            return files, coverage
        agree = self._agreeing_sizes(values, coverage)
        files = mpi_c_anyp.generate(self.program, out, values, coverage, exact=exact, agree=agree)
        if build:
            files.append(mpi_c_anyp.build(out, self.program))
        return files, coverage

    def _agreeing_sizes(self, values: Mapping[str, ParamValue], coverage: mpi_c_anyp.Coverage) -> mpi_c_anyp.Coverage:
        """The covered sizes up to `mpi_c_anyp.ORDER_ANALYSED` at which every rank gets the same bits of a
        floating-point sum (`collc.backends.order`); those the constraints exclude count as agreeing, since the
        program refuses them anyway."""
        agree = []
        if self.program.collective is Collective.ALLREDUCE:
            for lo, hi in coverage.runs:
                for p in range(lo, min(hi, mpi_c_anyp.ORDER_ANALYSED) + 1):
                    try:
                        schedule = elaborate(self.program, {**values, "p": p})
                    except CollError:
                        agree.append(p)
                        continue
                    if order.mixed_orders(schedule) is None:
                        agree.append(p)
        return mpi_c_anyp.Coverage.of_sizes(agree, ())

    def _verify_sizes(
        self,
        ranks: list[int],
        values: Mapping[str, ParamValue],
        what: str,
        jobs: int | None,
        on_progress: Callable[[int, int], None] | None,
    ) -> mpi_c_anyp.Coverage:
        """Every p of ``ranks`` checked (`collc.verify.sweep.sweep`); CollError at the first wrong one, or when the
        constraints allow none."""
        from collc.verify.sweep import SKIPPED, sweep

        if not ranks:
            raise CollError(f"{what}: no rank counts to verify")
        if ranks[0] < 1:
            raise CollError(f"{what}: rank counts start at 1, not {ranks[0]}")
        outcome = sweep(self.program, [{**values, "p": p} for p in ranks], jobs=jobs, on_progress=on_progress)
        for result in outcome.failures:
            p = result.params["p"]
            if result.error is not None:
                raise CollError(f"{what}: p={p}: {result.error.message}", result.error.span)
            findings = result.report.findings if result.report is not None else ()
            if findings:
                first = findings[0]
                raise CollError(f"{what}: the schedule fails verification at p={p}: {first.message}", first.span)
            reason = result.deadlock.message if result.deadlock is not None else "it does not verify"
            raise CollError(f"{what}: the schedule fails verification at p={p}: {reason}")
        verified = [p for r in outcome.results if r.status != SKIPPED and isinstance(p := r.params["p"], int)]
        if not verified:
            shown = mpi_c_anyp.Coverage.of_sizes(ranks, ()).text()
            try:
                self.instantiate(p=ranks[0], **values)
            except CollError as err:
                raise CollError(f"{what}: no rank count in {shown} is allowed: {err.message}", err.span) from None
            raise CollError(f"{what}: no rank count in {shown} is allowed")
        return mpi_c_anyp.Coverage.of_sizes(ranks, verified)

    def _prove_all_p(self, values: Mapping[str, ParamValue], what: str) -> mpi_c_anyp.Coverage:
        """The all-p proof's coverage (every p up to its limit), or CollError with why there is no proof."""
        from collc.verify.forall import check_all_p

        ints: dict[str, int] = {}
        for name, value in values.items():
            if not isinstance(value, int):
                raise CollError(f"{what} --verify-ranks all: parameter {name} must be an int, not {value!r}")
            ints[name] = value
        outcome = check_all_p(self.program, ints, bound=ANY_P_PROOF_BOUND, time_limit=ANY_P_PROOF_SECONDS)
        if outcome.status == "proved":
            return mpi_c_anyp.Coverage(((1, ANY_P_PROOF_LIMIT),), (), outcome.how)
        hint = f"verify a range instead (--verify-ranks 1..N; without the option, 1..{ANY_P_VERIFIED})"
        failure = outcome.failure
        if failure is not None:
            p = failure.params["p"]
            if failure.error is not None:
                raise CollError(f"{what} --verify-ranks all: p={p}: {failure.error.message}", failure.error.span)
            findings = failure.report.findings if failure.report is not None else ()
            message = findings[0].message if findings else "it does not verify"
            raise CollError(f"{what} --verify-ranks all: the schedule fails verification at p={p}: {message}",
                            findings[0].span if findings else None)  # fmt: skip
        raise CollError(
            f"{what} --verify-ranks all: no proof for every p: {outcome.how} (every allowed p up to {outcome.bound} "
            f"is correct); {hint}",
            outcome.span,
        )


@dataclass(frozen=True, slots=True)
class Instance:
    """One concrete schedule of an algorithm."""

    algorithm: Algorithm
    schedule: Schedule

    @property
    def nranks(self) -> int:
        return self.schedule.nranks

    def verify(
        self,
        *,
        input_bound: float = 1.0,
        tolerance: float | None = None,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> CheckReport:
        """Check the schedule; with compression points, for inputs ``|x| <= input_bound``, and
        a worst-case error bound above ``tolerance`` is a finding (see `collc.verify.check.check`,
        which calls ``on_progress(done, total)`` after each step)."""
        return check(self.schedule, input_bound=input_bound, tolerance=tolerance, on_progress=on_progress)

    def _require_verified(self, what: str) -> None:
        report = self.verify()
        if not report.ok:
            first = report.findings[0]
            raise CollError(f"{what}: the schedule fails verification: {first.message}", first.span)

    def compile(
        self,
        target: str,
        out_dir: str | Path,
        *,
        build: bool = True,
        verify: bool = True,
        small: Instance | None = None,
        small_below: int = mpi_c.SMALL_BELOW,
        exact: bool = False,
    ) -> list[Path]:
        """Generate the ``target`` executor into ``out_dir`` (and build it, except mpi-py); the files written.

        mpi-c only: ``small`` is a second schedule of the same collective and p that the library runs for
        calls of fewer than ``small_below`` bytes (count times type size), e.g. a latency-optimal one;
        ``exact``: floating-point ``MPI_SUM`` and ``MPI_PROD``, whose last bits depend on the order of the
        operations, go to the MPI library (`mpi_c.generate`)."""
        out = Path(out_dir)
        if target not in TARGETS:
            raise CollError(f"unknown target {target!r}; available: {', '.join(TARGETS)}")
        if small is not None and target != "mpi-c":
            raise CollError(f"a small-message schedule applies to the mpi-c target only, not {target}")
        if verify:
            self._require_verified(f"compile --target {target}")
            if small is not None:
                small._require_verified(f"compile --target {target} (the small-message schedule)")
        if target == "mpi-py":
            return mpi_py.generate(self.schedule, out)
        if target == "mpi-cuda":
            files = mpi_cuda.generate(self.schedule, out)
            return files + list(mpi_cuda.build(out, self.schedule)) if build else files
        if target == "mpi-c":
            files = mpi_c.generate(
                self.schedule,
                out,
                error_bound=_worst_bounds(self.schedule),
                small=small.schedule if small is not None else None,
                small_below=small_below,
                exact=exact,
            )
            if build:
                files.append(mpi_c.build(out, self.schedule))
            return files
        files = cuda.generate(self.schedule, out)
        if build:
            files.append(cuda.build(out, self.schedule))
        return files

    def run_cuda(
        self,
        counts: Sequence[cuda.Count],
        dtype: str = "float32",
        op: str = "sum",
        *,
        iters: int = 1,
        warmup: int = 1,
        seed: int = 0,
        verify: bool = True,
        workdir: str | Path | None = None,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> list[cuda.CudaRow]:
        """Run the generated CUDA executor with the p ranks as virtual ranks on this machine's GPU(s) (a count may be
        the counts of a call given at run time, `cuda.Count`); ``on_progress(done, total)``, when given, is called
        after each count is run (``total``: the counts)."""
        self._check_gpu_run(counts, dtype, op, "cuda", verify)
        return cuda.run(
            self.schedule, counts, dtype, op, iters, warmup=warmup, seed=seed,
            workdir=None if workdir is None else Path(workdir), error_bounds=_error_bounds(self.schedule, dtype),
            on_progress=on_progress,
        )  # fmt: skip

    def _check_gpu_run(self, counts: Sequence[cuda.Count], dtype: str, op: str, backend: str, verify: bool) -> None:
        """CollError for a dtype, op or count the GPU backends cannot run, or an unverified instance (a count may
        be the counts of a call given at run time, `local.counts_offsets`)."""
        if dtype not in local.DTYPES or op not in local.OPS:
            raise CollError(f"unsupported dtype/op {dtype}/{op}; dtypes: {', '.join(local.DTYPES)}")
        for count in counts:
            given = cuda.given_counts(count)
            if given is not None:
                try:
                    local.counts_offsets(self.schedule, given)
                except ValueError as err:
                    raise CollError(str(err)) from None
                continue
            error = count_error(self.schedule.collective, self.nranks, int(count))  # type: ignore[arg-type]
            if error is not None:
                raise CollError(f"{self.schedule.algorithm}: {error}")
        if verify:
            self._require_verified(f"run --backend {backend}")

    def run_mpi_cuda(
        self,
        counts: Sequence[cuda.Count],
        dtype: str = "float32",
        op: str = "sum",
        *,
        iters: int = 1,
        warmup: int = 1,
        seed: int = 0,
        timeout: float = 60.0,
        verify: bool = True,
        workdir: str | Path | None = None,
        mpiexec_args: tuple[str, ...] = (),
        transport: str = "auto",
    ) -> list[mpi_cuda.MpiCudaRow]:
        """Run the generated mpi-cuda executor on ``nranks`` MPI processes, one per visible GPU (ranks share
        GPUs when there are fewer); a count may be the counts of a call given at run time (`cuda.Count`)."""
        mpi_cuda.check_transport(transport)
        self._check_gpu_run(counts, dtype, op, "mpi-cuda", verify)
        return mpi_cuda.run(
            self.schedule, counts, dtype, op, iters, warmup=warmup, seed=seed, timeout=timeout,
            workdir=None if workdir is None else Path(workdir), mpiexec_args=mpiexec_args,
            error_bounds=_error_bounds(self.schedule, dtype), transport=transport,
        )  # fmt: skip

    def run_mpi(
        self,
        counts: list[int],
        dtype: str = "float32",
        op: str = "sum",
        *,
        backend: str = "mpi",
        iters: int = 1,
        warmup: int = 0,
        seed: int = 0,
        timeout: float = 60.0,
        verify: bool = True,
        workdir: str | Path | None = None,
        mpiexec_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        on_progress: Callable[[int, int], None] | None = None,
        mpiexec_prefix: tuple[str, ...] = (),
    ) -> list[mpi_launch.MpiRow]:
        """Run on ``nranks`` MPI processes (``backend`` "mpi" or "mpi-py": the mpi-py module, "mpi-c": the C
        library).  A schedule with compression points is judged by the verifier's error bounds.
        ``on_progress(done, total)``, when given, is called as each count's row arrives (``total``: the counts),
        from a thread of the launcher.  ``mpiexec_prefix``: a command mpiexec runs under (an emulated cluster's
        `collc.netemu.Cluster.mpiexec_prefix`)."""
        if backend not in MPI_BACKENDS:
            raise CollError(f"unknown MPI backend {backend!r}; expected {', '.join(MPI_BACKENDS)}")
        if dtype not in local.DTYPES or op not in local.OPS:
            raise CollError(f"unsupported dtype/op {dtype}/{op}; dtypes: {', '.join(local.DTYPES)}")
        if backend == "mpi-c" and dtype in ("float16", "bfloat16"):
            raise CollError(f"the mpi-c backend has no {dtype}: MPI has no predefined datatype for it")
        if self.schedule.compresses():
            try:
                local_codecs.check_args(self.schedule, dtype, op)
            except ValueError as err:
                raise CollError(str(err)) from None
            if op != "sum" and tables.adds_payloads(self.schedule):
                raise CollError(f"{self.schedule.algorithm} adds homomorphic payloads in a reduce: run it with op sum")
        for count in counts:
            error = count_error(self.schedule.collective, self.nranks, count) or _mpi_count_error(self.schedule, count)
            if error is not None:
                raise CollError(f"{self.schedule.algorithm}: {error}")
        if verify:
            self._require_verified(f"run --backend {backend}")
        kind = "mpi-c" if backend == "mpi-c" else "mpi-py"
        arrived: list[mpi_launch.MpiRow] = []

        def on_row(row: mpi_launch.MpiRow) -> None:
            arrived.append(row)
            if on_progress is not None:
                on_progress(len(arrived), len(counts))

        return mpi_launch.run(
            self.schedule, counts, kinds=(kind,), dtype=dtype, op=op, iters=iters, warmup=warmup, seed=seed,
            timeout=timeout, workdir=None if workdir is None else Path(workdir), mpiexec_args=mpiexec_args,
            error_bounds=_error_bounds(self.schedule, dtype), env=env, c_error_bound=_worst_bounds(self.schedule),
            on_row=on_row if on_progress is not None else None, mpiexec_prefix=mpiexec_prefix,
        )  # fmt: skip

    def run(
        self,
        count: int,
        dtype: str = "float32",
        op: str = "sum",
        *,
        backend: str = "local",
        iters: int = 1,
        seed: int = 0,
        counts: Sequence[int] | None = None,
    ) -> local.RunResult:
        """Run on ``backend`` with random data and count the wrong elements.

        ``counts`` (local backend): counts given at run time, replacing ``count`` (`local.run`)."""
        if counts is not None and backend not in COUNTS_BACKENDS:
            raise CollError(
                f"counts given per rank run on the backends {', '.join(COUNTS_BACKENDS)} here, not {backend}; the "
                "mpi-c library's MPI_Allgatherv, MPI_Reduce_scatter and MPI_Alltoallv and mpi-py's allgatherv, "
                "reduce_scatter_v and alltoallv take them at run time (docs/mpi.md)"
            )
        if backend in (*MPI_BACKENDS, "cuda", "mpi-cuda"):
            row: cuda.CudaRow | mpi_launch.MpiRow | mpi_cuda.MpiCudaRow
            one: cuda.Count = count if counts is None else list(counts)
            if backend == "cuda":
                (row,) = self.run_cuda([one], dtype, op, iters=iters, seed=seed)
            elif backend == "mpi-cuda":
                (row,) = self.run_mpi_cuda([one], dtype, op, iters=iters, seed=seed)
            else:
                (row,) = self.run_mpi([count], dtype, op, backend=backend, iters=iters, seed=seed)
            errors = (row.max_abs_error, row.error_bound)
            dt = local.DTYPES[dtype]
            return local.RunResult(
                self.schedule.algorithm, self.nranks, count, count * dt.itemsize, dtype, op, iters, row.avg_us,
                row.wrong, *errors,
            )  # fmt: skip
        if backend != "local":
            raise CollError(f"unknown backend {backend!r}; available: {', '.join(BACKENDS)}")
        s = self.schedule
        try:
            bounds = _error_bounds(s, dtype) if counts is None else None
            return local.run(s, count, dtype, op, seed=seed, iters=iters, error_bounds=bounds, counts=counts)
        except ValueError as err:
            raise CollError(str(err)) from None

    def to_json(self) -> dict[str, Any]:
        return schedule_to_json(self.schedule)

    def to_msccl_xml(self, *, proto: str = "Simple", min_bytes: int = 0, max_bytes: int = 1 << 40) -> str:
        """The schedule as MSCCL-IR XML for MSCCL runtimes (docs/msccl.md); it must verify first."""
        self._require_verified("export --format msccl-xml")
        return msccl.to_xml(msccl.lower(self.schedule, proto=proto, min_bytes=min_bytes, max_bytes=max_bytes))


def _error_bounds(schedule: Schedule, dtype: str) -> np.ndarray | None:
    """For a schedule with compression points, the verifier's error bound per (rank, chunk) slot that the
    executors judge their results by: the inputs are uniform in [-1, 1], so the bounds for |x| <= 1."""
    s = schedule
    if s.compresses() and layout_error(s.collective, s.nranks, s.nchunks) is None and dtype in local.DTYPES:
        return analyse(s, input_bound=1.0, dtype=dtype).bound
    return None


def _worst_bounds(schedule: Schedule) -> tuple[float, float] | None:
    """For a schedule with compression points, the verifier's worst-case error bound of an output element for
    inputs |x| <= 1, on float32 and on float64 data (what an mpi-c library reports); else None."""
    s = schedule
    if not s.compresses() or layout_error(s.collective, s.nranks, s.nchunks) is not None:
        return None
    return tuple(analyse(s, input_bound=1.0, dtype=dt).stats.error_bound for dt in ("float32", "float64"))  # type: ignore[return-value]


def _mpi_count_error(schedule: Schedule, count: int) -> str | None:
    """Counts MPI's API cannot express for the collective (a per-rank block must be whole)."""
    coll, p = schedule.collective, schedule.nranks
    if coll.rank_blocks and count % p:
        return f"{coll.value} over MPI needs an element count divisible by p={p} (equal blocks per rank), got {count}"
    return None
