"""An emulated cluster on one machine: hosts in network namespaces, shaped links, MPI over TCP.

`Cluster` makes one network namespace per host and one for the switch, all named
``collc-<pid>-<tag>-…`` (`Cluster.prefix`), and touches nothing else: no
interface, address, route or qdisc of the namespace it is started from.

* The switch namespace holds a Linux bridge ``br0`` (address 10.231.0.254/24)
  and, for host *i*, the switch end ``h<i>`` of a veth pair whose other end is
  ``eth0`` in the host's namespace (address ``10.231.0.<i+1>``).
* Each link is shaped with tc in both directions: a ``tbf`` (token bucket) at
  the host's rate on ``eth0`` (its uplink) and on ``h<i>`` (its downlink).  A
  latency puts a ``netem`` delay at the root of ``eth0`` with the ``tbf`` as its
  child, so one message from host to host waits the latency once.
* With ``shape=ring`` or ``shape=torus:AxB`` (`parse_shape`) there is no switch:
  hosts are linked to their neighbours (``d<k>p``/``d<k>m``), each host routes,
  its address on a local interface ``mpi0``, and ``mpiexec`` runs on host 0.
* `Cluster.mpiexec` runs MPICH's ``mpiexec`` inside the switch namespace; its
  ssh launcher is a script the cluster writes that starts each host's
  ``hydra_pmi_proxy`` in that host's namespace (``ip netns exec``).  Ranks on
  the same host share memory (MPICH's shm path); ranks on different hosts talk
  over the veth links with OFI's tcp provider (`MPI_ENV`).

Leaving the ``with`` block, or `Cluster.close`, kills what still runs in the
namespaces and deletes them, which removes the links, the bridge and the
qdiscs with them; SIGTERM and SIGHUP end the block as Ctrl-C does.
`remove_leftovers` (``python -m collc.netemu --remove-leftovers``) deletes the
namespaces of clusters whose process died without cleaning up (``kill -9``).
``python -m collc.netemu`` says whether this machine can run a cluster.  See
docs/network.md.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType

from collc import goodput
from collc.backends import mpitools
from collc.diagnostics import CollError

__all__ = [
    "MAX_HOSTS",
    "MPI_ENV",
    "NAME_PREFIX",
    "Cluster",
    "Network",
    "check_support",
    "parse_latency",
    "parse_network",
    "parse_rate",
    "parse_shape",
    "rate_text",
    "remove_leftovers",
    "shape_text",
    "torus_coord",
    "torus_step",
]

NAME_PREFIX = "collc-"
"""Every namespace a cluster makes is named ``collc-<pid>-<tag>-<role>``."""

MAX_HOSTS = 250
"""The most hosts a cluster has (one /24 subnet inside its own namespaces)."""

SUBNET = "10.231.0"
"""The hosts' addresses are ``SUBNET.<i+1>``, the switch's ``SUBNET.254`` (private to the cluster's namespaces)."""

SWITCH_ADDRESS = f"{SUBNET}.254"
HOST_IFACE = "eth0"
BRIDGE = "br0"
TORUS_IFACE = "mpi0"

MPI_ENV: dict[str, str] = {
    "MPIR_CVAR_CH4_NETMOD": "ofi",
    "FI_PROVIDER": "tcp",
    "FI_TCP_IFACE": HOST_IFACE,
    "HYDRA_LAUNCHER_AUTOFORK": "0",
}
"""What the ranks of a cluster job run with: MPICH's OFI netmod over libfabric's tcp provider on the host's
link (ranks of one host still use shared memory), and no shortcut past the launcher script for hosts hydra
thinks are local.  A value the caller gives wins."""

_RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}
_BURST_TIME = 1e-3  # seconds of traffic at the link rate a token bucket lets through at once
_MIN_BURST = 16 * 1024  # bytes: at least several full-size frames
_QUEUE_LATENCY = "50ms"  # the longest a packet may wait in a link's queue before it is dropped
_COMMAND_TIMEOUT = 30.0  # seconds for one ip or tc command


@dataclass(frozen=True, slots=True)
class Network:
    """A cluster's shape: ``hosts`` hosts, each link shaped to ``rate`` bits/s (None: unshaped) with ``latency``
    seconds from host to host (0: none added)."""

    hosts: int
    rate: int | None = None
    latency: float = 0.0
    dims: tuple[int, ...] | None = None  # hosts on a ring or torus of links (row-major); None: one switch

    def text(self) -> str:
        """The shape as `parse_network` reads it: ``4x10gbit,latency=5us``, ``8x10gbit,shape=torus:2x4``."""
        out = str(self.hosts) if self.rate is None else f"{self.hosts}x{rate_text(self.rate)}"
        out += f",latency={_duration_text(self.latency)}" if self.latency else ""
        return out + (f",shape={shape_text(self.dims)}" if self.dims is not None else "")


def shape_text(dims: tuple[int, ...] | None) -> str:
    """``star``, ``ring`` (one dimension) or ``torus:2x4``."""
    if dims is None:
        return "star"
    return "ring" if len(dims) == 1 else "torus:" + "x".join(map(str, dims))


def torus_coord(i: int, dims: tuple[int, ...], k: int) -> int:
    """Host i's coordinate along dimension k of a torus of shape ``dims`` (row-major: the last dimension fastest)."""
    return i // math.prod(dims[k + 1 :]) % dims[k]


def torus_step(i: int, dims: tuple[int, ...], k: int, step: int) -> int:
    """The host ``step`` hops from host i along dimension k, wrapping around."""
    c = torus_coord(i, dims, k)
    return i + ((c + step) % dims[k] - c) * math.prod(dims[k + 1 :])


def parse_shape(text: str, hosts: int) -> tuple[int, ...] | None:
    """``star`` (None: every host on one switch), ``ring`` (``(hosts,)``) or ``torus:AxB[xC...]`` (its product
    must be ``hosts``).  ValueError naming what is wrong."""
    t = text.strip().lower()
    if t == "star":
        return None
    if t == "ring":
        return (hosts,)
    kind, colon, body = t.partition(":")
    parts = body.split("x")
    if kind != "torus" or not colon or not all(x.strip().isdigit() and int(x) >= 1 for x in parts):
        raise ValueError(f"shape={text!r}: expected star, ring or torus:AxB (e.g. torus:2x4)")
    dims = tuple(int(x) for x in parts)
    if math.prod(dims) != hosts:
        raise ValueError(f"shape={text!r} has {math.prod(dims)} hosts, the network {hosts}")
    return dims


def parse_rate(text: str) -> int:
    """A link rate in bits per second: tc's ``10gbit``, ``100mbit``, ``500kbit``, ``1000bit``, or collc's
    ``10Gb/s`` (bits) and ``1.25GB/s`` (bytes).  ValueError for anything else or a rate of zero."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*", text)
    if m and m.group(2).lower() in _RATE_UNITS:
        bits = float(m.group(1)) * _RATE_UNITS[m.group(2).lower()]
    else:
        try:
            bits = goodput.parse_rate(text) * 8
        except ValueError:
            raise ValueError(f"{text!r} is not a rate (examples: 10gbit, 100mbit, 10Gb/s, 1.25GB/s)") from None
    if not math.isfinite(bits) or bits < 8:
        raise ValueError(f"{text!r} is below 8 bits per second, the least tc shapes to")
    return round(bits)


def parse_latency(text: str) -> float:
    """A latency in seconds: ``5us``, ``100ns``, ``1ms``, ``0``.  ValueError for anything else."""
    if text.strip() == "0":
        return 0.0
    seconds = goodput.parse_duration(text)
    if not math.isfinite(seconds) or seconds > 10:
        raise ValueError(f"{text!r} is not a latency of at most 10 s")
    return seconds


def parse_network(text: str) -> Network:
    """``HOSTS[xRATE][,latency=TIME][,shape=SHAPE]``: ``4`` (4 hosts, links not shaped), ``4x10gbit``,
    ``8x10Gb/s,latency=5us``, ``8x1gbit,shape=torus:2x4`` (`parse_shape`).  ValueError naming what is wrong."""
    head, *options = [part.strip() for part in text.split(",")]
    hosts_text, sep, rate_part = head.partition("x")
    if not hosts_text.strip().isdigit():
        raise ValueError(f"{text!r} does not start with a number of hosts (examples: 4, 4x10gbit,latency=5us)")
    hosts = int(hosts_text)
    if not 1 <= hosts <= MAX_HOSTS:
        raise ValueError(f"{text!r}: the number of hosts must be 1 to {MAX_HOSTS}, not {hosts}")
    rate = parse_rate(rate_part) if sep else None
    latency = 0.0
    dims: tuple[int, ...] | None = None
    for option in options:
        key, eq, value = option.partition("=")
        if key.strip() == "latency" and eq:
            latency = parse_latency(value)
        elif key.strip() == "shape" and eq:
            dims = parse_shape(value, hosts)
        else:
            raise ValueError(
                f"{text!r}: unknown setting {option!r}; there are latency=TIME (e.g. 5us) and shape=star|ring|torus:AxB"
            )
    return Network(hosts, rate, latency, dims)


def rate_text(bits: int) -> str:
    """``10gbit``, ``1500mbit``: a rate in bits per second in tc's words, exact."""
    for unit, scale in (("tbit", 10**12), ("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bits % scale == 0:
            return f"{bits // scale}{unit}"
    return f"{bits}bit"


def _duration_text(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:g}{unit}"
    return f"{seconds / 1e-9:g}ns"


# --------------------------------------------------------------------------------------------------------------
# Running ip and tc
# --------------------------------------------------------------------------------------------------------------


def _run(cmd: Sequence[str], what: str) -> str:
    """Run an ip/tc command; CollError saying ``what`` failed, with the command's own message."""
    try:
        done = subprocess.run(
            list(cmd), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise CollError(f"emulated cluster: {what} failed: {' '.join(cmd)}: {err}") from None
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip() or f"exit status {done.returncode}"
        raise CollError(f"emulated cluster: {what} failed: {' '.join(cmd)}: {message}")
    return done.stdout


def _namespaces() -> list[str]:
    """The names of this machine's named network namespaces (``ip netns list``)."""
    try:
        out = subprocess.run(
            ["ip", "netns", "list"], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def check_support(*, latency: bool = False) -> None:
    """CollError naming what this machine lacks for an emulated cluster: root, ``ip`` and ``tc`` (iproute2),
    network namespaces; with ``latency``, tc's netem qdisc.  Nothing is left behind by the probe."""
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        raise CollError(
            f"the emulated cluster needs {' and '.join(repr(t) for t in missing)} (iproute2), not found on PATH: "
            "install iproute2 (e.g. apt-get install iproute2)"
        )
    if os.geteuid() != 0:
        raise CollError(
            "the emulated cluster needs root: it makes network namespaces, veth links and tc qdiscs; run as root "
            "(in a container: with --cap-add NET_ADMIN --cap-add SYS_ADMIN, or --privileged)"
        )
    probe = f"{NAME_PREFIX}{os.getpid()}-probe{secrets.token_hex(2)}"
    try:
        _run(["ip", "netns", "add", probe], "making a network namespace")
    except CollError as err:
        raise CollError(
            f"network namespaces are not available here ({err.message.rpartition(': ')[2]}): the emulated cluster "
            "needs a kernel with CONFIG_NET_NS and the right to mount /run/netns (root, or CAP_SYS_ADMIN)"
        ) from None
    try:
        ip, tc = ["ip", "-n", probe], ["tc", "-n", probe]
        _run([*ip, "link", "add", "p0", "type", "veth", "peer", "name", "p1"], "making a veth pair")
        kinds = ["tbf"] + (["netem"] if latency else [])
        for kind in kinds:
            args = ["rate", "1gbit", "burst", "64kb", "latency", "10ms"] if kind == "tbf" else ["delay", "1ms"]
            done = subprocess.run(
                [*tc, "qdisc", "replace", "dev", "p0", "root", kind, *args],
                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT,
            )  # fmt: skip
            if done.returncode != 0:
                why = done.stderr.strip()
                use = "latency=..." if kind == "netem" else "a rate"
                raise CollError(
                    f"this kernel cannot shape links with tc's {kind} qdisc ({why}), needed for {use}: use a kernel "
                    f"with CONFIG_NET_SCH_{kind.upper()}"
                    + (", or leave the latency out to shape the bandwidth only" if kind == "netem" else "")
                )
    finally:
        subprocess.run(["ip", "netns", "del", probe], stdin=subprocess.DEVNULL, capture_output=True, timeout=10)


def _owner_alive(name: str) -> bool:
    """Whether the process a namespace name ``collc-<pid>-…`` names is still running (True when unsure)."""
    m = re.match(re.escape(NAME_PREFIX) + r"(\d+)-", name)
    if m is None:
        return True
    try:
        os.kill(int(m.group(1)), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _delete_namespace(name: str) -> None:
    """Kill the processes left in namespace ``name`` (launched into it by a cluster) and delete it."""
    for _ in range(3):
        try:
            out = subprocess.run(
                ["ip", "netns", "pids", name], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            break
        pids = [int(p) for p in out.split() if p.isdigit() and int(p) != os.getpid()]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)
    subprocess.run(["ip", "netns", "del", name], stdin=subprocess.DEVNULL, capture_output=True, timeout=10)


def remove_leftovers(prefix: str = NAME_PREFIX) -> list[str]:
    """Delete the namespaces of clusters whose process has died (names starting with ``prefix``, by default
    every cluster's, whose ``<pid>`` is gone), with what still runs in them; the names deleted.  A running
    cluster's namespaces are left alone."""
    if not prefix.startswith(NAME_PREFIX):
        raise CollError(f"remove_leftovers: {prefix!r} is not a cluster's prefix (they start with {NAME_PREFIX!r})")
    gone = [n for n in _namespaces() if n.startswith(prefix) and not _owner_alive(n)]
    for name in gone:
        _delete_namespace(name)
    for folder in Path(tempfile.gettempdir()).glob(f"{prefix}*"):  # the launcher files of `Cluster.start`
        if folder.is_dir() and re.fullmatch(re.escape(NAME_PREFIX) + r"\d+-[0-9a-f]{6}-\w+", folder.name):
            if not _owner_alive(folder.name):
                shutil.rmtree(folder, ignore_errors=True)
    return gone


# --------------------------------------------------------------------------------------------------------------
# The cluster
# --------------------------------------------------------------------------------------------------------------

_LAUNCHER = """#!/bin/sh
# hydra's ssh launcher, run as: {script} -x HOST '"PROXY"' ARGS...: start PROXY in HOST's namespace.
[ "$1" = "-x" ] && shift
host=$1; shift
exe=${{1#\\"}}; exe=${{exe%\\"}}; shift
case "$host" in
{cases}
  *) echo "collc emulated cluster: no host $host (hosts: {hosts})" >&2; exit 255 ;;
esac
exec ip netns exec "$ns" "$exe" "$@"
"""


class Cluster:
    """``hosts`` emulated hosts of ``ranks_per_host`` ranks each, their links shaped to ``bandwidth`` (a rate,
    `parse_rate`; None: not shaped) and ``latency`` (`parse_latency`; None or 0: none added).

    ``with Cluster(hosts=2, ranks_per_host=2, bandwidth="10gbit") as c: c.mpiexec([...])`` makes the namespaces
    and links on entry and removes them on exit, whatever ends the block.  `mpiexec_prefix`, `mpiexec_args` and
    `env` are the pieces of a command line for other launchers (`collc.backends.mpi_launch.run`)."""

    def __init__(
        self,
        hosts: int,
        ranks_per_host: int = 1,
        bandwidth: str | int | None = None,
        latency: str | float | None = None,
        shape: str | Sequence[int] | None = None,
    ) -> None:
        if not 1 <= hosts <= MAX_HOSTS:
            raise CollError(f"an emulated cluster has 1 to {MAX_HOSTS} hosts, not {hosts}")
        if ranks_per_host < 1:
            raise CollError(f"an emulated host runs at least one rank, not {ranks_per_host}")
        try:
            rate = parse_rate(bandwidth) if isinstance(bandwidth, str) else bandwidth
            delay = parse_latency(latency) if isinstance(latency, str) else float(latency or 0.0)
            dims = parse_shape(shape, hosts) if isinstance(shape, str) else None if shape is None else tuple(shape)
            if dims is not None and (math.prod(dims) != hosts or min(dims) < 1):
                raise ValueError(f"a torus of {'x'.join(map(str, dims))} does not hold {hosts} hosts")
        except ValueError as err:
            raise CollError(f"emulated cluster: {err}") from None
        if rate is not None and rate < 8:
            raise CollError(f"emulated cluster: a rate of {rate} bits/s is below 8, the least tc shapes to")
        if not 0 <= delay <= 10:
            raise CollError(f"emulated cluster: a latency of {delay} s is not between 0 and 10 s")
        self.network = Network(hosts, rate, delay, dims)
        self.ranks_per_host = ranks_per_host
        # Star: the hosts' links meet on the switch's bridge, where mpiexec runs.  Ring or torus: every host
        # routes (its address on a local interface, TORUS_IFACE, links unnumbered), mpiexec runs on host 0.
        self.iface = HOST_IFACE if dims is None else TORUS_IFACE
        self.prefix = f"{NAME_PREFIX}{os.getpid()}-{secrets.token_hex(3)}-"
        self.switch = self.prefix + "sw"
        self.namespaces = [f"{self.prefix}h{i}" for i in range(hosts)]
        self.addresses = [f"{SUBNET}.{i + 1}" for i in range(hosts)]
        self._made: list[str] = []
        self._ends: list[tuple[str, str]] = []  # (namespace, device) of every shaped link end
        self._dir: Path | None = None
        self._handlers: dict[int, object] = {}
        self._started = False

    @classmethod
    def of(cls, network: Network, ranks_per_host: int = 1) -> Cluster:
        """The cluster of a `Network` (`parse_network`)."""
        return cls(network.hosts, ranks_per_host, network.rate, network.latency, network.dims)

    @property
    def nranks(self) -> int:
        """Ranks a job runs by default: every host's ``ranks_per_host``."""
        return self.network.hosts * self.ranks_per_host

    def describe(self) -> str:
        """``2 emulated hosts x 2 ranks, 10gbit links, latency 5us``."""
        net = self.network
        links = "unshaped links" if net.rate is None else f"{rate_text(net.rate)} links"
        latency = f", latency {_duration_text(net.latency)}" if net.latency else ""
        shape = "" if net.dims is None else f" on a {shape_text(net.dims)}"
        return f"{net.hosts} emulated hosts x {self.ranks_per_host} ranks{shape}, {links}{latency}"

    # ----------------------------------------------------------------------------------------------------------
    # Starting and stopping
    # ----------------------------------------------------------------------------------------------------------

    def __enter__(self) -> Cluster:
        self._catch_signals()
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def start(self) -> None:
        """Make the namespaces, the bridge, the links and their qdiscs, and the launcher files (`close` undoes
        it, also after a failure half way)."""
        if self._started:
            return
        self._started = True
        check_support(latency=self.network.latency > 0)
        self._dir = Path(tempfile.mkdtemp(prefix=self.prefix))
        if self.network.dims is not None:
            self._start_torus(self.network.dims)
            self._write_launcher()
            return
        sw = ["ip", "-n", self.switch]
        self._add_namespace(self.switch)
        _run([*sw, "link", "add", BRIDGE, "type", "bridge"], "making the bridge")
        _run([*sw, "addr", "add", f"{SWITCH_ADDRESS}/24", "dev", BRIDGE], "addressing the bridge")
        _run([*sw, "link", "set", BRIDGE, "up"], "starting the bridge")
        for i, (ns, address) in enumerate(zip(self.namespaces, self.addresses, strict=True)):
            port = f"h{i}"
            self._add_namespace(ns)
            _run([*sw, "link", "add", port, "type", "veth", "peer", "name", HOST_IFACE, "netns", ns], "making a link")
            _run([*sw, "link", "set", port, "master", BRIDGE], "joining a link to the bridge")
            _run([*sw, "link", "set", port, "up"], "starting a link")
            host = ["ip", "-n", ns]
            _run([*host, "addr", "add", f"{address}/24", "dev", HOST_IFACE], "addressing a host")
            _run([*host, "link", "set", HOST_IFACE, "up"], "starting a host's link")
            self._shape(ns, HOST_IFACE, self.network.latency)
            self._shape(self.switch, port, 0.0)
            self._ends += [(ns, HOST_IFACE), (self.switch, port)]
        self._write_launcher()

    def _start_torus(self, dims: tuple[int, ...]) -> None:
        """Hosts on a ring or torus of links, each a router: its address on a local veth (TORUS_IFACE), a link
        ``d<k>p`` to its neighbour one up in dimension k and ``d<k>m`` one down (one link when the dimension has
        2 hosts), every link end shaped, and a route to every other host: dimension by dimension, the shorter
        way round (ties: up from the lower-numbered host, so a pair's two directions share their links)."""

        def coord(i: int, k: int) -> int:
            return torus_coord(i, dims, k)

        for ns, address in zip(self.namespaces, self.addresses, strict=True):
            self._add_namespace(ns)
            for knob in ("ipv4/ip_forward", "ipv4/conf/all/rp_filter", "ipv4/conf/default/rp_filter"):
                value = "1" if knob.endswith("forward") else "0"
                _run(["ip", "netns", "exec", ns, "sh", "-c", f"echo {value} > /proc/sys/net/{knob}"], "routing")
            host = ["ip", "-n", ns]
            _run([*host, "link", "add", TORUS_IFACE, "type", "veth", "peer", "name", TORUS_IFACE + "x"], "an address")
            _run([*host, "addr", "add", f"{address}/32", "dev", TORUS_IFACE], "addressing a host")
            for dev in (TORUS_IFACE, TORUS_IFACE + "x"):
                _run([*host, "link", "set", dev, "up"], "starting a host's address")
        for i, ns in enumerate(self.namespaces):
            for k, n in enumerate(dims):
                if n < 2 or (n == 2 and coord(i, k) == 1):
                    continue
                peer = self.namespaces[torus_step(i, dims, k, 1)]
                link = ["ip", "-n", ns, "link", "add", f"d{k}p", "type", "veth", "peer", "name", f"d{k}m"]
                _run([*link, "netns", peer], "making a link")
                for end_ns, dev in ((ns, f"d{k}p"), (peer, f"d{k}m")):
                    _run(["ip", "-n", end_ns, "link", "set", dev, "up"], "starting a link")
                    self._shape(end_ns, dev, self.network.latency)
                    self._ends.append((end_ns, dev))
        for i, ns in enumerate(self.namespaces):
            for j, address in enumerate(self.addresses):
                k = next((k for k in range(len(dims)) if coord(i, k) != coord(j, k)), None)
                if k is None:
                    continue
                up = (coord(j, k) - coord(i, k)) % dims[k]
                forward = 2 * up < dims[k] or (2 * up == dims[k] and i < j)
                if dims[k] == 2:  # one link between the two, d<k>p on the lower host
                    forward = coord(i, k) == 0
                dev = f"d{k}p" if forward else f"d{k}m"
                via = self.addresses[torus_step(i, dims, k, 1 if forward else -1)]
                route = ["route", "add", f"{address}/32", "via", via, "dev", dev, "onlink", "src", self.addresses[i]]
                _run(["ip", "-n", ns, *route], "adding a route")

    def _add_namespace(self, name: str) -> None:
        _run(["ip", "netns", "add", name], "making a network namespace")
        self._made.append(name)
        _run(["ip", "-n", name, "link", "set", "lo", "up"], "starting a loopback")

    def _shape(self, ns: str, dev: str, latency: float) -> None:
        """A tbf at the link's rate on ``dev`` in ``ns``, under a netem delay of ``latency`` when there is one."""
        rate = self.network.rate
        tc = ["tc", "-n", ns, "qdisc", "add", "dev", dev]
        parent = ["root"]
        if latency > 0:
            delay = f"{max(latency * 1e6, 0.001):.3f}us"  # tc reads microseconds, to the ns where it can
            _run([*tc, "root", "handle", "1:", "netem", "delay", delay, "limit", "100000"], "adding a netem delay")
            parent = ["parent", "1:1"]
        if rate is not None:
            burst = max(_MIN_BURST, round(rate / 8 * _BURST_TIME))
            tbf = ["tbf", "rate", f"{rate}bit", "burst", str(burst), "latency", _QUEUE_LATENCY]
            _run([*tc, *parent, "handle", "10:", *tbf], "shaping a link")

    def _write_launcher(self) -> None:
        assert self._dir is not None
        script = self._dir / "launch"
        cases = "\n".join(
            f"  {address}) ns={ns} ;;" for address, ns in zip(self.addresses, self.namespaces, strict=True)
        )
        script.write_text(_LAUNCHER.format(script=script, cases=cases, hosts=" ".join(self.addresses)))
        script.chmod(0o755)
        hostfile = self._dir / "hosts"
        hostfile.write_text("".join(f"{address}:{self.ranks_per_host}\n" for address in self.addresses))

    def close(self) -> None:
        """Kill what runs in the cluster's namespaces and delete them (with their links, bridge and qdiscs), and
        the launcher files.  Signals wait until it is done."""
        blocked = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
        main = threading.current_thread() is threading.main_thread()
        if main:
            signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        try:
            for name in reversed(self._made):
                _delete_namespace(name)
            self._made.clear()
            self._ends.clear()
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None
            self._started = False
        finally:
            self._restore_signals()
            if main:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)

    def _catch_signals(self) -> None:
        """SIGTERM and SIGHUP end the ``with`` block as an exception (``SystemExit(128 + signal)``), so that the
        cluster is removed; in the main thread only (where Python handles signals)."""
        if threading.current_thread() is not threading.main_thread():
            return

        def end(signum: int, frame: FrameType | None) -> None:
            raise SystemExit(128 + signum)

        for sig in (signal.SIGTERM, signal.SIGHUP):
            self._handlers[sig] = signal.signal(sig, end)

    def _restore_signals(self) -> None:
        for sig, handler in self._handlers.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._handlers.clear()

    # ----------------------------------------------------------------------------------------------------------
    # Running jobs
    # ----------------------------------------------------------------------------------------------------------

    def _files(self) -> Path:
        if self._dir is None:
            raise CollError("the emulated cluster is not running: use it inside 'with Cluster(...) as c:'")
        return self._dir

    @property
    def mpiexec_prefix(self) -> list[str]:
        """What runs ``mpiexec`` in the switch's namespace: ``ip netns exec <switch>``."""
        return ["ip", "netns", "exec", self.switch if self.network.dims is None else self.namespaces[0]]

    @property
    def mpiexec_args(self) -> list[str]:
        """The mpiexec options that place ranks on the cluster's hosts (``ranks_per_host`` per host, in order)."""
        files = self._files()
        return [
            "-launcher", "ssh", "-launcher-exec", str(files / "launch"), "-f", str(files / "hosts"),
            "-iface", BRIDGE if self.network.dims is None else TORUS_IFACE,
        ]  # fmt: skip

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) with the `MPI_ENV` settings it does not set itself."""
        out = dict(os.environ if base is None else base)
        out.setdefault("FI_TCP_IFACE", self.iface)
        for key, value in MPI_ENV.items():
            out.setdefault(key, value)
        return out

    def mpiexec_command(self, argv: Sequence[str], nranks: int | None = None) -> list[str]:
        """The command line that runs ``argv`` on ``nranks`` ranks (default `nranks`) across the hosts."""
        n = self.nranks if nranks is None else nranks
        return [*self.mpiexec_prefix, str(mpitools.mpiexec()), *self.mpiexec_args, "-n", str(n), *argv]

    def mpiexec(
        self,
        argv: Sequence[str],
        *,
        nranks: int | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on the cluster (`mpiexec_command`) and return it finished, its output captured as text;
        a failing job is returned, not raised.  ``env``: variables added to this process's environment.
        CollError when it runs longer than ``timeout`` seconds (it is killed)."""
        cmd = self.mpiexec_command(argv, nranks)
        job_env = mpitools.mpi_env(self.nranks if nranks is None else nranks, self.env({**os.environ, **(env or {})}))
        proc = subprocess.Popen(
            cmd, env=job_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True,
        )  # fmt: skip
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._kill_jobs(proc)
            raise CollError(
                f"the job on the emulated cluster ran longer than {timeout:g} s and was killed: {' '.join(argv)}"
            ) from None
        except BaseException:
            self._kill_jobs(proc)
            raise
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)

    def _kill_jobs(self, proc: subprocess.Popen[str]) -> None:
        """Kill a job: mpiexec's process group, and every process it started in the cluster's namespaces."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for ns in self._made:
            out = subprocess.run(
                ["ip", "netns", "pids", ns], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10
            ).stdout
            for pid in (int(p) for p in out.split() if p.isdigit()):
                if pid != os.getpid():
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
        proc.communicate()

    # ----------------------------------------------------------------------------------------------------------
    # Looking at it
    # ----------------------------------------------------------------------------------------------------------

    def qdiscs(self) -> dict[str, list[dict[str, object]]]:
        """The qdiscs on every link end, as ``tc -j qdisc show`` gives them: ``"<host ns>/eth0"`` (uplinks) and
        ``"<switch ns>/h<i>"`` (downlinks); on a ring or torus ``"<host ns>/d<k>p"`` and ``"<host ns>/d<k>m"``."""
        out: dict[str, list[dict[str, object]]] = {}
        for ns, dev in self._ends:
            text = _run(["tc", "-j", "-n", ns, "qdisc", "show", "dev", dev], "reading a link's qdiscs")
            out[f"{ns}/{dev}"] = json.loads(text or "[]")
        return out

    def link_rates(self) -> dict[str, int | None]:
        """Every link end's shaped rate in bits/s as tc reports it (None: not shaped), keyed as `qdiscs`."""
        rates: dict[str, int | None] = {}
        for end, qdiscs in self.qdiscs().items():
            found = [q for q in qdiscs if q.get("kind") == "tbf"]
            options = found[0].get("options") if found else None
            rate = options.get("rate") if isinstance(options, dict) else None
            rates[end] = int(rate) * 8 if isinstance(rate, int | float) else None
        return rates


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m collc.netemu [--remove-leftovers]``: whether this machine can run an emulated cluster (exit 0)
    or what it lacks (exit 2); with ``--remove-leftovers``, also delete the namespaces dead clusters left."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m collc.netemu", description=main.__doc__)
    parser.add_argument("--remove-leftovers", action="store_true", help="delete the namespaces of dead clusters")
    args = parser.parse_args(argv)
    try:
        check_support()
    except CollError as err:
        print(f"error: {err.message}")
        return 2
    print("this machine can run an emulated cluster (tc netem for latency: ", end="")
    try:
        check_support(latency=True)
        print("yes)")
    except CollError:
        print("no, bandwidth shaping only)")
    if args.remove_leftovers:
        for name in remove_leftovers():
            print(f"removed {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
