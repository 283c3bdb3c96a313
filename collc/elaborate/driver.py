"""Parameters and the driver: binding an instance's parameters and elaborating every rank into a `Schedule`.

`bind_params` and `_bind` check the given values against the declared
parameters (defaults, types, constraints); `_globals` evaluates the global
constants; `elaborate` checks the instance (ranks, chunks, root, assertions),
runs every rank's phases through the compiled code and assembles the steps the
emitter collected into the `Schedule`.  `constants` stops after the globals.
"""

from __future__ import annotations

import gc
import math
import sys
from collections.abc import Callable, Mapping, Sequence

from collc import collectives
from collc.diagnostics import CollError
from collc.elaborate.compiler import _Compiler
from collc.elaborate.emitter import MAX_CALL_DEPTH, MAX_CHUNKS, MAX_RANKS, MAX_SLOTS, Carry, _Emitter
from collc.elaborate.sampling import SamplingConflict, StepSampler
from collc.elaborate.scope import Env, _bool
from collc.elaborate.syntax import _assigned, _source_text
from collc.frontend import ast
from collc.frontend.program import Program
from collc.ir import ParamValue, Schedule, Step
from collc.values import LangError, Value, a_type, as_int, show_value


def bind_params(program: Program, values: Mapping[str, ParamValue]) -> dict[str, ParamValue]:
    """Check the given values against the declared parameters (names, and ints against dims)."""
    declared = {p.name: p for p in program.params}
    for name, value in values.items():
        problem = param_problem(program, name, value)
        if problem is not None:
            raise CollError(problem, declared[name].span if name in declared else program.header.span)
    return dict(values)


def param_problem(program: Program, name: str, value: ParamValue) -> str | None:
    """Why ``value`` cannot be the value of parameter ``name`` (no such parameter, a shape for an int, a bad
    shape); None when it can (its constraint aside)."""
    declared = {p.name: p for p in program.params}
    param = declared.get(name)
    if param is None and name == "p" and program.hierarchy is not None:
        return None if type(value) is int else f"p is an int (the number of ranks), got {value}"
    if param is None:
        names = ", ".join(declared) or "none"
        return f"unknown parameter {name!r} for {program.name} (its parameters: {names})"
    shown = "x".join(map(str, value)) if isinstance(value, tuple) else str(value)
    if param.type == "int" and type(value) is not int:
        return f"parameter {name} is an int, got {shown}"
    if param.type == "dims":
        shape = (value,) if type(value) is int else value
        if not isinstance(shape, tuple) or not shape or not all(type(d) is int and d >= 1 for d in shape):
            return f"parameter {name} needs torus dimensions like 4x4, got {shown}"
    return None


def missing_param(param: ast.Param) -> CollError:
    """The error of a parameter without a default that was given no value."""
    flag = "-p N" if param.name == "p" else f"--param {param.name}=VALUE"
    return CollError(f"missing value for parameter {param.name} (pass {flag})", param.span)


def level_splits(program: Program, values: Mapping[str, ParamValue]) -> list[dict[str, ParamValue]]:
    """The ways a total rank count ``values["p"]`` splits over the levels of ``program``'s hierarchy.

    Each split is ``values`` with ``p`` replaced by one value per level whose product is ``p``.  A level
    given in ``values`` keeps its value; a level left out takes its default when it has one (checked by
    binding without it), and otherwise every divisor that fits.  Splits are listed outermost level first,
    smallest first.  Without a hierarchy or a ``p``, ``[values]``.
    """
    if program.hierarchy is None or "p" not in values:
        return [dict(values)]
    p = values["p"]
    if type(p) is not int or not 1 <= p <= MAX_RANKS:
        return []
    levels = [level.id for level in program.hierarchy.levels]
    rest = {name: value for name, value in values.items() if name != "p"}
    free = [name for name in levels if name not in rest]
    if any(type(rest[name]) is not int for name in levels if name in rest):
        return []
    fixed = math.prod(int(rest[name]) for name in levels if name in rest)  # type: ignore[arg-type]
    if fixed < 1 or p % fixed:
        return []
    splits = [{**rest, **dict(zip(free, parts, strict=True))} for parts in _factorisations(p // fixed, len(free))]
    defaulted = [name for name in free if (param := program.param(name)) is not None and param.default is not None]
    if defaulted:
        splits = [split for split in splits if all(_is_default(program, split, name) for name in defaulted)]
    return splits


def _factorisations(n: int, parts: int) -> list[tuple[int, ...]]:
    """Ordered tuples of ``parts`` positive ints whose product is ``n`` (``()`` for ``n == 1, parts == 0``)."""
    if parts == 0:
        return [()] if n == 1 else []
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    divisors = small + [n // d for d in reversed(small) if d * d != n]
    return [(d, *tail) for d in divisors for tail in _factorisations(n // d, parts - 1)]


def _is_default(program: Program, split: Mapping[str, ParamValue], name: str) -> bool:
    """Whether level ``name`` of ``split`` has the value its default gives next to the other values."""
    without = {key: value for key, value in split.items() if key != name}
    try:
        env = _bind(program, without, lambda globals_: _Compiler(program, globals_, _Emitter(nranks=0, nchunks=0)))
    except CollError:
        return False
    return env.get(name) == split[name]


def resolve_ranks(program: Program, values: Mapping[str, ParamValue]) -> Mapping[str, ParamValue]:
    """``values`` with a total ``p`` for a program with a hierarchy replaced by its one split over the levels;
    a `CollError` at the hierarchy when ``p`` splits in no way or in several."""
    if program.hierarchy is None or "p" not in values:
        return values
    hierarchy = program.hierarchy
    names = [level.id for level in hierarchy.levels]
    product = " * ".join(names)
    p = values["p"]
    if type(p) is not int or p < 1:
        raise CollError(f"p must be an int of at least 1, got {p}", hierarchy.span)
    _check_p(program, p)
    bind_params(program, {name: value for name, value in values.items() if name != "p"})
    splits = level_splits(program, values)
    if len(splits) == 1:
        return splits[0]
    given = ", ".join(f"{name}={values[name]}" for name in names if name in values)
    if not splits and all(name in values for name in names):
        factors = " * ".join(str(values[name]) for name in names)
        raise CollError(
            f"p={p} but {product} = {factors} = {math.prod(int(values[n]) for n in names)}",  # type: ignore[arg-type]
            hierarchy.span,
        )
    if not splits:
        why = f" with {given}" if given else ""
        defaults = [n for n in names if n not in values and (par := program.param(n)) and par.default is not None]
        if defaults:
            why += f"{' and' if given else ' with'} the default of {', '.join(defaults)}"
        raise CollError(f"p={p} does not split as {product}{why}", hierarchy.span)
    shown = ", ".join(" * ".join(str(split[name]) for name in names) for split in splits[:6])
    more = f" and {len(splits) - 6} more" if len(splits) > 6 else ""
    free = next(name for name in reversed(names) if name not in values)
    raise CollError(
        f"p={p} splits as {product} in {len(splits)} ways ({shown}{more}): give the size of a level too, "
        f"e.g. --param {free}={splits[0][free]}",
        hierarchy.span,
    )


def _bind(program: Program, values: Mapping[str, ParamValue], compiler_for: Callable[[Env], _Compiler]) -> Env:
    values = resolve_ranks(program, values)
    bind_params(program, values)
    globals_: Env = {}
    compiler = compiler_for(globals_)
    for param in program.params:
        if param.name in values:
            value = values[param.name]  # checked by bind_params
            if param.type == "dims" and type(value) is int:
                value = (value,)
        elif param.default is not None:
            value = compiler.expr(param.default, frozenset())(globals_)  # type: ignore[assignment]
        else:
            raise missing_param(param)
        globals_[param.name] = value
    if program.hierarchy is not None:
        levels = tuple(globals_[level.id] for level in program.hierarchy.levels)  # ints (checked by bind_params)
        globals_["levels"] = levels  # type: ignore[assignment]
        globals_["p"] = math.prod(levels)
    for param in program.params:
        if param.constraint is not None:
            _check_constraint(program, compiler, param, globals_)
    if program.hierarchy is not None:
        _check_levels(program, globals_)
    if "p" in globals_:
        _check_p(program, globals_["p"])  # before the constants, which may not cope with any p (ceil_log2(0))
    return globals_


def _check_levels(program: Program, globals_: Env) -> None:
    """Every level of the hierarchy is at least 1 (an error at the level's name)."""
    assert program.hierarchy is not None
    for level in program.hierarchy.levels:
        value = globals_[level.id]
        if type(value) is not int or value < 1:
            raise CollError(
                f"hierarchy level {level.id}={value} must be at least 1 (p = "
                f"{' * '.join(lv.id for lv in program.hierarchy.levels)})",
                level.span,
            )


def _check_p(program: Program, p: Value) -> None:
    """The error of a rank count collc does not support, at the declaration of p."""
    pspan = (program.param("p") or program.let("p") or program.hierarchy or program.header).span
    if type(p) is not int:
        raise CollError(f"p must be an int, got {a_type(p)}", pspan)
    if not 1 <= p <= MAX_RANKS:
        raise CollError(f"p={p} is out of the supported range 1..{MAX_RANKS}", pspan)


def _conjuncts(node: ast.Expr) -> list[ast.Expr]:
    if isinstance(node, ast.BoolOp) and node.op == "and":
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [node]


def _check_constraint(program: Program, compiler: _Compiler, param: ast.Param, globals_: Env) -> None:
    assert param.constraint is not None
    for part in _conjuncts(param.constraint):
        try:
            holds = _bool(compiler.expr(part, frozenset())(globals_), part.span, "constraint")
        except CollError:
            if program.hierarchy is not None:
                _check_levels(program, globals_)  # a bad level is the problem to report, not its consequence
            if "p" in globals_:
                _check_p(program, globals_["p"])  # a p out of range is the problem to report, not its consequence
            raise
        if not holds:
            value = globals_[param.name]
            shown = "x".join(map(str, value)) if isinstance(value, tuple) else str(value)
            raise CollError(
                f"{param.name}={shown} violates the constraint {_source_text(program, part.span)}", part.span
            )


def elaborate(
    program: Program,
    values: Mapping[str, ParamValue],
    ranks: Sequence[int] | None = None,
    *,
    max_slots: int = MAX_SLOTS,
    carry: Carry | None = None,
) -> Schedule:
    """Instantiate ``program`` with parameter ``values`` and collect every rank's steps (only the steps of
    ``ranks``, when given: every check of the instance and of those ranks still runs, and the steps hold only
    their ops; the checks across ranks, phases per step and the loop-iteration budget, span the ranks given,
    or the ranks of every elaboration that shares ``carry``).  ``max_slots`` bounds ranks x chunks; a caller
    that keeps state for fewer slots than that (a check that streams the ranks, `collc.verify.symmetry`) may
    raise it."""
    return _guarded(program, values, None, ranks, max_slots, carry)[0]


def elaborate_sampled(
    program: Program, values: Mapping[str, ParamValue], limit: int
) -> tuple[Schedule, tuple[int, ...]]:
    """Like `elaborate`, but a ``for step`` loop of more than ``limit`` iterations runs only ``limit`` of them
    (`collc.elaborate.sampling`): the schedule holds the steps run, and the weights say how many steps each
    stands for.  Where the ranks do not meet the long loops alike, the schedule is exact (every weight 1)."""
    probe = StepSampler(limit, probing=True)
    _guarded(program, values, probe)
    try:
        return _guarded(program, values, StepSampler(limit, changes=probe.changes))
    except SamplingConflict:
        return _guarded(program, values, None)


def _guarded(
    program: Program,
    values: Mapping[str, ParamValue],
    sampler: StepSampler | None,
    ranks: Sequence[int] | None = None,
    max_slots: int = MAX_SLOTS,
    carry: Carry | None = None,
) -> tuple[Schedule, tuple[int, ...]]:
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, 20 * MAX_CALL_DEPTH + 2000))
    # Elaboration makes millions of objects that live on (memos, ops) and no garbage cycles to speak
    # of (the compiled closures are one per instance): the cyclic collector would only re-scan them.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _elaborate(program, values, sampler, ranks, max_slots, carry)
    except RecursionError:
        raise CollError("the program recurses too deeply to evaluate", program.header.span) from None
    finally:
        sys.setrecursionlimit(old_limit)
        if collecting:
            gc.enable()


def constants(program: Program, values: Mapping[str, ParamValue]) -> dict[str, Value]:
    """The parameters and global constants of an instance (no phases are run)."""
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, 20 * MAX_CALL_DEPTH + 2000))
    try:
        compiler, globals_, _ = _globals(program, values)
        compiler.release()
    except RecursionError:
        raise CollError("the program recurses too deeply to evaluate", program.header.span) from None
    finally:
        sys.setrecursionlimit(old_limit)
    return dict(globals_)


def _globals(program: Program, values: Mapping[str, ParamValue]) -> tuple[_Compiler, Env, _Emitter]:
    emitter = _Emitter(nranks=0, nchunks=0)
    compilers: list[_Compiler] = []

    def make(globals_: Env) -> _Compiler:
        compilers.append(_Compiler(program, globals_, emitter))
        return compilers[-1]

    globals_ = _bind(program, values, make)
    compiler = compilers[0]
    for let in program.lets:
        try:
            globals_[let.name] = compiler.expr(let.value, frozenset())(globals_)
        except RecursionError:
            raise CollError(
                f"evaluating constant {let.name} recurses too deeply (deep recursion through deeply nested "
                "expressions)",
                let.span,
            ) from None
        if let.name == "p":
            _check_p(program, globals_["p"])
    compiler.specialise()
    return compiler, globals_, emitter


def _elaborate(
    program: Program,
    values: Mapping[str, ParamValue],
    sampler: StepSampler | None,
    ranks: Sequence[int] | None,
    max_slots: int = MAX_SLOTS,
    carry: Carry | None = None,
) -> tuple[Schedule, tuple[int, ...]]:
    compiler, globals_, emitter = _globals(program, values)
    emitter.sampler = sampler
    if carry is not None:
        emitter.phase_of.update(carry.phase_of)
        if carry.started:
            emitter.iterations_left = carry.iterations_left
        carry.started = True

    p = globals_["p"]
    assert type(p) is int  # checked by _check_p
    for a in program.asserts:
        compiler._assert(a, frozenset())(globals_)

    nchunks_v = compiler.expr(program.chunks.count, frozenset())(globals_)
    try:
        nchunks = as_int(nchunks_v, "the number of chunks")
    except LangError as err:
        raise CollError(str(err), program.chunks.span) from None
    if not 1 <= nchunks <= MAX_CHUNKS:
        raise CollError(f"the number of chunks ({nchunks}) must be in 1..{MAX_CHUNKS}", program.chunks.span)
    if p * nchunks > max_slots:
        power = f" (2^{max_slots.bit_length() - 1})" if max_slots & (max_slots - 1) == 0 else ""
        raise CollError(
            f"{p} ranks x {nchunks} chunks make {p * nchunks} (rank, chunk) slots, beyond the limit of {max_slots}"
            f"{power} that collc keeps state for",
            program.chunks.span,
        )
    layout = collectives.layout_error(program.collective, p, nchunks)
    if layout is not None:
        raise CollError(layout, program.chunks.span)
    chunk_weights = _chunk_weights(compiler, program.chunks.weight, nchunks)

    root: int | None = None
    if program.collective.has_root:
        root_v = globals_["root"]
        if type(root_v) is not int or not 0 <= root_v < p:
            rspan = (program.param("root") or program.header).span
            raise CollError(f"root={root_v} must be a rank in 0..{p - 1}", rspan)
        root = root_v

    emitter.nranks, emitter.nchunks = p, nchunks
    phases = []
    for phase in program.phases:
        local = frozenset({"rank", *_assigned(phase.body)})
        phases.append((phase.name, compiler.block(phase.body, local), phase.span))
    probing = sampler is not None and sampler.probing
    phase_span = program.header.span
    for rank in range(1) if probing else range(p) if ranks is None else [r for r in ranks if 0 <= r < p]:
        emitter.rank, emitter.counter, emitter.in_step = rank, 0, None
        try:
            for name, body, span in phases:
                emitter.phase, phase_span = name, span
                body({"rank": rank})
        except CollError as err:
            raise CollError(err.message, err.span, (*err.notes, f"while elaborating rank {rank}")) from None
        except RecursionError:
            where = (
                f"phase {emitter.phase} recurses too deeply to evaluate (deep recursion through deeply nested "
                "expressions or blocks)"
            )
            raise CollError(where, phase_span, (f"while elaborating rank {rank}",)) from None

    compiler.release()
    if carry is not None:
        carry.phase_of, carry.iterations_left = emitter.phase_of, emitter.iterations_left
    if sampler is not None and probing:
        sampler.changes = StepSampler.changes_of(emitter.ops, emitter.counter)
    steps = []
    counters = sorted(emitter.ops)
    lanes_of = emitter.lanes
    for counter in counters:
        ops = tuple(emitter.ops[counter])
        lanes = tuple(lanes_of.get(id(op)) for op in ops) if lanes_of else None
        if lanes is not None and all(lane is None for lane in lanes):
            lanes = None
        steps.append(Step(index=len(steps), phase=emitter.phase_of[counter][0], ops=ops, lanes=lanes))
    params = tuple((p_.name, globals_[p_.name]) for p_ in program.params)
    weights = sampler.weights(counters) if sampler is not None else (1,) * len(steps)
    schedule = Schedule(
        algorithm=program.name,
        collective=program.collective,
        params=params,  # type: ignore[arg-type]
        nranks=p,
        nchunks=nchunks,
        root=root,
        steps=tuple(steps),
        source=program.path,
        span=program.header.span,
        codecs=tuple(compiler.codecs.items()),
        chunk_weights=chunk_weights,
    )
    return schedule, weights


def _chunk_weights(compiler: _Compiler, weight: ast.ChunkWeight | None, nchunks: int) -> tuple[int, ...] | None:
    """The value of ``weight(c) = EXPR`` for every chunk c (None without one): ints >= 1, adding up to at most
    `collectives.MAX_TOTAL_WEIGHT`."""
    if weight is None:
        return None
    fn = compiler.expr(weight.value, frozenset({weight.var}))
    span = weight.value.span
    out = []
    total = 0
    for c in range(nchunks):
        try:
            value = fn({weight.var: c})
        except CollError as err:
            raise CollError(err.message, err.span, (*err.notes, f"while computing the weight of chunk {c}")) from None
        if type(value) is not int:
            raise CollError(f"the weight of chunk {c} must be an int, not {a_type(value)} ({show_value(value)})", span)
        if value < 1:
            raise CollError(f"the weight of chunk {c} is {value}; a chunk's weight must be an int >= 1", span)
        total += value
        if total > collectives.MAX_TOTAL_WEIGHT:
            raise CollError(
                f"the chunk weights add up to more than 2^32 (chunk {c} brings the sum to {total}): use smaller "
                "weights (they are relative sizes)",
                span,
            )
        out.append(value)
    return tuple(out)
