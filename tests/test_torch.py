"""The collc torch.distributed backend (collc.torch): unit tests in this process, then real runs.

The runs start 2 to 4 processes with torchrun (``python -m torch.distributed.run``) or mpiexec and the
scripts in tests/torchrun/, which compare every collective with gloo's result (bit for bit, on inputs
whose reductions are exact in any order), train a small transformer with FSDP2 on both backends, and
feed the backend bad input.  Compiled libraries go to one cache folder for the whole session.
"""

from __future__ import annotations

import json
import re
import select
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed (pip install -e '.[torch]')")

import collc.torch  # noqa: E402  (after the importorskip)
from collc.backends.mpitools import mpi_env, mpiexec  # noqa: E402
from collc.torch import config, ops, pmi  # noqa: E402
from collc.torch.schedules import ScheduleError, prepare  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = Path(__file__).resolve().parent / "torchrun"


@pytest.fixture(scope="session")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("collc-torch-cache")


def _env(cache: Path, extra: dict[str, str] | None = None, nranks: int = 4) -> dict[str, str]:
    env = mpi_env(nranks)
    env.update({"COLLC_TORCH_CACHE": str(cache), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    for key in list(env):
        if key.startswith("COLLC_") and key not in ("COLLC_TORCH_CACHE", "COLLC_MPIEXEC", "COLLC_MPICC"):
            del env[key]
    env.update(extra or {})
    return env


def _launch(command: list[str], env: dict[str, str], timeout: float = 300) -> str:
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(command)} failed ({proc.returncode}):\n{output[-6000:]}"
    return output


def torchrun(n: int, script: Path, *args: str, env: dict[str, str], timeout: float = 300) -> str:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", str(script)]
    return _launch([*command, *args], env, timeout)


def _ranks(folder: Path, n: int) -> list[dict]:
    return [json.loads((folder / f"rank{r}.json").read_text()) for r in range(n)]


# --------------------------------------------------------------------------
# In this process: settings, the PMI server, checks, schedules
# --------------------------------------------------------------------------


def test_registering_the_backend() -> None:
    assert "collc" in torch.distributed.Backend.backend_list
    assert torch.distributed.Backend.backend_capability["collc"] == ["cpu", "cuda"]
    collc.torch.register()  # again: harmless
    assert torch.distributed.Backend.backend_list.count("collc") == 1


def test_settings_come_from_configure_then_the_environment_then_the_defaults(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config.reset()
    monkeypatch.setenv("COLLC_ALLGATHER", "bruck_allgather")
    monkeypatch.setenv("COLLC_CODEC", "q=ebq(eb=1e-4); r = fp16")
    monkeypatch.setenv("COLLC_TORCH_CHECK", "0")
    monkeypatch.setenv("COLLC_TORCH_CACHE", str(tmp_path))
    s = config.current()
    assert s.schedule("allreduce") == "swing_bw" and s.schedule("allgather") == "bruck_allgather"
    assert dict(s.codecs) == {"q": "ebq(eb=1e-4)", "r": "fp16"} and s.check is False and s.cache_dir == tmp_path
    before = config.generation()
    s = collc.torch.configure(allgather="ring_allgather", broadcast="gloo", codec={"q": "ebq(eb=1e-5)"}, check=True)
    assert config.generation() != before
    assert s.schedule("allgather") == "ring_allgather" and s.schedule("broadcast") == config.GLOO
    assert dict(s.codecs) == {"q": "ebq(eb=1e-5)"} and s.check is True
    config.reset()
    assert config.current().schedule("allgather") == "bruck_allgather"


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("COLLC_CODEC", "q", "'q' is not a codec setting NAME=SPEC"),
        ("COLLC_CODEC", "1q=fp16", "codec name '1q' is not an identifier"),
        ("COLLC_TORCH_CHECK", "maybe", "COLLC_TORCH_CHECK='maybe': expected 0 or 1"),
    ],
)
def test_bad_settings_are_named(monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=re.escape(message)):
        config.current()


def test_configure_refuses_an_empty_schedule() -> None:
    with pytest.raises(ValueError, match=r"allreduce must name a \.coll file"):
        collc.torch.configure(allreduce=" ")


def test_process_mapping_groups_consecutive_ranks_of_a_host() -> None:
    assert pmi.process_mapping(["a", "a", "a", "a"]) == "(vector,(0,1,4))"
    assert pmi.process_mapping(["a", "a", "b", "b", "a"]) == "(vector,(0,1,2),(1,1,2),(0,1,1))"


class _PmiClient:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.file = self.sock.makefile("r")

    def ask(self, line: str) -> dict[str, str]:
        self.sock.sendall(line.encode() + b"\n")
        return self.read()

    def close(self) -> None:
        self.file.close()
        self.sock.close()

    def read(self) -> dict[str, str]:
        reply = self.file.readline().strip()
        return dict(token.split("=", 1) for token in reply.split(" ") if "=" in token)


def _pmi_server(size: int) -> tuple[int, threading.Thread, list[int]]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    status: list[int] = []
    server = pmi.Server(size, "kvs_test", pmi.process_mapping(["h"] * size))
    thread = threading.Thread(target=lambda: status.append(pmi.serve(listener, server, 30.0)), daemon=True)
    thread.start()
    return listener.getsockname()[1], thread, status


def test_pmi_server_serves_the_key_value_space_and_barriers() -> None:
    port, thread, status = _pmi_server(2)
    a, b = _PmiClient(port), _PmiClient(port)
    assert a.ask("cmd=init pmi_version=1 pmi_subversion=1") == {
        "cmd": "response_to_init", "pmi_version": "1", "pmi_subversion": "1", "rc": "0"}  # fmt: skip
    assert a.ask("cmd=get_maxes")["vallen_max"] == "1024"
    assert b.ask("cmd=get_my_kvsname")["kvsname"] == "kvs_test"
    assert a.ask("cmd=put kvsname=kvs_test key=card0 value=tcp#1$x=2")["rc"] == "0"
    assert b.ask("cmd=get kvsname=kvs_test key=card0") == {"cmd": "get_result", "rc": "0", "value": "tcp#1$x=2"}
    assert b.ask("cmd=get kvsname=kvs_test key=nothing")["rc"] == "-1"
    assert a.ask("cmd=get kvsname=kvs_test key=PMI_process_mapping")["value"] == "(vector,(0,1,2))"
    a.sock.sendall(b"cmd=barrier_in\n")
    assert select.select([a.sock], [], [], 0.5)[0] == []  # nobody leaves a barrier before everyone is in it
    assert b.ask("cmd=barrier_in") == {"cmd": "barrier_out", "rc": "0"}
    assert a.read() == {"cmd": "barrier_out", "rc": "0"}
    for client in (a, b):
        assert client.ask("cmd=finalize")["cmd"] == "finalize_ack"
        client.close()
    thread.join(10)
    assert status == [0]  # every process came and went: the server ends


def test_pmi_server_fails_barriers_when_a_process_leaves_without_finalizing() -> None:
    port, thread, status = _pmi_server(3)
    a, b, c = _PmiClient(port), _PmiClient(port), _PmiClient(port)
    a.sock.sendall(b"cmd=barrier_in\n")
    c.close()  # dies
    assert a.read()["rc"] == "-1"
    assert b.ask("cmd=barrier_in")["rc"] == "-1"  # and later barriers fail at once, no waiting forever
    a.close()
    b.close()
    thread.join(10)
    assert status == [0]


def test_tensor_checks_name_the_problem() -> None:
    assert ops.check_tensor(torch.ones(3), "x") is None
    assert "not contiguous" in (ops.check_tensor(torch.ones(3, 4).t(), "the input") or "")
    assert "pass t.contiguous()" in (ops.check_tensor(torch.ones(3, 4).t(), "the input") or "")
    gpu_like = ops.check_tensor(torch.ones(3, device="meta"), "the tensor")
    assert gpu_like is not None and "CUDA tensors (mpi-cuda)" in gpu_like and "meta" in gpu_like
    assert "layout" in (ops.check_tensor(torch.ones(3).to_sparse(), "x") or "")
    assert "not a tensor" in (ops.check_tensor([1.0], "x") or "")  # type: ignore[arg-type]


def test_reduction_ops() -> None:
    r = torch.distributed.ReduceOp
    assert [ops.reduce_kind(op).base for op in (r.SUM, r.AVG, r.MAX, r.MIN, r.PRODUCT)] == [  # type: ignore[union-attr]
        "sum", "sum", "max", "min", "product"]  # fmt: skip
    assert ops.reduce_kind(r.BAND) is None and ops.reduce_kind(r.BXOR) is None
    assert ops.reduce_problem(torch.bfloat16, ops.ReduceKind("sum")) is None
    assert "AVG of torch.int64" in (ops.reduce_problem(torch.int64, ops.ReduceKind("avg")) or "")
    assert "complex64" in (ops.reduce_problem(torch.complex64, ops.ReduceKind("sum")) or "")
    assert len({ops.dtype_code(dt) for dt in (torch.float32, torch.bfloat16, torch.float16, torch.int64)}) == 4


def test_schedules_are_verified_for_the_group_size_and_compiled_once(cache: Path) -> None:
    first = prepare("allgather", "ring_allgather", 3, cache_dir=cache)
    assert first.library.is_file() and first.nranks == 3 and not first.compressed
    assert prepare("allgather", "ring_allgather", 3, cache_dir=cache) is first  # cached in the process
    bcast = prepare("broadcast", "binomial_broadcast", 3, root=2, cache_dir=cache)
    assert bcast.root == 2 and bcast.library != first.library


def test_a_schedule_whose_ranks_combine_in_other_orders_is_marked(cache: Path) -> None:
    """Latency-optimal Swing from 8 ranks: its ranks would get different last bits of a floating-point sum, so
    the backend runs such all_reduces on gloo (process_group), as the library itself refuses them."""
    assert "different orders" in (prepare("allreduce", "swing_lat", 8, cache_dir=cache).mixed_orders or "")
    assert prepare("allreduce", "swing_lat", 6, cache_dir=cache).mixed_orders is None
    assert prepare("allreduce", "ring_allreduce", 8, cache_dir=cache).mixed_orders is None


def test_schedule_errors_name_the_file_and_the_group_size(cache: Path, tmp_path: Path) -> None:
    with pytest.raises(ScheduleError, match=r"swing_bw\.coll implements allreduce, not allgather"):
        prepare("allgather", "swing_bw", 4, cache_dir=cache)
    with pytest.raises(ScheduleError, match=r"swing_bw\.coll: no allreduce schedule for a group of p=1: .*p >= 2"):
        prepare("allreduce", "swing_bw", 1, cache_dir=cache)
    broken = tmp_path / "broken.coll"
    broken.write_text((SCRIPTS / "broken.coll").read_text())
    with pytest.raises(ScheduleError, match=rf"{re.escape(str(broken))}: the schedule fails verification for p=3"):
        prepare("allgather", str(broken), 3, cache_dir=cache)
    with pytest.raises(ScheduleError, match=r"no such file: nowhere\.coll"):
        prepare("allreduce", "nowhere.coll", 4, cache_dir=cache)


def test_a_group_size_runs_only_once_verified(cache: Path) -> None:
    """The rule of any-p libraries holds here by construction: every group size is elaborated and verified before
    its library is compiled or taken from the cache.  A ring wrong from p = 5 on only (rank 4 sends the wrong block,
    tests/data/anyp/ring_fault_allreduce.coll) serves 4 ranks and is refused at 5, naming the finding."""
    fault = ROOT / "tests" / "data" / "anyp" / "ring_fault_allreduce.coll"
    assert prepare("allreduce", str(fault), 4, cache_dir=cache).nranks == 4
    with pytest.raises(ScheduleError, match=r"the schedule fails verification for p=5: .*step 5: rank 4 sends chunk"):
        prepare("allreduce", str(fault), 5, cache_dir=cache)


def test_only_collc_torch_imports_torch() -> None:
    package = ROOT / "collc"
    importers = [
        str(path.relative_to(ROOT))
        for path in package.rglob("*.py")
        if re.search(r"^\s*(import torch|from torch)\b", path.read_text(), re.M) and path.parent != package / "torch"
    ]
    assert importers == []


# --------------------------------------------------------------------------
# Real runs
# --------------------------------------------------------------------------


def test_every_op_equals_gloo_on_two_ranks(cache: Path, tmp_path: Path) -> None:
    torchrun(2, SCRIPTS / "ops_vs_gloo.py", str(tmp_path), env=_env(cache, nranks=2))
    for r, rank in enumerate(_ranks(tmp_path, 2)):
        assert rank["cases"] > 150 and rank["wrong"] == []
        assert rank["warnings"] == []  # nothing went to gloo
        assert set(rank["stats"]) == {"collc all_reduce", "collc reduce_scatter", "collc all_gather",
                                      "collc broadcast", "collc barrier"}  # fmt: skip
        sub = rank["subgroup"]  # rank 1 alone: a group of one, whose collectives are copies
        assert sub["members"] == [1] and (sub["cases"] == 12 if r == 1 else sub["cases"] == 0)
        assert r == 0 or set(sub["stats"]) == {"local all_reduce", "local reduce_scatter", "local all_gather",
                                               "local broadcast"}  # fmt: skip


def test_every_op_equals_gloo_on_three_ranks_under_mpiexec(cache: Path, tmp_path: Path) -> None:
    command = [str(mpiexec()), "-n", "3", sys.executable, str(SCRIPTS / "ops_vs_gloo.py"), str(tmp_path), "quick"]
    env = _env(cache, nranks=3)
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        env.pop(key, None)  # collc.torch sets them from MPI
    _launch(command, env)
    for r, rank in enumerate(_ranks(tmp_path, 3)):
        assert rank["cases"] > 60 and rank["wrong"] == [] and rank["warnings"] == []
        assert rank["stats"]["collc all_reduce"] > 0 and not any(k.startswith("gloo") for k in rank["stats"])
        sub = rank["subgroup"]  # ranks 0 and 2: a communicator of the two
        assert sub["members"] == [0, 2] and sub["cases"] == (0 if r == 1 else 12)
        assert r == 1 or (sub["stats"]["collc all_reduce"] > 0 and not any(k.startswith("gloo") for k in sub["stats"]))


def test_bad_input_ends_in_errors_on_every_rank_and_the_group_goes_on(cache: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    torchrun(2, SCRIPTS / "bad_input.py", str(out), str(SCRIPTS), env=_env(cache, nranks=2))
    r0, r1 = _ranks(out, 2)
    for rank in (r0, r1):
        assert all(rank["healthy"].values()), rank["healthy"]
        errors = rank["errors"]
        assert [case for case, text in errors.items() if text == "no error"] == ["compressed schedule"], errors
        assert "disagree on the element count (rank 0: 10, rank 1: 11)" in errors["sizes differ"]
        assert "disagree on the dtype (rank 0: float64, rank 1: float32)" in errors["dtypes differ"]
        assert "is not contiguous" in errors["non-contiguous everywhere"]
        assert "it must have 2 x 3 = 6" in errors["all_gather output of the wrong size"]
        assert "needs4.coll: no allreduce schedule for a group of p=2" in errors["constraints exclude p"]
        assert "p=2 violates the constraint p >= 4" in errors["constraints exclude p"]
        assert "broken.coll: the schedule fails verification for p=2" in errors["schedule fails verification"]
        assert "implements allreduce, not reduce_scatter" in errors["schedule of another collective"]
        assert "disagree on the route (rank 0: gloo, rank 1: collc)" in errors["ranks configured differently"]
        assert errors["compressed schedule"] == "no error"
        assert "cannot be compressed" in errors["compressed schedule, bfloat16"]
        assert rank["fallback"] == {"BAND #0": True, "BAND #1": True, "all_to_all_single": True}
        assert len(rank["warnings"]) == 1  # once per kind of op, not per call (all_to_all_single runs on collc)
        assert "all_reduce with BAND run on the inner gloo group" in rank["warnings"][0]
    assert "rank 1 refused the call" in r0["errors"]["non-contiguous on rank 1"]
    assert "the tensor of all_reduce is not contiguous" in r1["errors"]["non-contiguous on rank 1"]


def test_fsdp2_training_matches_gloo(cache: Path, tmp_path: Path) -> None:
    out = tmp_path / "losses.json"
    torchrun(4, SCRIPTS / "fsdp_train.py", str(out), "50", env=_env(cache))
    result = json.loads(out.read_text())
    collc_losses, gloo_losses = result["collc"], result["gloo"]
    assert result["backend"] == "collc" and result["size"] == 4 and len(collc_losses) == 50
    assert result["stats"]["collc all_gather"] >= 100 and result["stats"]["collc reduce_scatter"] >= 100
    assert not any(k.startswith("gloo") for k in result["stats"])
    assert sum(gloo_losses[-10:]) < sum(gloo_losses[:10]) - 0.5  # it learns: the mean loss drops by 0.05
    assert collc_losses == pytest.approx(gloo_losses, rel=1e-5, abs=1e-6)


@pytest.mark.slow
def test_the_docs_example_trains_on_four_ranks(cache: Path, tmp_path: Path) -> None:
    text = (ROOT / "docs" / "torch.md").read_text()
    match = re.search(r"<!-- example: (\S+) -->\s*```python\n(.*?)```", text, re.S)
    assert match is not None, "docs/torch.md has no marked example"
    script = tmp_path / match.group(1)
    script.write_text(match.group(2))
    output = torchrun(4, script, "--steps", "3", env=_env(cache))
    steps = re.findall(r"step (\d+) loss ([0-9.]+)", output)
    assert [int(s) for s, _ in steps] == [0, 1, 2]
    assert "returned a view tensor" not in output  # FSDP2's warning about a sharded module's output


# --------------------------------------------------------------------------
# Compressed schedules (they run once the mpi-c target runs compression points)
# --------------------------------------------------------------------------


def test_compressed_collectives_stay_within_the_verified_bound(cache: Path, tmp_path: Path) -> None:
    torchrun(4, SCRIPTS / "compressed_vs_gloo.py", str(tmp_path), env=_env(cache))
    for rank in _ranks(tmp_path, 4):
        assert rank["cases"] >= 6 and rank["beyond_bound"] == [], rank["beyond_bound"]
        assert rank["stats"]["collc all_gather"] > 0 and rank["stats"]["collc reduce_scatter"] > 0
        assert "float32" in rank["bf16_error"] and "cannot be compressed" in rank["bf16_error"]


@pytest.mark.slow  # the compressed collectives themselves are in the normal suite (the test above)
def test_fsdp2_training_with_compressed_allgather_and_reduce_scatter(cache: Path, tmp_path: Path) -> None:
    out = tmp_path / "losses.json"
    env = _env(cache, {
        "COLLC_ALLGATHER": "compressed_ring_allgather",
        "COLLC_REDUCE_SCATTER": "compressed_ring_reduce_scatter",
        "COLLC_CODEC": "q=ebq(eb=1e-3)",
    })  # fmt: skip
    torchrun(4, SCRIPTS / "fsdp_train.py", str(out), "50", env=env)
    result = json.loads(out.read_text())
    assert result["stats"]["collc all_gather"] >= 50
    # every parameter and gradient element is off by at most 3e-3 (p - 1 hops of eb): the losses by 1e-2 at most
    assert result["collc"] == pytest.approx(result["gloo"], abs=1e-2)
