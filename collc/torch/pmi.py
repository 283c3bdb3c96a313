"""A PMI-1 server, so that processes started without ``mpiexec`` (by torchrun) form one MPI world.

MPICH's ``MPI_Init`` learns its rank, the world size and the other processes'
addresses from a process manager through PMI: a line protocol on a socket
whose descriptor ``mpiexec`` passes in ``PMI_FD`` (with ``PMI_RANK`` and
``PMI_SIZE``).  This module is that process manager's PMI side and nothing
else: a key-value space, barriers and the job's attributes.  It runs as a
process of its own (``python .../collc/torch/pmi.py --size N``: by path, so that it imports
neither collc nor torch), started by the
group's rank 0 (`collc.torch.mpi`); it prints its port, serves the N processes
until each has finalized or gone, and exits.  With ``--detach`` it serves from a
child process and the process started exits at once, so that the starter has no
child left to wait for.

The commands served (PMI-1 wire protocol, one ``cmd=NAME key=value ...`` line each):
``init``, ``get_maxes``, ``get_appnum``, ``get_my_kvsname``, ``get_universe_size``,
``put``, ``get``, ``barrier_in``, ``finalize``, ``abort``.  A process that
disconnects before it finalized ends the job's barriers: every other process's
pending and later PMI calls fail (MPI reports the error) instead of waiting forever.
"""

from __future__ import annotations

import argparse
import os
import selectors
import socket
import sys
import time
from dataclasses import dataclass, field

__all__ = ["Server", "main", "process_mapping"]

MAXES = "kvsname_max=256 keylen_max=64 vallen_max=1024"


def process_mapping(hosts: list[str]) -> str:
    """MPICH's ``PMI_process_mapping`` for ranks on ``hosts`` (rank order): ``(vector,(node,1,count),...)``."""
    node_of: dict[str, int] = {}
    blocks: list[tuple[int, int]] = []
    for host in hosts:
        node = node_of.setdefault(host, len(node_of))
        if blocks and blocks[-1][0] == node:
            blocks[-1] = (node, blocks[-1][1] + 1)
        else:
            blocks.append((node, 1))
    return "(vector," + ",".join(f"({node},1,{count})" for node, count in blocks) + ")"


def _fields(line: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for token in line.split(" "):
        key, eq, value = token.partition("=")
        if eq:
            out[key] = value
    return out


@dataclass
class Client:
    sock: socket.socket
    buffer: bytes = b""
    finalized: bool = False


@dataclass
class Server:
    """The PMI state of one job of ``size`` processes."""

    size: int
    kvsname: str
    mapping: str
    kvs: dict[str, str] = field(default_factory=dict)
    waiting: list[Client] = field(default_factory=list)  # in a barrier
    broken: str | None = None  # why barriers fail: a process left without finalizing

    def reply(self, client: Client, text: str) -> None:
        try:
            client.sock.sendall(text.encode() + b"\n")
        except OSError:
            pass

    def handle(self, client: Client, line: str) -> None:
        f = _fields(line)
        cmd = f.get("cmd", "")
        if cmd == "init":
            self.reply(client, "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0")
        elif cmd == "get_maxes":
            self.reply(client, f"cmd=maxes {MAXES} rc=0")
        elif cmd == "get_appnum":
            self.reply(client, "cmd=appnum appnum=0 rc=0")
        elif cmd == "get_my_kvsname":
            self.reply(client, f"cmd=my_kvsname kvsname={self.kvsname} rc=0")
        elif cmd == "get_universe_size":
            self.reply(client, f"cmd=universe_size size={self.size} rc=0")
        elif cmd == "put":
            self.kvs[f.get("key", "")] = f.get("value", "")
            self.reply(client, "cmd=put_result rc=0")
        elif cmd == "get":
            key = f.get("key", "")
            value = self.mapping if key == "PMI_process_mapping" else self.kvs.get(key)
            if value is None:
                self.reply(client, "cmd=get_result rc=-1 msg=key_not_found")
            else:
                self.reply(client, f"cmd=get_result rc=0 value={value}")
        elif cmd == "barrier_in":
            if self.broken is not None:
                self.reply(client, f"cmd=barrier_out rc=-1 msg={self.broken}")
                return
            self.waiting.append(client)
            if len(self.waiting) == self.size:
                for waiter in self.waiting:
                    self.reply(waiter, "cmd=barrier_out rc=0")
                self.waiting.clear()
        elif cmd == "finalize":
            client.finalized = True
            self.reply(client, "cmd=finalize_ack rc=0")
        elif cmd == "abort":
            self.fail("a_process_aborted")
        else:
            self.reply(client, f"cmd={cmd or 'unknown'}_result rc=-1 msg=unsupported_by_collc_pmi")

    def fail(self, why: str) -> None:
        """Fail every pending and later barrier: some process will never arrive."""
        self.broken = why
        for waiter in self.waiting:
            self.reply(waiter, f"cmd=barrier_out rc=-1 msg={why}")
        self.waiting.clear()


def serve(listener: socket.socket, server: Server, connect_timeout: float) -> int:
    """Serve until every process has connected and gone; 1 if they did not all connect in time."""
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    clients: dict[socket.socket, Client] = {}
    connected = 0
    deadline = time.monotonic() + connect_timeout
    while connected < server.size or clients:
        if connected < server.size and time.monotonic() > deadline:
            return 1
        for key, _ in sel.select(timeout=1.0):
            sock = key.fileobj
            if sock is listener:
                conn, _ = listener.accept()
                conn.setblocking(True)
                clients[conn] = Client(conn)
                connected += 1
                sel.register(conn, selectors.EVENT_READ)
                continue
            assert isinstance(sock, socket.socket)
            client = clients[sock]
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                sel.unregister(sock)
                sock.close()
                del clients[sock]
                if not client.finalized:
                    server.fail("a_process_left_without_finalizing")
                continue
            client.buffer += data
            while b"\n" in client.buffer:
                raw, _, client.buffer = client.buffer.partition(b"\n")
                line = raw.decode(errors="replace").strip()
                if line:
                    server.handle(client, line)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pmi.py", description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, required=True, help="the number of processes of the job")
    parser.add_argument("--kvsname", default="collc_kvs", help="the name of the job's key-value space")
    parser.add_argument("--mapping", default=None, help="PMI_process_mapping (default: all on one node)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds for every process to connect")
    parser.add_argument("--detach", action="store_true", help="serve from a child process and exit at once")
    args = parser.parse_args(argv)
    mapping = args.mapping or f"(vector,(0,1,{args.size}))"
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("", 0))
    listener.listen(max(args.size, 16))
    print(listener.getsockname()[1], flush=True)
    if args.detach and os.fork() > 0:
        os._exit(0)  # the starter waits for this process only; the child serves on, in a session of its own
    if args.detach:
        os.setsid()
    sys.stdout.flush()
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the starter's pipe closes
    return serve(listener, Server(args.size, args.kvsname, mapping), args.timeout)


if __name__ == "__main__":
    sys.exit(main())
