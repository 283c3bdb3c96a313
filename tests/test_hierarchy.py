"""Machine hierarchies (`hierarchy nodes * local`) and procedures on sub-groups (`do ... on GROUP`): the
helpers against brute force, the errors with their positions, and checks over nodes x local from the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli import cli

from collc.diagnostics import CollError, format_error
from collc.elaborate import constants, elaborate
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
