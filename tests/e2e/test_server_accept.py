"""Connections spread over the workers (app/server/accept.py), seen from the kernel's tables:
which worker process holds the socket of each client connection."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from tests.e2e.tsd_process import TsdProcess, read_exactly_until, start_tsd

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")


def worker_pids(tsd: TsdProcess) -> list[int]:
    pids: list[int] = []
    for task in os.listdir(f"/proc/{tsd.process.pid}/task"):
        with open(f"/proc/{tsd.process.pid}/task/{task}/children") as children:
            pids += [int(pid) for pid in children.read().split()]
    return pids


def tcp_inodes(server_port: int, state: str) -> dict[int, int]:
    """Socket inode -> remote port of every socket on local ``server_port`` in ``state``
    (``01`` established, ``0A`` listening)."""
    inodes: dict[int, int] = {}
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            local, remote, inode = fields[1], fields[2], int(fields[9])
            if fields[3] == state and int(local.split(":")[1], 16) == server_port:
                inodes[inode] = int(remote.split(":")[1], 16)
    return inodes


def socket_fds(pid: int) -> dict[int, int]:
    """fd -> socket inode of the sockets ``pid`` holds."""
    fds: dict[int, int] = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        if target.startswith("socket:["):
            fds[int(fd)] = int(target[8:-1])
    return fds


def watches_listener(pid: int, server_port: int) -> bool:
    """Whether the worker's event loop polls the listening socket (it accepts)."""
    listening = tcp_inodes(server_port, "0A")
    listener_fds = {fd for fd, inode in socket_fds(pid).items() if inode in listening}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:[eventpoll]":
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as info:
                polled = {int(line.split()[1]) for line in info if line.startswith("tfd:")}
        except FileNotFoundError:
            continue
        if polled & listener_fds:
            return True
    return False


def wait_until_all_accept(tsd: TsdProcess, workers: int, timeout_s: float = 30.0) -> None:
    """start_tsd returns once one worker answers; the others may still be booting."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pids = worker_pids(tsd)
        if len(pids) == workers and all(watches_listener(pid, tsd.port) for pid in pids):
            return
        time.sleep(0.1)
    raise AssertionError(f"not every worker accepts after {timeout_s} s")


def holder_of(tsd: TsdProcess, clients: list[socket.socket]) -> dict[int, int]:
    """Client port -> pid of the worker holding the server side of that connection."""
    wanted = {sock.getsockname()[1] for sock in clients}
    by_inode = tcp_inodes(tsd.port, "01")
    holders: dict[int, int] = {}
    for pid in worker_pids(tsd):
        for inode in socket_fds(pid).values():
            port = by_inode.get(inode)
            if port in wanted:
                holders[port] = pid
    return holders


def connect_and_greet(tsd: TsdProcess, count: int) -> list[socket.socket]:
    """``count`` connections opened back to back, each answered once (so each is accepted)."""
    socks = [tsd.connect(timeout_s=10) for _ in range(count)]
    for sock in socks:
        sock.sendall(b"version\n")
    for sock in socks:
        reply = read_exactly_until(sock, b"Built on", timeout_s=10)
        assert reply.startswith(b"pytsd "), reply
    return socks


@pytest.mark.parametrize("connections", [4, 40])
def test_connections_opened_at_once_spread_over_both_workers(tmp_path: Path,
                                                             connections: int) -> None:
    tsd = start_tsd(tmp_path, {}, workers=2)
    socks: list[socket.socket] = []
    try:
        wait_until_all_accept(tsd, 2)
        socks = connect_and_greet(tsd, connections)
        holders = holder_of(tsd, socks)
        assert len(holders) == connections
        per_worker = [list(holders.values()).count(pid) for pid in worker_pids(tsd)]
        # Even to within the one connection a worker may take before it sees its share.
        assert sorted(per_worker) in ([connections // 2, connections // 2],
                                      [connections // 2 - 1, connections // 2 + 1]), per_worker
    finally:
        for sock in socks:
            sock.close()
        tsd.stop()


def test_one_worker_still_accepts_every_connection(tmp_path: Path) -> None:
    tsd = start_tsd(tmp_path, {}, workers=1)
    socks: list[socket.socket] = []
    try:
        wait_until_all_accept(tsd, 1)
        socks = connect_and_greet(tsd, 20)
        assert set(holder_of(tsd, socks).values()) == set(worker_pids(tsd))
    finally:
        for sock in socks:
            sock.close()
        tsd.stop()
