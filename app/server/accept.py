"""Accepting connections so that they spread over the workers.

Every worker watches the one listening socket gunicorn shares between them. asyncio's own
``start_server`` accepts up to ``backlog`` connections per wake-up, so the worker that wakes
first takes every pending connection and the others sit idle (four bench connections all
landed on one worker). Here a worker accepts one connection per readiness event, and stops
watching the socket for a moment while it holds more than its share of the connections of all
workers: the other workers, woken by the same event, take the next ones.

The shares live in memory the arbiter maps before it forks the workers
(:class:`~app.server.shares.WorkerShares`, from ``TsdWorker.setup``); each worker owns one
slot (its pid and its connection count) and only reads the others'. Without that memory (a
worker class loaded only after the fork) a worker accepts as asyncio would, one at a time.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable
from typing import Any

from app.server.shares import WorkerShares

LOG = logging.getLogger(__name__)

SLACK_FRACTION = 8  # over a large share by more than 1/8 of it: pause
SLACK_FROM_SHARE = 64  # below this share, exact balance (a handful of clients spread evenly)
PAUSE_S = 0.05  # a worker over its share stops accepting this long (then accepts one again)
# Out of file descriptors: wait this long before accepting again (the loop would spin).
FD_EXHAUSTED_PAUSE_S = 0.5


class Acceptor:
    """Watches listening sockets in the running loop; hands each new socket to ``on_socket``.

    ``held`` tells how many connections this worker holds now.
    """

    def __init__(self, listeners: list[socket.socket], shares: WorkerShares | None,
                 held: Callable[[], int],
                 on_socket: Callable[[socket.socket], Any]) -> None:
        self.loop = asyncio.get_running_loop()
        self.listeners = listeners
        self.shares = shares
        self.held = held
        self.on_socket = on_socket
        self.watching = False
        self._resume: asyncio.TimerHandle | None = None
        self.closed = False

    def start(self) -> None:
        for listener in self.listeners:
            listener.setblocking(False)
        self._watch()

    def close(self) -> None:
        """Stop accepting (the other workers keep the shared sockets)."""
        self.closed = True
        self._unwatch()
        if self._resume is not None:
            self._resume.cancel()
        if self.shares is not None:
            self.shares.stop_accepting()  # the worker leaves once its connections are closed

    def count_changed(self) -> None:
        if self.shares is not None:
            self.shares.set_mine(self.held())

    def _watch(self) -> None:
        self._resume = None
        if self.closed or self.watching:
            return
        for listener in self.listeners:
            self.loop.add_reader(listener.fileno(), self._accept_one, listener)
        self.watching = True

    def _unwatch(self) -> None:
        if self.watching:
            for listener in self.listeners:
                self.loop.remove_reader(listener.fileno())
            self.watching = False

    def _pause(self, seconds: float) -> None:
        self._unwatch()
        if self._resume is None:
            self._resume = self.loop.call_later(seconds, self._watch)

    def _accept_one(self, listener: socket.socket) -> None:
        try:
            sock, _ = listener.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return  # another worker took it, or the client gave up already
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                LOG.warning("Cannot accept connections: %s; pausing", exc)
                self._pause(FD_EXHAUSTED_PAUSE_S)
                return
            raise
        sock.setblocking(False)
        self.on_socket(sock)
        self.count_changed()
        if self.shares is not None and self.shares.over_share(self.held(), SLACK_FRACTION,
                                                               SLACK_FROM_SHARE):
            self._pause(PAUSE_S)
