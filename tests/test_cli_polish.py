"""The command line's rough edges: outputs that cannot be written, runs too large for the machine, the
goodput plot's axes and bound, help texts that agree with the tool, and collc sim on a wrong schedule.

Bad input of any kind is exit 2 with a message naming the problem and where, never a traceback."""

from __future__ import annotations

import dataclasses
import itertools
import re
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import collc
from collc import goodput
from collc.backends import local, mpi_launch
from collc.backends.local_plan import BATCH_MAX_RUN, execute, plan
from collc.cli import main
from collc.cli.common import output_problem
from collc.simulate import NetworkModel
from collc.topologies import parse_topology

ROOT = Path(__file__).resolve().parent.parent
BROKEN = ROOT / "tests" / "torchrun" / "broken.coll"  # an allgather that stops a step early


@dataclasses.dataclass(frozen=True)
class Out:
    code: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        return self.stdout + self.stderr


def cli(*args: str | Path) -> Out:
    try:  # click < 8.2 mixes stderr into stdout unless told otherwise
        runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        runner = CliRunner()
    result = runner.invoke(main, [str(a) for a in args], env={"COLLC_PROGRESS": "never"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Out(result.exit_code, result.stdout, result.stderr)


def bad_input(out: Out, *needles: str) -> None:
    assert out.code == 2, out.text
    assert "Traceback" not in out.text
    for needle in needles:
        assert needle in out.text, out.text


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "a_file"
    path.write_text("a file, not a folder")
    return path


# --------------------------------------------------------------------------
# 1. Outputs that cannot be written
# --------------------------------------------------------------------------


def test_the_probe_names_why_a_path_cannot_be_written(tmp_path: Path, a_file: Path) -> None:
    assert output_problem(tmp_path / "new" / "deeper", folder=True) is None
    assert output_problem(tmp_path / "out.png") is None
    assert output_problem(a_file, folder=True) == f"{a_file} is a file, not a folder"
    assert output_problem(a_file / "out", folder=True) == f"{a_file} is a file, not a folder"
    assert output_problem(a_file / "x.png") == f"{a_file} is a file, not a folder"
    assert output_problem(tmp_path, folder=False) == f"{tmp_path} is a folder"
    assert output_problem(tmp_path / "no" / "x.xml", parents=False) == f"there is no folder {tmp_path / 'no'}"
    assert output_problem("/dev/null", folder=True) == "/dev/null is not a folder"
    assert not list(tmp_path.glob(".collc-probe-*")) and not (tmp_path / "new").exists()  # nothing left behind


@pytest.mark.parametrize("where", ["/dev/null", "/proc/nope", "FILE/out"])
def test_compile_to_an_output_folder_that_cannot_be_made(where: str, a_file: Path) -> None:
    out = cli("compile", "ring_allreduce", "-p", "4", "--target", "mpi-c", "-o", where.replace("FILE", str(a_file)))
    bad_input(out, "cannot write", "(-o)")
    assert out.stdout == ""


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs /proc, where nothing new can be made")
def test_compile_into_proc_says_nothing_can_be_made_there() -> None:
    out = cli("compile", "ring_allreduce", "-p", "4", "--target", "mpi-c", "-o", "/proc/nope")
    bad_input(out, "error: cannot write /proc/nope (-o): nothing can be made in /proc")


def test_sim_plot_that_cannot_be_written_is_refused_before_simulating(a_file: Path) -> None:
    out = cli("sim", "ring_allreduce", "--topology", "ring:4", "--sizes", "1K", "--plot", a_file / "x.png")
    bad_input(out, f"cannot write {a_file / 'x.png'} (--plot): {a_file} is a file, not a folder")


def test_sim_prints_its_table_before_the_picture_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object, **__: object) -> Path:
        raise PermissionError(13, "Permission denied", str(tmp_path / "x.png"))

    monkeypatch.setattr(goodput, "plot", refuse)
    out = cli("sim", "ring_allreduce", "--topology", "ring:4", "--sizes", "1K", "--plot", tmp_path / "x.png")
    bad_input(out, f"cannot write {tmp_path / 'x.png'} (--plot): Permission denied")
    assert "goodput in Gb/s" in out.stdout  # the table came first


def test_run_with_a_workdir_that_cannot_be_made(a_file: Path) -> None:
    out = cli("run", "ring_allreduce", "-p", "4", "--backend", "mpi", "--workdir", a_file / "x")
    bad_input(out, f"cannot write {a_file / 'x'} (--workdir): {a_file} is a file, not a folder")


@pytest.mark.parametrize("command", ["viz", "export"])
def test_viz_and_export_say_why_they_cannot_write(command: str, a_file: Path) -> None:
    out = cli(command, "swing_bw", "-p", "4", "-o", a_file / "x.png" if command == "viz" else a_file / "x.xml")
    bad_input(out, "cannot write", f"{a_file} is a file, not a folder")


# --------------------------------------------------------------------------
# 3. collc run at large p, and sizes beyond the memory
# --------------------------------------------------------------------------


def test_local_refuses_a_schedule_too_large_to_hold_at_once() -> None:
    start = time.perf_counter()
    out = cli("run", "ring_allreduce", "-p", "4096", "--size", "1K")
    bad_input(out, "ring_allreduce at p=4096 has 67,092,480 operations", "--max-memory", "collc check")
    assert time.perf_counter() - start < 60  # counted from a sampled elaboration, not built


def test_local_refuses_a_size_beyond_its_budget_at_once() -> None:
    start = time.perf_counter()
    out = cli("run", "ring_allreduce", "-p", "2048")  # 4 MiB on each of 2048 ranks: 8 GiB
    bad_input(out, "Invalid value for '--size': '4MiB'", "take 8.00 GiB", "the largest size that fits is 2097152")
    assert "max_bytes" not in out.text and "--max-memory raises it" in out.text
    assert time.perf_counter() - start < 30


def test_max_memory_sets_the_local_budget() -> None:
    bad_input(cli("run", "ring_allreduce", "-p", "8", "--size", "4K", "--max-memory", "1K"), "above --max-memory 1K")
    out = cli("run", "ring_allreduce", "-p", "8", "--size", "4K", "--max-memory", "64MiB")
    assert out.code == 0 and "all results correct" in out.stdout, out.text
    bad_input(cli("run", "ring_allreduce", "-p", "8", "--max-memory", "lots"), "'--max-memory': 'lots'")
    out = cli("run", "ring_allreduce", "-p", "8", "--backend", "cuda", "--max-memory", "1G")
    assert out.code == 2 and "--max-memory applies to the local and MPI backends" in out.text


def test_mpi_checks_the_buffers_before_any_rank_allocates_them() -> None:
    start = time.perf_counter()
    out = cli("run", "ring_allreduce", "-p", "4", "--backend", "mpi", "--size", "1TiB")
    bad_input(out, "Invalid value for '--size': '1TiB'", "an input and a result", "8.00 TiB", "this machine's memory")
    assert time.perf_counter() - start < 30
    schedule = collc.load("ring_allreduce").instantiate(p=4).schedule
    with pytest.raises(collc.CollError, match=r"count=268435456 needs 8\.00 GiB .* above the budget of 1\.00 GiB"):
        mpi_launch.run(schedule, [1 << 28], max_bytes=1 << 30)  # refused before anything is generated
    assert mpi_launch.buffer_bytes(schedule, 10, "float64") == 2 * 4 * 10 * 8


def test_a_local_run_shows_its_steps_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from collc.cli import progress

    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    try:
        runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        runner = CliRunner()
    env = {"COLLC_PROGRESS": "always", "TERM": "xterm-256color", "NO_COLOR": None, "FORCE_COLOR": None}
    result = runner.invoke(main, ["run", "ring_allreduce", "-p", "16", "--sizes", "1K:2K"], env=env)
    assert result.exit_code == 0, result.output
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", result.stderr)
    steps = 2 * 15
    for size, which in (("1KiB", 1), ("2KiB", 2)):
        assert f"running ring_allreduce at {size} ({which}/2)" in shown
    assert f"{2 * steps + 1}/{2 * steps + 1}" in shown  # planned, inputs made, run
    assert "all results correct" in result.stdout


def test_a_local_run_counts_its_steps() -> None:
    schedule = collc.load("ring_allreduce").instantiate(p=8).schedule
    calls: list[tuple[int, int]] = []
    assert local.run(schedule, 1000, iters=2, on_progress=lambda d, t: calls.append((d, t))).wrong == 0
    steps = len(schedule.steps)
    assert calls[-1] == (3 * steps + 1, 3 * steps + 1)  # planned, the inputs made, then run twice
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


@pytest.mark.parametrize(
    ("name", "params", "counts"),
    [
        ("ring_allreduce", {"p": 64}, [64 * 3, 1000, 64 * 200]),
        ("ring_allgather", {"p": 33}, [33 * 5]),
        ("swing_bw", {"p": 24}, [24 * 7, 5000]),
        ("pairwise_alltoall", {"p": 16}, [16 * 3]),
        ("bruck_allgather", {"p": 20}, [20 * 9]),
        ("recursive_doubling", {"p": 32}, [777]),
        ("pipelined_ring_allreduce", {"p": 16}, [16 * 40]),
        ("binomial_broadcast", {"p": 12}, [1001]),
        ("ring_reduce_scatter", {"p": 40}, [40 * 6]),
        ("hier_allreduce_swing", {"p": 16, "local": 4}, [1600]),
    ],
)
@pytest.mark.parametrize("dtype", ["float32", "int64", "bfloat16"])
def test_batched_steps_move_what_receive_by_receive_moves(
    name: str, params: dict[str, int], counts: list[int], dtype: str
) -> None:
    """Steps moved in batches give the results, bit for bit, of the same steps moved receive by receive (a
    Fortran-ordered buffer has no flat view, so it takes that path)."""
    schedule = collc.load(name).instantiate(**params).schedule
    for count in counts:
        lowered = plan(schedule, count)
        for op in ("sum", "max"):
            inputs = local.make_inputs(schedule, count, dtype, seed=count, op=op)
            batched, one_by_one = inputs.copy(), np.asfortranarray(inputs)
            execute(lowered, batched, op)
            execute(lowered, one_by_one, op)
            bits = np.ascontiguousarray(one_by_one).view(np.uint8)  # bit for bit, NaN poison too
            np.testing.assert_array_equal(batched.view(np.uint8), bits)
            values, mask = local.expected(schedule, inputs, op)
            reduces = schedule.collective.reduces
            assert local.count_wrong(batched, values, mask, dtype, op, schedule.nranks, reduces=reduces) == 0


def test_a_ring_of_small_chunks_moves_in_batches() -> None:
    schedule = collc.load("ring_allreduce").instantiate(p=64).schedule
    small, large = plan(schedule, 64 * 3), plan(schedule, 64 * (BATCH_MAX_RUN + 1))
    assert all(b is not None and not b.rest.size for b in small.batched)  # one gather per step
    assert all(b is None for b in large.batched)  # long runs: one numpy call per receive costs less
    assert [len(t) for t in small.steps] == [64] * len(small.moves)  # the receives, as Transfers
    assert not any(t.snapshot for step in small.steps for t in step)


def test_a_single_iteration_runs_on_the_inputs_themselves(monkeypatch: pytest.MonkeyPatch) -> None:
    """With one iteration no copy of the p buffers is made (the reference is computed first)."""
    copies: list[tuple[int, ...]] = []
    real = np.ndarray.copy

    class Spy(np.ndarray):
        def copy(self, *args: object, **kwargs: object) -> np.ndarray:  # type: ignore[override]
            copies.append(self.shape)
            return real(self, *args, **kwargs)  # type: ignore[arg-type]

    made = local.make_inputs
    monkeypatch.setattr(local, "make_inputs", lambda *a, **k: made(*a, **k).view(Spy))
    schedule = collc.load("ring_allreduce").instantiate(p=8).schedule
    assert local.run(schedule, 800).wrong == 0
    assert copies == []
    assert local.run(schedule, 800, iters=3).wrong == 0
    assert copies == [(8, 800), (8, 800)]


# --------------------------------------------------------------------------
# 4. Goodput plots
# --------------------------------------------------------------------------


def _study(names: list[str], topology: str, sizes: list[int]) -> goodput.Study:
    entries = [goodput.Entry("", (name,)) for name in names]
    return goodput.study(entries, parse_topology(topology), sizes, NetworkModel())


def _overlaps(labels: list) -> bool:  # type: ignore[type-arg]
    boxes = sorted((box.x0, box.x1) for box in (label.get_window_extent() for label in labels))
    return any(a[1] > b[0] for a, b in itertools.pairwise(boxes))


@pytest.mark.parametrize("sizes", ["4K:64MiB", "32B:512MiB", "1K", "1K:4K", "32B:1GiB"])
def test_the_size_labels_do_not_run_together(sizes: str) -> None:
    from collc.cli import parse_sizes

    result = _study(["ring_allreduce"], "ring:8", parse_sizes(sizes))
    fig = goodput.figure(result)
    fig.canvas.draw()
    ax = fig.axes[0]
    labels = [label for label in ax.get_xticklabels() if label.get_text()]
    texts = [label.get_text() for label in labels]
    assert 1 <= len(texts) <= goodput.MAX_TICKS
    assert texts == [goodput.size_text(s) for s in goodput.size_ticks(result.sizes)]
    assert texts[0] == goodput.size_text(result.sizes[0])
    assert not _overlaps(labels), texts
    assert all(not label.get_text() for label in ax.get_xticklabels(minor=True))


def test_the_tutorial_plot_stays_below_its_bound() -> None:
    tutorial = str(ROOT / "examples" / "tutorial" / "bidir_ring_allreduce.coll")
    result = _study([tutorial, "ring_allreduce", "swing_bw"], "ring:16", [4096 << i for i in range(15)])
    ((label, bound),) = goodput.bandwidth_bounds(result)
    assert bound == pytest.approx(800 * 16 / 30) and label.startswith("allreduce bound 426.7 Gb/s")
    assert max(p.goodput_gbps for p in result.points) < bound
    ax = goodput.figure(result).axes[0]
    assert ax.get_yscale() == "log"  # 1 to 418 Gb/s: a linear axis would flatten the small sizes
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert [line.get_label() for line in dashed] == [label]
    assert ax.get_ylim()[1] > bound


def test_an_allgather_plot_has_the_allgather_bound_not_the_allreduce_one() -> None:
    result = _study(["ring_allgather", "bruck_allgather"], "ring:16", [1 << 20, 1 << 26])
    ((label, bound),) = goodput.bandwidth_bounds(result)
    assert label.startswith("allgather bound") and bound == pytest.approx(800 * 16 / 15)
    assert "allreduce" not in " ".join(line.get_label() for line in goodput.figure(result).axes[0].get_lines())
    assert max(p.goodput_gbps for p in result.points) < bound


def test_the_goodput_axis_is_linear_for_a_narrow_range_unless_asked() -> None:
    result = _study(["ring_allreduce"], "ring:8", [1 << 24, 1 << 25])
    assert goodput.figure(result).axes[0].get_yscale() == "linear"
    assert goodput.figure(result, yscale="log").axes[0].get_yscale() == "log"
    wide = _study(["ring_allreduce"], "ring:8", [32, 1 << 26])
    assert goodput.figure(wide).axes[0].get_yscale() == "log"
    assert goodput.figure(wide, yscale="linear").axes[0].get_yscale() == "linear"


def test_sim_yscale_option(tmp_path: Path) -> None:
    out = cli("sim", "ring_allreduce", "--topology", "ring:4", "--sizes", "1K:4K", "--plot", tmp_path / "g.svg",
              "--yscale", "log")  # fmt: skip
    assert out.code == 0 and (tmp_path / "g.svg").is_file(), out.text
    bad_input(cli("sim", "ring_allreduce", "--topology", "ring:4", "--yscale", "log"), "--yscale applies to --plot")


# --------------------------------------------------------------------------
# 6. Help that agrees with the tool
# --------------------------------------------------------------------------


def test_the_command_list_is_not_cut_short() -> None:
    out = cli("--help")
    assert out.code == 0, out.text
    listed = " ".join(out.stdout.split("Commands:", 1)[1].split())
    assert "..." not in listed
    assert "matching, deadlock, data flow, postcondition, compression points and their error bound." in listed
    assert "Verify a schedule, then generate its executor (and build it, for mpi-c, cuda and mpi-cuda)." in listed


def _help(*command: str) -> str:
    out = cli(*command, "--help")
    assert out.code == 0, out.text
    return " ".join(out.stdout.split())


def test_compile_help_says_which_targets_take_ranges() -> None:
    text = _help("compile")
    assert "-p, --ranks N|RANGE|any The number of ranks. --target mpi-c also takes several" in text
    assert "mpi-c and mpi-cuda take 'any'" in text


def test_a_range_for_a_single_count_target_names_the_targets_that_take_one(tmp_path: Path) -> None:
    out = cli("compile", "swing_bw", "-p", "2..8", "--target", "mpi-py", "-o", tmp_path / "x")
    bad_input(out, "collc compile --target mpi-py takes one rank count", "a range is for --target mpi-c",
              "-p any for mpi-c and mpi-cuda")  # fmt: skip
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("command", "option"),
    [("check", "-p, --ranks"), ("check", "--param"), ("compile", "-p, --ranks"), ("compile", "--verify-ranks"),
     ("viz", "--steps")],
)  # fmt: skip
def test_every_range_option_says_that_its_end_is_included(command: str, option: str) -> None:
    text = _help(command)
    at = text.index(option)
    assert "a..b includes b here, while a .. b in a .coll program stops before b" in text[at : at + 600]


def test_export_proto_has_a_description() -> None:
    assert "--proto [Simple|LL|LL128] msccl-xml: the NCCL protocol" in _help("export")


def test_nccl_is_no_longer_offered() -> None:
    for command in ("run", "compile"):
        text = _help(command)
        offered = text[text.index("--transport") :].split(" --", 1)[0]
        assert offered.startswith("--transport auto|ipc|mpi mpi-cuda:") and "nccl" not in offered.lower(), offered
    bad_input(cli("run", "ring_allreduce", "-p", "4", "--transport", "tcp"), "'tcp' is not a transport")
    out = cli("run", "ring_allreduce", "-p", "4", "--backend", "mpi-cuda", "--transport", "nccl")
    bad_input(out, "no NCCL transport")  # asked for anyway: the reason


def test_viz_network_options_say_they_need_a_timeline() -> None:
    text = _help("viz")
    for option in ("--topology", "--link-bw", "--hop-latency", "--routing"):
        at = text.index(option + " ")
        assert "With --timeline:" in text[at : at + 80], option
    assert "--link-bw TEXT Bandwidth" in _help("sim")  # sim's own help is left as it is


def test_run_help_gives_the_default_size() -> None:
    assert "--size SIZE Vector size in bytes, e.g. 64K, 4MiB. [default: 4MiB]" in _help("run")


# --------------------------------------------------------------------------
# 7. collc sim on a schedule that fails verification
# --------------------------------------------------------------------------


def test_sim_names_a_program_that_fails_verification_before_its_table() -> None:
    out = cli("sim", BROKEN, "ring_allgather", "--topology", "ring:8", "--sizes", "1K:4K")
    assert out.code == 0, out.text
    (line,) = [line for line in out.stderr.splitlines() if line.strip()]
    assert re.fullmatch(
        r"warning: broken_allgather \(p=8\) fails verification, \d+ finding\(s\), the first at "
        r"\S+broken\.coll:\d+:\d+: .*; 'collc check \S+broken\.coll -p 8' shows them",
        line,
    ), line
    assert "goodput in Gb/s" in out.stdout
    quiet = cli("sim", BROKEN, "--topology", "ring:8", "--sizes", "1K", "--no-check")
    assert quiet.code == 0 and quiet.stderr == "", quiet.text
    assert cli("sim", "ring_allgather", "--topology", "ring:8", "--sizes", "1K").stderr == ""


# --------------------------------------------------------------------------
# 8. The torch example
# --------------------------------------------------------------------------


def test_the_fsdp_example_returns_no_view_from_its_root_module() -> None:
    """FSDP2 warns on every rank when a fully_shard module returns a view (a Linear on 3-D input does): the
    example's root module ends in a Linear on 2-D input."""
    torch = pytest.importorskip("torch")
    text = (ROOT / "docs" / "torch.md").read_text()
    match = re.search(r"<!-- example: (\S+) -->\s*```python\n(.*?)```", text, re.S)
    assert match is not None
    code = match.group(2)
    namespace: dict[str, object] = {"__name__": "example"}
    exec(compile(code, match.group(1), "exec"), namespace)  # defines the model's pieces; main() is not run
    model = namespace["build_model"]()  # type: ignore[operator]
    tokens = torch.randint(0, 64, (8, 16))
    logits = model(tokens[:, :-1])
    assert logits._base is None and logits.shape == (8 * 15, 64)
