"""Machine hierarchies (`hierarchy nodes * local`) and procedures on sub-groups (`do ... on GROUP`): the
helpers against brute force, the errors with their positions, and checks over nodes x local from the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli import cli

from collc.diagnostics import CollError, format_error
from collc.elaborate import constants, elaborate, level_splits
from collc.frontend.program import parse_program
from collc.verify.check import check

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

HEAD = """\
algorithm h : allgather
param nodes : int where nodes >= 1
param local : int where local >= 1
hierarchy nodes * local
chunks p
"""


def _error(text: str, **params: int) -> str:
    program = None
    try:
        program = parse_program(text, "h.coll")
        elaborate(program, params)
    except CollError as err:
        return format_error(err, program.sources if program is not None else {"h.coll": text})
    raise AssertionError("no error")


@pytest.mark.parametrize(("nodes", "local"), [(1, 1), (1, 4), (3, 1), (2, 3), (4, 5)])
def test_the_helpers_match_the_row_major_numbering(nodes: int, local: int) -> None:
    text = HEAD + "\n".join(
        [
            "let nodes_of = tuple(node_of(r) for r in 0 .. p)",
            "let locals_of = tuple(local_of(r) for r in 0 .. p)",
            "let members = tuple(tuple(node_ranks(n)) for n in 0 .. nodes)",
            "let across = tuple(tuple(local_ranks(l)) for l in 0 .. local)",
            "let at = tuple(rank_at(n, l) for n in 0 .. nodes for l in 0 .. local)",
            "let level1 = tuple(level_of(r, 1) for r in 0 .. p)",
            "",
        ]
    )
    values = constants(parse_program(text, "h.coll"), {"nodes": nodes, "local": local})
    p = nodes * local
    assert values["p"] == p and values["levels"] == (nodes, local)
    assert values["nodes_of"] == tuple(r // local for r in range(p))
    assert values["locals_of"] == tuple(r % local for r in range(p)) == values["level1"]
    assert values["members"] == tuple(tuple(n * local + i for i in range(local)) for n in range(nodes))
    assert values["across"] == tuple(tuple(n * local + i for n in range(nodes)) for i in range(local))
    assert values["at"] == tuple(range(p))


def test_three_levels_make_a_node_of_the_inner_two() -> None:
    text = HEAD.replace("hierarchy nodes * local", "param gpus : int = 2\nhierarchy nodes * local * gpus")
    values = constants(parse_program(text + "let n = node_of(11)\nlet l = local_of(11)\n", "h.coll"),
                       {"nodes": 3, "local": 2})  # fmt: skip
    assert values["p"] == 12 and values["n"] == 2 and values["l"] == 3


def test_the_helpers_work_in_constraints() -> None:
    text = HEAD.replace("where local >= 1", "where local >= 1 and node_of(p - 1) == 1")
    program = parse_program(text, "h.coll")
    assert elaborate(program, {"nodes": 2, "local": 3}).nranks == 6
    with pytest.raises(CollError, match=r"local=3 violates the constraint node_of\(p - 1\) == 1"):
        elaborate(program, {"nodes": 3, "local": 3})


@pytest.mark.parametrize(
    ("text", "params", "where", "message"),
    [
        (HEAD.replace("where local >= 1", ""), {"nodes": 2, "local": 0}, "h.coll:4:19:",
         "hierarchy level local=0 must be at least 1 (p = nodes * local)"),
        (HEAD.replace("* local", "* gpus"), {"nodes": 2}, "h.coll:4:19:", "hierarchy level 'gpus' is not a parameter"),
        (HEAD.replace("param local : int where local >= 1", "param local : dims"), {"nodes": 2}, "h.coll:4:19:",
         "hierarchy level 'local' must be an int parameter, not dims"),
        (HEAD.replace("* local", "* nodes"), {"nodes": 2}, "h.coll:4:19:", "level nodes is listed twice"),
        (HEAD + "let p = 3\n", {"nodes": 2, "local": 2}, "h.coll:6:1:", "'p' is defined twice (first at line 4)"),
        (HEAD + "hierarchy local * nodes\n", {"nodes": 2, "local": 2}, "h.coll:6:1:",
         "the hierarchy is declared twice (first at line 4)"),
        (HEAD.replace("where nodes >= 1", ""), {"nodes": 100000, "local": 2}, "h.coll:4:1:",
         "p=200000 is out of the supported range"),
        ("algorithm a : allreduce\nparam p : int\nchunks p\nlet x = local_ranks(0)\n", {"p": 2}, "h.coll:4:9:",
         "local_ranks() needs a machine hierarchy: declare one, e.g. 'hierarchy nodes * local'"),
    ],
)  # fmt: skip
def test_bad_hierarchies_are_errors_at_their_place(text: str, params: dict, where: str, message: str) -> None:
    shown = _error(text, **params)
    assert shown.startswith(where) and message in shown, shown


RING = """\
algorithm g : allgather
param p : int where p >= 2
chunks p
include "{lib}"
phase a:
  do ring_allgather_at(1, 0) on {group}
"""


@pytest.mark.parametrize(
    ("group", "message"),
    [
        ("{0, 1}", "rank 2 runs 'do ... on' a group it is not in: (0, 1)"),
        ("0 .. p + 1", "rank 4 of the group is out of range 0..3 (at rank 0)"),
        ("(rank, rank)", "rank 0 is in the group twice (at rank 0)"),
        ("3", "the group of a 'do ... on' must be a set, range or tuple of ranks"),
    ],
)
def test_bad_groups_are_errors_at_the_group(group: str, message: str) -> None:
    text = RING.format(lib=EXAMPLES / "lib" / "ring.coll", group=group)
    shown = _error(text, p=4)
    assert shown.startswith("h.coll:6:33:") and message in shown, shown


def test_a_group_renumbers_ranks_and_p() -> None:
    """A ring on the even ranks and one on the odd ranks: each rank's peers are its group's neighbours."""
    text = RING.format(lib=EXAMPLES / "lib" / "ring.coll", group="range(rank % 2, p, 2)")
    schedule = elaborate(parse_program(text, "h.coll"), {"p": 6})
    sends = {(op.rank, op.peer) for step in schedule.steps for op in step.ops if op.kind.value == "send"}
    assert sends == {(0, 2), (2, 4), (4, 0), (1, 3), (3, 5), (5, 1)}
    first = {(op.rank, tuple(op.chunks)) for op in schedule.steps[0].ops if op.kind.value == "send"}
    assert first == {(r, (r // 2,)) for r in range(6)}  # rank r is rank r // 2 of its group of p = 3
    assert len(schedule.steps) == 2  # p - 1 steps of the group's p = 3
    assert not check(schedule).ok  # each group gathers 3 of the 6 chunks: not an allgather of all


def test_cli_checks_over_nodes_and_local() -> None:
    path = EXAMPLES / "hierarchical" / "hier_allreduce_swing.coll"
    out = cli("check", path, "--param", "nodes=1..4", "--param", "local=1..3", "-j", "1")
    assert out.code == 0, out.text
    assert "correct for every instance" in out.stdout and "9 instance(s) checked, 3 skipped" in out.stdout
    out = cli("check", path, "--param", "nodes=2", "--param", "local=0")
    assert out.code == 2 and "violates the constraint local >= 1" in out.text


def _divisor_pairs(p: int) -> list[tuple[int, int]]:
    return [(n, p // n) for n in range(1, p + 1) if p % n == 0]


@pytest.mark.parametrize("p", [1, 6, 7, 12, 16])
def test_a_total_p_splits_into_every_factorisation(p: int) -> None:
    program = parse_program(HEAD + "phase a:\n  pass\n", "h.coll")
    splits = level_splits(program, {"p": p})
    assert [(s["nodes"], s["local"]) for s in splits] == _divisor_pairs(p)
    fixed = level_splits(program, {"p": p, "local": 2})
    assert fixed == ([{"local": 2, "nodes": p // 2}] if p % 2 == 0 else [])
    three = parse_program(
        HEAD.replace("hierarchy nodes * local", "param g : int\nhierarchy nodes * local * g"), "h.coll"
    )
    triples = {(s["nodes"], s["local"], s["g"]) for s in level_splits(three, {"p": p})}
    brute = {(a, b, c) for a in range(1, p + 1) for b in range(1, p + 1) for c in range(1, p + 1) if a * b * c == p}
    assert triples == brute


def test_a_level_default_fixes_the_split() -> None:
    text = HEAD.replace("param local : int where", "param local : int = 4 where") + "phase a:\n  pass\n"
    program = parse_program(text, "h.coll")
    assert level_splits(program, {"p": 12}) == [{"nodes": 3, "local": 4}]
    assert level_splits(program, {"p": 12, "local": 3}) == [{"nodes": 4, "local": 3}]
    assert level_splits(program, {"p": 10}) == []
    assert elaborate(program, {"p": 8}).nranks == 8


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"p": 8}, "p=8 splits as nodes * local in 4 ways (1 * 8, 2 * 4, 4 * 2, 8 * 1): give the size of a level"),
        ({"p": 7, "local": 2}, "p=7 does not split as nodes * local with local=2"),
        ({"p": 8, "local": 4, "nodes": 3}, "p=8 but nodes * local = 3 * 4 = 12"),
        ({"p": 0}, "p must be an int of at least 1, got 0"),
    ],
)
def test_a_total_p_that_does_not_split_once_is_an_error_at_the_hierarchy(params: dict, message: str) -> None:
    text = HEAD + "phase a:\n  pass\n"
    shown = _error(text, **params)
    assert message in shown and "h.coll:4:1" in shown


def test_a_split_p_gives_the_same_schedule_as_the_levels() -> None:
    program = parse_program((EXAMPLES / "hierarchical" / "hier_allreduce_swing.coll").read_text(),
                            str(EXAMPLES / "hierarchical" / "hier_allreduce_swing.coll"))  # fmt: skip
    by_p = elaborate(program, {"p": 12, "local": 3})
    by_levels = elaborate(program, {"nodes": 4, "local": 3})
    assert by_p.steps == by_levels.steps and by_p.nranks == 12


def test_cli_takes_ranks_for_a_hierarchy() -> None:
    path = EXAMPLES / "hierarchical" / "hier_allreduce_ring.coll"
    out = cli("check", path, "-p", "2..8", "-j", "1")
    assert out.code == 0, out.text
    assert sum(len(_divisor_pairs(p)) for p in range(2, 9)) == 19
    assert "19 instance(s) checked" in out.stdout
    out = cli("check", path, "-p", "2..12", "--param", "local=2", "-j", "1")
    assert out.code == 0 and "6 instance(s) checked" in out.stdout, out.text
    out = cli("run", path, "-p", "8", "--param", "local=4")
    assert out.code == 0 and "nodes=2 local=4" in out.stdout and "all results correct" in out.stdout, out.text
    out = cli("run", path, "-p", "8")
    assert out.code == 2 and "p=8 splits as nodes * local in 4 ways" in out.text
    out = cli("sim", path, "--topology", "fattree:4", "--node", "nvlink:4", "--sizes", "1MiB")
    assert out.code == 0 and "hier_allreduce_ring" in out.stdout, out.text
