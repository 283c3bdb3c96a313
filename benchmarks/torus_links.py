"""How much traffic an emulated torus carries when every host drives several links at once.

Raw TCP, no MPI: on an emulated ``torus:AxB`` (collc.netemu), every host sends as fast as it can to its first
``k`` torus neighbours at once (one Python sender thread per neighbour, 1 MiB writes, a receiver draining each
connection) for a few seconds, and the table gives the rate each host reached against what its k links allow.
On a machine with few cores the kernel's forwarding of every link is the limit well before the links' rate;
the multi-port torus programs of benchmarks/network.py meet the same limit (docs/network.md, "All links at once").

    python benchmarks/torus_links.py                              # torus:3x3, 50 and 200 Mbit/s, 1 and 4 links
    python benchmarks/torus_links.py --dims 2x4 --rates 1gbit --ports 1,2,3

Needs root (network namespaces).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collc import netemu  # noqa: E402

PORT = 5999
RECEIVER = textwrap.dedent("""
    import socket, sys, threading
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], PORT))
    s.listen(64)
    def drain(c):
        while c.recv(1 << 20):
            pass
    while True:
        c, _ = s.accept()
        threading.Thread(target=drain, args=(c,), daemon=True).start()
""").replace("PORT", str(PORT))
SENDER = textwrap.dedent("""
    import socket, sys, threading, time
    src, secs, peers = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    data, sent = b"x" * (1 << 20), [0] * len(peers)
    def send(i, peer):
        c = socket.create_connection((peer, PORT), source_address=(src, 0))
        end = time.time() + secs
        while time.time() < end:
            sent[i] += c.send(data)
    threads = [threading.Thread(target=send, args=(i, p)) for i, p in enumerate(peers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(sum(sent) / secs * 8)
""").replace("PORT", str(PORT))


def neighbours(i: int, dims: tuple[int, ...]) -> list[int]:
    """Host i's torus neighbours, one up and one down along each dimension in turn (distinct hosts only)."""
    out: list[int] = []
    for k in range(len(dims)):
        for step in (1, -1):
            j = netemu.torus_step(i, dims, k, step)
            if j != i and j not in out:
                out.append(j)
    return out


def run(dims: tuple[int, ...], rate: str, ports: int, secs: float, work: Path) -> list[float]:
    """Bits per second each host sent to its first ``ports`` neighbours at once."""
    hosts = 1
    for d in dims:
        hosts *= d
    (work / "recv.py").write_text(RECEIVER)
    (work / "send.py").write_text(SENDER)
    with netemu.Cluster(hosts, 1, rate, shape=dims) as cluster:
        ns, addr = cluster.namespaces, cluster.addresses
        receivers = [subprocess.Popen(["ip", "netns", "exec", ns[i], sys.executable, str(work / "recv.py"), addr[i]])
                     for i in range(hosts)]  # fmt: skip
        try:
            time.sleep(1.0)
            senders = []
            for i in range(hosts):
                peers = [addr[j] for j in neighbours(i, dims)[:ports]]
                cmd = ["ip", "netns", "exec", ns[i], sys.executable, str(work / "send.py"), addr[i], str(secs), *peers]
                senders.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
            return [float(s.communicate(timeout=secs + 60)[0]) for s in senders]
        finally:
            for r in receivers:
                r.kill()
                r.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dims", default="3x3", help="the torus, AxB")
    parser.add_argument("--rates", default="50mbit,200mbit", help="link rates, one cluster each")
    parser.add_argument("--ports", default="1,4", help="how many neighbours each host sends to at once")
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    dims = tuple(int(d) for d in args.dims.split("x"))
    print(f"# raw TCP on an emulated torus:{args.dims}, on {platform.node()} ({os.cpu_count()} cores, "
          f"{platform.machine()}), {args.seconds:g} s per run")  # fmt: skip
    print(" ".join(["# command: python", f"benchmarks/{Path(__file__).name}", *sys.argv[1:]]))
    print(f"{'rate':>8} {'links':>5} {'allowed':>9} {'median':>9} {'min':>9} {'max':>9} {'median/allowed':>14}")
    with tempfile.TemporaryDirectory(prefix="collc-torus-links-") as tmp:
        for rate in args.rates.split(","):
            for ports in (int(k) for k in args.ports.split(",")):
                got = run(dims, rate, ports, args.seconds, Path(tmp))
                allowed = netemu.parse_rate(rate) * min(ports, len(neighbours(0, dims)))
                med = statistics.median(got)
                print(f"{rate:>8} {ports:>5} {allowed / 1e6:>7.0f} M {med / 1e6:>7.0f} M {min(got) / 1e6:>7.0f} M "
                      f"{max(got) / 1e6:>7.0f} M {med / allowed:>14.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
