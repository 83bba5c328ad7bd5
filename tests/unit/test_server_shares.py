"""Connections per client address counted over forked workers (app/server/shares.py): the
memory is made before the fork, as gunicorn's arbiter does, and each child plays a worker."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from typing import Any

import pytest

from app.server.shares import ADDRESS_BUCKETS, WorkerShares

FORK = multiprocessing.get_context("fork")


def _worker(shares: WorkerShares, pipe: Connection) -> None:
    """Runs commands from the test: ("hold", address) -> total, ("release", address), ("leave",)."""
    pipe.send(shares.join())
    while True:
        command, *args = pipe.recv()
        if command == "hold":
            pipe.send(shares.hold_address(args[0]))
        elif command == "release":
            shares.release_address(args[0])
            pipe.send(None)
        elif command == "leave":
            shares.leave()
            pipe.send(None)
        elif command == "query":  # ("query", True) starts one, ("query", False) ends one
            shares.query_started() if args[0] else shares.query_ended()
            pipe.send(None)
        elif command == "others_querying":
            pipe.send(shares.others_querying(args[0]))
        elif command == "exit":  # without leaving, as a killed worker would
            os._exit(0)


class Worker:
    def __init__(self, shares: WorkerShares) -> None:
        self.pipe, child = FORK.Pipe()
        self.process = FORK.Process(target=_worker, args=(shares, child), daemon=True)
        self.process.start()
        assert self.pipe.recv() is True  # it got a slot

    def ask(self, *command: Any) -> Any:
        self.pipe.send(command)
        return self.pipe.recv()

    def kill(self) -> None:
        assert self.process.pid is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.join(5)  # reaped: its pid is gone


@contextmanager
def workers(shares: WorkerShares, count: int) -> Iterator[list[Worker]]:
    started = [Worker(shares) for _ in range(count)]
    try:
        yield started
    finally:
        for worker in started:
            if worker.process.is_alive():
                worker.kill()


def test_an_address_is_counted_over_every_worker() -> None:
    shares = WorkerShares()
    with workers(shares, 2) as (first, second):
        assert [first.ask("hold", "10.0.0.1") for _ in range(3)] == [1, 2, 3]
        assert second.ask("hold", "10.0.0.1") == 4  # the first worker's three count too
        assert second.ask("hold", "10.0.0.2") == 1  # another address, its own count
        first.ask("release", "10.0.0.1")
        assert shares.held_from("10.0.0.1") == 3
        assert second.ask("hold", "10.0.0.1") == 4


def test_the_creating_process_cannot_join_its_own_memory() -> None:
    assert WorkerShares().join() is False


def test_a_dead_workers_connections_stop_counting() -> None:
    shares = WorkerShares()
    with workers(shares, 2) as (doomed, survivor):
        for _ in range(5):
            doomed.ask("hold", "10.0.0.1")
        assert survivor.ask("hold", "10.0.0.1") == 6
        doomed.kill()  # its row is still written, but its pid is gone
        assert survivor.ask("hold", "10.0.0.1") == 2


def test_a_new_worker_in_a_dead_workers_slot_starts_from_zero() -> None:
    shares = WorkerShares()
    with workers(shares, 1) as (doomed,):
        for _ in range(5):
            doomed.ask("hold", "10.0.0.1")
        doomed.pipe.send(("exit",))
        doomed.process.join(5)
    with workers(shares, 1) as (successor,):  # takes the first slot: the dead worker's
        assert successor.ask("hold", "10.0.0.1") == 1


def test_forget_and_leave_clear_a_workers_counts() -> None:
    shares = WorkerShares()
    with workers(shares, 2) as (first, second):
        for _ in range(3):
            first.ask("hold", "10.0.0.1")
            second.ask("hold", "10.0.0.1")
        assert shares.held_from("10.0.0.1") == 6
        assert first.process.pid is not None
        shares.forget(first.process.pid)  # what the arbiter does once it reaps a worker
        assert shares.held_from("10.0.0.1") == 3
        second.ask("leave")
        assert shares.held_from("10.0.0.1") == 0
        second.ask("release", "10.0.0.1")  # after leaving, the row is not its own
        assert shares.held_from("10.0.0.1") == 0


def _same_bucket_as(address: str) -> str:
    """Another IPv4 address whose CRC-32 lands in ``address``'s bucket."""
    shares = WorkerShares.private()
    shares.hold_address(address)
    for last in range(1, 1 << 24):
        other = f"10.{last >> 16}.{(last >> 8) & 255}.{last & 255}"
        if other != address and shares.held_from(other) == 1:
            return other
    raise AssertionError("no collision")  # 2^24 addresses over 16,384 buckets: impossible


def test_a_collision_only_makes_the_cap_stricter() -> None:
    assert ADDRESS_BUCKETS == 16384  # the figure the docs give
    neighbour = _same_bucket_as("192.0.2.7")
    shares = WorkerShares.private()
    assert [shares.hold_address("192.0.2.7") for _ in range(2)] == [1, 2]
    assert shares.hold_address(neighbour) == 3  # shares the count: stricter, never looser
    shares.release_address("192.0.2.7")
    assert shares.held_from("192.0.2.7") == 2


def test_a_private_count_is_this_process_alone() -> None:
    shares = WorkerShares.private()
    assert [shares.hold_address("::1") for _ in range(3)] == [1, 2, 3]
    for _ in range(5):  # more releases than holds never go below zero
        shares.release_address("::1")
    assert shares.hold_address("::1") == 1


@pytest.mark.parametrize("address", ["", "127.0.0.1", "2001:db8::1", "\udcff"])
def test_any_address_text_has_a_bucket(address: str) -> None:
    assert WorkerShares.private().hold_address(address) == 1


def test_a_worker_sees_another_workers_query_while_it_runs_and_just_after() -> None:
    shares = WorkerShares()
    with workers(shares, 2) as (first, second):
        assert first.ask("others_querying", 200) is False
        second.ask("query", True)
        assert first.ask("others_querying", 200) is True
        assert second.ask("others_querying", 200) is False  # its own query does not count
        second.ask("query", False)
        assert first.ask("others_querying", 60_000) is True  # ended just now
        time.sleep(0.05)
        assert first.ask("others_querying", 10) is False  # ended 50 ms ago


def test_a_dead_or_departed_workers_queries_stop_counting() -> None:
    shares = WorkerShares()
    with workers(shares, 3) as (doomed, leaving, watcher):
        doomed.ask("query", True)
        leaving.ask("query", True)
        assert watcher.ask("others_querying", 0) is True
        leaving.ask("leave")
        doomed.kill()  # killed mid-query: its count is still written, its pid is gone
        assert watcher.ask("others_querying", 0) is False
