"""The emulated cluster (`collc.netemu`, `collc run --network`): parsing its shape, its errors where the machine
cannot run it, and, where it can (root, iproute2, network namespaces), a 2-host MPI job: ranks in the hosts'
namespaces, shared memory inside a host, TCP between hosts, the right allreduce, the links shaped to the rate
asked for (read back from tc, never timed), and nothing left behind after a job that succeeds, fails, hangs,
raises or is signalled."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_cli import EXAMPLES, cli

from collc import netemu
from collc.diagnostics import CollError

RING = EXAMPLES / "ring_allreduce.coll"


def _support() -> str | None:
    """Why this machine cannot run an emulated cluster, or None when it can."""
    try:
        netemu.check_support()
    except CollError as err:
        return err.message
    return None


def _netem() -> str | None:
    try:
        netemu.check_support(latency=True)
    except CollError as err:
        return err.message
    return None


WHY_NOT = _support()
needs_namespaces = pytest.mark.skipif(WHY_NOT is not None, reason=f"no emulated cluster here: {WHY_NOT}")


def left(prefix: str) -> list[str]:
    """This machine's namespaces whose names start with ``prefix``."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix)]


# --------------------------------------------------------------------------
# The shape
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "hosts", "rate", "latency"),
    [
        ("4", 4, None, 0.0),
        ("2x10gbit", 2, 10**10, 0.0),
        ("8x100mbit,latency=5us", 8, 10**8, 5e-6),
        ("2x10Gb/s", 2, 10**10, 0.0),
        ("2x1.25GB/s, latency=1ms", 2, 10**10, 1e-3),
        ("3x1500kbit,latency=0", 3, 1_500_000, 0.0),
    ],
)
def test_parse_network(text: str, hosts: int, rate: int | None, latency: float) -> None:
    net = netemu.parse_network(text)
    assert (net.hosts, net.rate, net.latency) == (hosts, rate, pytest.approx(latency))
    assert netemu.parse_network(net.text()) == net


@pytest.mark.parametrize(
    ("text", "dims"),
    [
        ("4x1gbit,shape=ring", (4,)),
        ("8x1gbit,shape=torus:2x4", (2, 4)),
        ("8x1gbit, latency=5us, shape=torus:2x2x2", (2, 2, 2)),
        ("4,shape=star", None),
    ],
)
def test_parse_shape(text: str, dims: tuple[int, ...] | None) -> None:
    net = netemu.parse_network(text)
    assert net.dims == dims
    assert netemu.parse_network(net.text()) == net


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "number of hosts"),
        ("8x1gbit,shape=torus:3x3", "has 9 hosts, the network 8"),
        ("8x1gbit,shape=mesh", "expected star, ring or torus:AxB"),
        ("8x1gbit,shape=torus:2xx4", "expected star, ring or torus:AxB"),
        ("x10gbit", "number of hosts"),
        ("0x10gbit", "1 to 250"),
        ("999", "1 to 250"),
        ("2x", "not a rate"),
        ("2x10gbps", "not a rate"),
        ("2x0bit", "below 8 bits"),
        ("2x10gbit,latency=soon", "not a duration"),
        ("2x10gbit,latency=20s", "at most 10 s"),
        ("2x10gbit,mtu=9000", "unknown setting 'mtu=9000'"),
    ],
)
def test_bad_network(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        netemu.parse_network(text)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--backend", "mpi", "--network", "2x10parsecs"), "'10parsecs' is not a rate"),
        (("--backend", "mpi", "--network", "3x1gbit"), "3 hosts do not divide the schedule's 4 ranks"),
        (("--backend", "mpi-c", "--network", "two"), "does not start with a number of hosts"),
        (("--network", "2"), "runs the backends mpi, mpi-py, mpi-c, not local"),
    ],
)
def test_cli_bad_network_is_a_usage_error(args: tuple[str, ...], says: str) -> None:
    out = cli("run", RING, "-p", "4", "--size", "1K", *args)
    assert out.code == 2, out.text
    assert "Invalid value for '--network'" in out.stderr and says in out.stderr, out.stderr


# --------------------------------------------------------------------------
# A machine that cannot run it: a clear error, never a traceback
# --------------------------------------------------------------------------


def test_without_root_the_error_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netemu.shutil, "which", lambda tool: f"/usr/sbin/{tool}")
    monkeypatch.setattr(netemu.os, "geteuid", lambda: 1000)
    with pytest.raises(CollError, match="needs root"):
        netemu.check_support()
    with pytest.raises(CollError, match="needs root"), netemu.Cluster(hosts=2):
        pass
    out = cli("run", RING, "-p", "2", "--size", "1K", "--backend", "mpi", "--network", "2x1gbit")
    assert out.code == 2, out.text
    assert "error: the emulated cluster needs root" in out.stderr and "Traceback" not in out.text, out.text


def test_without_iproute2_the_error_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netemu.shutil, "which", lambda tool: None if tool == "tc" else f"/usr/sbin/{tool}")
    with pytest.raises(CollError, match=r"needs 'tc' \(iproute2\)"):
        netemu.check_support()


def test_cluster_arguments_are_checked() -> None:
    with pytest.raises(CollError, match="1 to 250 hosts"):
        netemu.Cluster(hosts=0)
    with pytest.raises(CollError, match="at least one rank"):
        netemu.Cluster(hosts=2, ranks_per_host=0)
    with pytest.raises(CollError, match="not a rate"):
        netemu.Cluster(hosts=2, bandwidth="fast")
    with pytest.raises(CollError, match="not running"):
        _ = netemu.Cluster(hosts=2).mpiexec_args
    with pytest.raises(CollError, match="does not hold 8 hosts"):
        netemu.Cluster(hosts=8, shape=(3, 3))
    with pytest.raises(CollError, match="expected star, ring or torus"):
        netemu.Cluster(hosts=8, shape="cube")


# --------------------------------------------------------------------------
# A 2-host job
# --------------------------------------------------------------------------

PROGRAM = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    x = np.arange(1 << 18, dtype=np.float64) * (world.rank + 1)
    y = np.empty_like(x)
    world.Allreduce(x, y)
    expected = np.arange(1 << 18, dtype=np.float64) * sum(range(1, world.size + 1))
    local = world.Split_type(MPI.COMM_TYPE_SHARED)
    with open(os.path.join(sys.argv[1], f"rank{world.rank}.json"), "w") as out:
        json.dump({
            "rank": world.rank, "netns": os.readlink("/proc/self/ns/net"),
            "right": bool(np.array_equal(y, expected)), "local": local.size,
        }, out)
    if os.environ.get("FAIL_RANK") == str(world.rank):
        world.Abort(3)
    """
)


def link_bytes(ns: str, dev: str, way: str = "tx") -> int:
    """Bytes ``dev`` in namespace ``ns`` has sent (``tx``) or received (``rx``)."""
    out = subprocess.run(["ip", "-n", ns, "-s", "-j", "link", "show", dev], capture_output=True, text=True, check=True)
    return int(json.loads(out.stdout)[0]["stats64"][way]["bytes"])


@needs_namespaces
def test_two_hosts_run_an_allreduce_and_leave_nothing(tmp_path: Path) -> None:
    program = tmp_path / "job.py"
    program.write_text(PROGRAM)
    with netemu.Cluster(hosts=2, ranks_per_host=2, bandwidth="1gbit") as cluster:
        prefix = cluster.prefix
        assert sorted(left(prefix)) == sorted([cluster.switch, *cluster.namespaces])
        before = link_bytes(cluster.namespaces[0], netemu.HOST_IFACE)
        done = cluster.mpiexec([sys.executable, str(program), str(tmp_path)], timeout=120)
        assert done.returncode == 0, done.stderr
        sent = link_bytes(cluster.namespaces[0], netemu.HOST_IFACE) - before
        rows = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
        assert [r["rank"] for r in rows] == [0, 1, 2, 3]
        assert all(r["right"] for r in rows), rows
        assert all(r["local"] == 2 for r in rows), rows  # two ranks a host, sharing memory
        ours = os.readlink("/proc/self/ns/net")
        host0, host1 = {rows[0]["netns"], rows[1]["netns"]}, {rows[2]["netns"], rows[3]["netns"]}
        assert len(host0) == len(host1) == 1 and host0 != host1 and ours not in host0 | host1, rows
        assert sent > (1 << 18) * 8 // 2, sent  # the hosts' halves of the vector crossed the link
        rates = cluster.link_rates()
        assert len(rates) == 4 and set(rates.values()) == {10**9}, rates
        shown = subprocess.run(
            ["tc", "-n", cluster.namespaces[1], "qdisc", "show", "dev", "eth0"], capture_output=True, text=True
        ).stdout
        assert "tbf" in shown and "rate 1Gbit" in shown, shown
    assert left(prefix) == []


SINK = textwrap.dedent(
    """
    import socket, sys
    server = socket.create_server((sys.argv[1], 5001))
    print("listening", flush=True)
    conn, _ = server.accept()
    got = 0
    while chunk := conn.recv(1 << 16):
        got += len(chunk)
    sys.exit(0 if got == 1 << 20 else 1)
    """
)
SOURCE = "import socket, sys; socket.create_connection((sys.argv[1], 5001)).sendall(bytes(1 << 20))"


@needs_namespaces
def test_a_torus_routes_through_the_hosts_between(tmp_path: Path) -> None:
    """On a 2x3 torus every host reaches every other over its own links: no switch, each host a router, the
    traffic from host 0 to host 2 (two hops along the row, or one the other way round) and to host 4 (a row and
    a column) crossing the hosts between; the allreduce is right on every rank and every link end is shaped."""
    program = tmp_path / "job.py"
    program.write_text(PROGRAM)
    with netemu.Cluster(hosts=6, bandwidth="1gbit", shape="torus:2x3") as cluster:
        prefix = cluster.prefix
        assert sorted(left(prefix)) == sorted(cluster.namespaces)  # no switch
        ns = cluster.namespaces
        routes = {j: subprocess.run(["ip", "-n", ns[0], "route", "get", cluster.addresses[j]], capture_output=True,
                                    text=True, check=True).stdout for j in range(1, 6)}  # fmt: skip
        assert "dev d1p" in routes[1], routes  # the row neighbour
        assert "dev d1m" in routes[2], routes  # the shorter way round a row of 3
        assert "dev d0p" in routes[3] and f"via {cluster.addresses[3]} dev d0p" in routes[4], routes  # column first
        done = cluster.mpiexec([sys.executable, str(program), str(tmp_path)], timeout=180)
        assert done.returncode == 0, done.stderr
        rows = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(6)]
        assert all(r["right"] for r in rows), rows
        assert len({r["netns"] for r in rows}) == 6
        # 1 MiB from host 0 to host 4 over TCP: host 3 forwards it, down the column then along the row
        before = link_bytes(ns[3], "d0m", "rx"), link_bytes(ns[3], "d1p")
        server = subprocess.Popen(["ip", "netns", "exec", ns[4], sys.executable, "-c", SINK, cluster.addresses[4]],
                                  stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert server.stdout is not None and server.stdout.readline().strip() == "listening"
        send = [sys.executable, "-c", SOURCE, cluster.addresses[4]]
        subprocess.run(["ip", "netns", "exec", ns[0], *send], check=True, timeout=60)
        assert server.wait(timeout=60) == 0
        assert link_bytes(ns[3], "d0m", "rx") - before[0] > 1 << 20 and link_bytes(ns[3], "d1p") - before[1] > 1 << 20
        rates = cluster.link_rates()
        # 2x3: one link per column pair (a dimension of 2), a ring of 3 per row: 3 + 6 links, two ends each
        assert len(rates) == 18 and set(rates.values()) == {10**9}, rates
    assert left(prefix) == []


@needs_namespaces
def test_a_failing_job_is_returned_and_cleaned_up(tmp_path: Path) -> None:
    program = tmp_path / "job.py"
    program.write_text(PROGRAM)
    with netemu.Cluster(hosts=2, ranks_per_host=1) as cluster:
        prefix = cluster.prefix
        done = cluster.mpiexec([sys.executable, str(program), str(tmp_path)], env={"FAIL_RANK": "1"}, timeout=120)
        assert done.returncode != 0
        assert cluster.link_rates() == dict.fromkeys(cluster.link_rates(), None)  # not shaped
    assert left(prefix) == []


@needs_namespaces
def test_a_hung_job_times_out_and_an_exception_cleans_up() -> None:
    with pytest.raises(CollError, match="ran longer than 2 s"), netemu.Cluster(hosts=2) as cluster:
        prefix = cluster.prefix
        cluster.mpiexec(["sleep", "60"], timeout=2)
    assert left(prefix) == []
    with pytest.raises(RuntimeError, match="boom"), netemu.Cluster(hosts=1) as cluster:
        prefix = cluster.prefix
        raise RuntimeError("boom")
    assert left(prefix) == []


SIGNALLED = textwrap.dedent(
    """
    import sys, time
    from collc import netemu
    with netemu.Cluster(hosts=2, bandwidth="100mbit") as cluster:
        print(cluster.prefix, flush=True)
        time.sleep(120)
    """
)


@needs_namespaces
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_signalled_cluster_is_removed(sig: signal.Signals) -> None:
    # A suite started in the background of a shell runs with SIGINT ignored, and a Python started so never
    # turns SIGINT into KeyboardInterrupt: the child gets the default back, as a program run at a terminal has.
    proc = subprocess.Popen(
        [sys.executable, "-c", SIGNALLED], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    prefix = ""
    try:
        assert proc.stdout is not None
        prefix = proc.stdout.readline().strip()
        assert prefix.startswith(netemu.NAME_PREFIX), proc.stderr.read() if proc.stderr else ""
        assert len(left(prefix)) == 3
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:  # the test failed: its cluster must not outlive it
            proc.kill()
            proc.wait()
            if prefix.startswith(netemu.NAME_PREFIX):
                netemu.remove_leftovers(prefix)
    if sig == signal.SIGKILL:  # no chance to clean up: the leftovers are found by their dead owner
        assert len(left(prefix)) == 3
        assert len(netemu.remove_leftovers(prefix)) == 3
    deadline = time.monotonic() + 10
    while left(prefix) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left(prefix) == []


@needs_namespaces
def test_remove_leftovers_spares_running_clusters() -> None:
    with netemu.Cluster(hosts=1) as cluster:
        assert netemu.remove_leftovers(cluster.prefix) == []
        assert len(left(cluster.prefix)) == 2
    with pytest.raises(CollError, match="not a cluster's prefix"):
        netemu.remove_leftovers("docker")


@needs_namespaces
@pytest.mark.skipif(_netem() is not None, reason=f"no latency here: {_netem()}")
def test_latency_is_a_netem_delay_above_the_rate() -> None:
    with netemu.Cluster(hosts=2, bandwidth="10gbit", latency="50us") as cluster:
        uplink = cluster.qdiscs()[f"{cluster.namespaces[0]}/eth0"]
        kinds = {q["kind"] for q in uplink}
        assert kinds == {"netem", "tbf"}, uplink
        assert set(cluster.link_rates().values()) == {10**10}


@needs_namespaces
def test_collc_run_on_the_emulated_cluster() -> None:
    out = cli("run", RING, "-p", "4", "--backend", "mpi", "--network", "2x1gbit", "--sizes", "1K:64K", "--json")
    assert out.code == 0, out.text
    payload = json.loads(out.stdout)
    assert payload["network"] == "2x1gbit" and payload["ranks_per_host"] == 2
    assert len(payload["rows"]) == 7 and all(r["wrong"] == 0 for r in payload["rows"])
    assert left(netemu.NAME_PREFIX + f"{os.getpid()}-") == []
    text = cli("run", RING, "-p", "2", "--backend", "mpi", "--network", "2", "--size", "4K")
    assert text.code == 0, text.text
    assert "2 MPI processes on 2 emulated hosts x 1 ranks, unshaped links" in text.stdout, text.stdout


@needs_namespaces
def test_pieces_between_hosts_go_whole_and_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """Messages of 8-32 KiB travel in pieces between ranks of one host and whole between hosts (collc_pieces):
    a schedule whose messages go both ways, at sizes across that range, on 2 hosts of 2 ranks, agrees with
    numpy on every rank, by dataflow and step by step."""
    sizes = ("--sizes", "16K:256K")
    for issue in ("dataflow", "steps"):
        monkeypatch.setenv("COLLC_ISSUE", issue)
        out = cli("run", RING, "-p", "4", "--backend", "mpi-c", "--network", "2", *sizes, "--json")
        assert out.code == 0, out.text
        rows = json.loads(out.stdout)["rows"]
        assert len(rows) == 5 and all(r["wrong"] == 0 for r in rows), rows
