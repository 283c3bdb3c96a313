"""Semantics of the .coll expression language and statements, against Python as the reference."""

from __future__ import annotations

import math
import random

import pytest

from collc.diagnostics import CollError
from collc.elaborate import constants, elaborate
from collc.frontend.program import parse_program
from collc.ir import ChunkSet, OpKind
from collc.values import Range

HEADER = "algorithm t : allreduce\nparam p : int = 4\nchunks p\n"


def value_of(expr: str, p: int = 4, extra: str = "") -> object:
    program = parse_program(f"{HEADER}{extra}\nlet result = {expr}\n", "t.coll")
    return constants(program, {"p": p})["result"]


def as_list(v: object) -> list[int]:
    assert isinstance(v, ChunkSet)
    return v.ids().tolist()


@pytest.mark.parametrize("a", [-7, -3, -1, 0, 1, 5, 12])
@pytest.mark.parametrize("b", [-4, -1, 3, 5])
def test_integer_arithmetic_matches_python(a: int, b: int) -> None:
    assert value_of(f"({a}) + ({b})") == a + b
    assert value_of(f"({a}) * ({b})") == a * b
    assert value_of(f"({a}) // ({b})") == a // b
    assert value_of(f"({a}) % ({b})") == a % b
    assert value_of(f"({a}) mod ({b})") == a % abs(b)  # mathematical: never negative
    assert value_of(f"({a}) & ({b})") == a & b
    assert value_of(f"({a}) | ({b})") == a | b
    assert value_of(f"({a}) ^ ({b})") == a ^ b
    assert value_of(f"({a}) < ({b})") == (a < b)


def test_mod_is_mathematical_for_negatives() -> None:
    assert value_of("-1 mod 8") == 7
    assert value_of("(-13) mod 5") == 2
    assert value_of("(3 - 10) mod p", p=4) == 1


def test_power_shift_precedence_and_exact_division() -> None:
    assert value_of("-2 ** 2") == -4
    assert value_of("(-2) ** 3") == -8
    assert value_of("2 ** 3 ** 2") == 2**9
    assert value_of("1 << 10 >> 3") == 128
    assert value_of("(1 - (-2) ** 5) / 3") == 11
    assert value_of("1 + 2 * 3 - 4 // 2") == 5


@pytest.mark.parametrize("x", [1, 2, 3, 4, 5, 7, 8, 9, 1000, 1024, 1025])
def test_log2_family(x: int) -> None:
    assert value_of(f"log2({x})") == x.bit_length() - 1
    assert value_of(f"ceil_log2({x})") == (x - 1).bit_length()
    assert value_of(f"is_pow2({x})") == (x & (x - 1) == 0)
    assert value_of(f"pow2_floor({x})") == 1 << (x.bit_length() - 1)


def test_conditionals_and_chained_comparisons() -> None:
    assert value_of("10 if p > 3 else 20", p=4) == 10
    assert value_of("10 if p > 3 else 20", p=2) == 20
    assert value_of("0 <= 2 < 3 <= 3") is True
    assert value_of("0 <= 5 < 3") is False
    assert value_of("not (1 == 2) and (true or false)") is True


def test_sets_ranges_comprehensions() -> None:
    assert as_list(value_of("{3, 1, 2}")) == [1, 2, 3]
    assert as_list(value_of("(0 .. 6) - {2, 4}")) == [0, 1, 3, 5]
    assert as_list(value_of("{1, 2} | {5}")) == [1, 2, 5]
    assert as_list(value_of("(0 .. 10) & (5 .. 20)")) == [5, 6, 7, 8, 9]
    assert as_list(value_of("{x * x for x in 0 .. 5 if x % 2 == 1}")) == [1, 9]
    assert as_list(value_of("union({x, x + 10} for x in 0 .. 3)")) == [0, 1, 2, 10, 11, 12]
    assert value_of("sum(x for x in 1 .. 5)") == 10
    assert value_of("len({x mod 3 for x in 0 .. 100})") == 3
    assert value_of("3 in 0 .. 4") is True
    assert value_of("4 not in {1, 2}") is True
    assert value_of("{} == set(0 .. 0)") is True
    assert value_of("min({7, 3, 9})") == 3 and value_of("max(1, 8, 2)") == 8
    assert value_of("reversed(0 .. 4)") == Range(3, -1, -1)
    assert value_of("tuple(reversed({1, 5, 3}))") == (5, 3, 1)


def test_random_set_algebra_matches_python() -> None:
    rng = random.Random(7)
    for _ in range(40):
        a = set(rng.sample(range(64), rng.randrange(0, 20)))
        b = set(rng.sample(range(64), rng.randrange(0, 20)))
        lit_a = "{" + ", ".join(map(str, sorted(a))) + "}" if a else "{}"
        lit_b = "{" + ", ".join(map(str, sorted(b))) + "}" if b else "{}"
        assert as_list(value_of(f"{lit_a} | {lit_b}")) == sorted(a | b)
        assert as_list(value_of(f"{lit_a} & {lit_b}")) == sorted(a & b)
        assert as_list(value_of(f"{lit_a} - {lit_b}")) == sorted(a - b)
        assert as_list(value_of(f"{lit_a} ^ {lit_b}")) == sorted(a ^ b)


def test_user_functions_recursion_and_block_bodies() -> None:
    extra = """
fn fib(n) = n if n < 2 else fib(n - 1) + fib(n - 2)
fn even_odd(n):
  let half = n // 2
  assert n >= 0, "n must be non-negative"
  return (half, n - 2 * half)
"""
    assert value_of("fib(80)", extra=extra) == 23416728348467685  # memoised: instant
    assert value_of("even_odd(9)", extra=extra) == (4, 1)
    assert value_of("even_odd(9)[1]", extra=extra) == 1


def test_swing_prelude_matches_reference() -> None:
    # rho(s) = 1, -1, 3, -5, 11, -21 (Jacobsthal with alternating sign), swing.md §1
    assert [value_of(f"swing_rho({s})") for s in range(6)] == [1, -1, 3, -5, 11, -21]
    p = 16
    for r in range(p):
        for s in range(4):
            rho = (1 - (-2) ** (s + 1)) // 3
            want = (r + rho) % p if r % 2 == 0 else (r - rho) % p
            assert value_of(f"swing_peer({r}, {s})", p=p) == want
    # |S(r, s)| = p / 2^(s+1) for power-of-two p (swing.md §2)
    for s in range(4):
        assert len(as_list(value_of(f"swing_blocks(5, {s})", p=p))) == p >> (s + 1)


def test_shift_moves_every_element_of_a_set() -> None:
    rng = random.Random(11)
    for _ in range(30):
        a = set(rng.sample(range(40, 200), rng.randrange(0, 12)))
        lit = "{" + ", ".join(map(str, sorted(a))) + "}" if a else "{}"
        for k in (0, 3, 64, 1000, -40):
            assert as_list(value_of(f"shift({lit}, {k})")) == sorted(x + k for x in a)
    assert as_list(value_of("shift(2 .. 5, p)", p=16)) == [18, 19, 20]  # a range is a set too
    assert as_list(value_of("shift(3, 1)")) == [4]


@pytest.mark.parametrize(
    ("expr", "phrase"),
    [("shift({3}, -4)", "non-negative"), ("shift({1}, 1 << 40)", "beyond the limit"), ("shift(1 .. 3, {1})", "an int")],
)
def test_shift_errors(expr: str, phrase: str) -> None:
    with pytest.raises(CollError, match=phrase):
        value_of(expr)


def test_torus_prelude_matches_the_swing_pseudo_code() -> None:
    """The prelude's torus_dim/torus_sigma and swing_torus_peer against swing.md §1's loop."""

    def reference(r: int, dims: tuple[int, ...], c: int) -> list[int]:
        D, nxt, last, out = len(dims), [0] * len(dims), c - 1, []
        a = [r // math.prod(dims[k + 1 :]) % dims[k] for k in range(D)]
        while len(out) < sum((d - 1).bit_length() for d in dims):
            k = (last + 1) % D
            while nxt[k] >= (dims[k] - 1).bit_length():
                k = (k + 1) % D
            last, dist = k, (1 - (-2) ** (nxt[k] + 1)) // 3
            nxt[k] += 1
            dist = -dist if a[k] % 2 else dist
            dist = -dist if c >= D else dist
            b = list(a)
            b[k] = (a[k] + dist) % dims[k]
            out.append(sum(b[k] * math.prod(dims[k + 1 :]) for k in range(D)))
        return out

    for dims in ((4, 4), (2, 8), (6, 2, 4)):
        text = f"({', '.join(map(str, dims))})"
        steps = sum((d - 1).bit_length() for d in dims)
        for c in range(2 * len(dims)):
            for r in (0, 1, 5, 7):
                got = [value_of(f"swing_torus_peer({r}, {s}, {c}, {text})") for s in range(steps)]
                assert got == reference(r, dims, c), (dims, c, r)
    assert value_of("torus_steps((6, 2, 4))") == 6
    assert [value_of(f"torus_dim((2, 8), 0, {s})") for s in range(4)] == [0, 1, 1, 1]
    assert [value_of(f"torus_sigma((2, 8), 1, {s})") for s in range(4)] == [0, 0, 1, 2]


@pytest.mark.parametrize("dims", [(4, 4), (2, 3, 5), (8,)])
def test_torus_coordinates_row_major(dims: tuple[int, ...]) -> None:
    n = 1
    for d in dims:
        n *= d
    dims_text = "(" + ", ".join(map(str, dims)) + ("," if len(dims) == 1 else "") + ")"
    for r in range(n):
        coords = value_of(f"coords({r}, {dims_text})")
        want, rest = [], r
        for d in reversed(dims):
            want.append(rest % d)
            rest //= d
        assert coords == tuple(reversed(want))
        assert value_of(f"rank_of(coords({r}, {dims_text}), {dims_text})") == r
    # moving along the last dimension wraps within the row
    assert value_of(f"move(0, {dims_text}, {len(dims) - 1}, -1)") == dims[-1] - 1


def test_dims_parameter() -> None:
    program = parse_program(
        "algorithm t : allreduce\nparam dims : dims where len(dims) == 2\nlet p = prod(dims)\nchunks p\n", "t.coll"
    )
    assert constants(program, {"dims": (4, 8)})["p"] == 32


def test_steps_phases_and_multiple_peers_per_step() -> None:
    text = """algorithm t : allgather
param p : int = 4
chunks p
phase first:
  step:
    for d in 1 .. p:
      send rank to (rank + d) mod p
      recv (rank - d) mod p from (rank - d) mod p copy
phase second:
  pass
"""
    schedule = elaborate(parse_program(text, "t.coll"), {"p": 4})
    assert len(schedule.steps) == 1
    step = schedule.steps[0]
    assert step.phase == "first"
    sends = [op for op in step.ops if op.rank == 0 and op.kind is OpKind.SEND]
    assert sorted(op.peer for op in sends) == [1, 2, 3]
    assert all(op.span.line == 7 for op in sends)


def test_each_communication_outside_a_step_is_its_own_step() -> None:
    text = """algorithm t : broadcast
param p : int = 2
param root : int = 0
chunks 1
phase a:
  if rank == 0: send 0 to 1
  else: recv 0 from 0 copy
  if rank == 0: send 0 to 1
  else: recv 0 from 0 copy
"""
    schedule = elaborate(parse_program(text, "t.coll"), {"p": 2})
    assert [len(s.ops) for s in schedule.steps] == [2, 2]


def test_procedures_and_includes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "lib.coll").write_text("proc swap(c):\n  exchange with rank ^ 1: send c; recv c reduce\n")
    main = tmp_path / "main.coll"
    main.write_text(
        'algorithm t : allreduce\nparam p : int = 2\nchunks 1\ninclude "lib.coll"\nphase a:\n  do swap(0)\n'
    )
    from collc.frontend.program import load_program

    schedule = elaborate(load_program(main), {"p": 2})
    assert len(schedule.steps) == 1 and len(schedule.steps[0].ops) == 4
    assert schedule.steps[0].ops[0].span.file.endswith("lib.coll")
