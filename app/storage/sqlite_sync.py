"""One disk sync for many prompt commits: the embedded store's group sync of its WAL.

A prompt write (``SqliteStore.prompt``) commits without SQLite's own sync, so that the
server's loop, which stores a small put itself, never waits for the disk. The put is
acknowledged once :meth:`WalSync.durable`'s future is done: a ``fdatasync`` of the WAL file
that began after its commit. That is what ``synchronous=FULL`` does at each commit (sync the
WAL, in WAL mode), done once for every commit that came meanwhile: the commits of the
process go on while the disk syncs, and one sync acknowledges them all. SQLite still syncs
the WAL before a checkpoint copies it into the database file, and the file after, as it
does for every setting.

**The syncer is a process** (app/storage/sqlite_syncer.py), one per serving process, asked
over a pipe, one sync at a time: a sync covers the file's pages whoever wrote them. Its
answers are read by the server's event loop (:meth:`WalSync.read_on`), so that no thread of
the worker wakes for a sync: a syncing thread took the GIL from the loop two or three times
a sync (with one worker, a put cost a fifth more CPU: docs/performance.md). Where no loop
reads them (a test, a command), a thread does, blocked in ``read`` meanwhile. A syncer that
dies is started again and asked again; one that cannot be started fails the commits waiting.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future

from app.storage import sqlite_syncer
from app.storage.base import FdReaders
from app.storage.sqlite_syncer import ASK, REPLY

# Futures to settle once the lock is let go: each with its error, or None (done).
Settled = list[tuple[Future[None], BaseException | None]]


def syncer_command(wal_path: str) -> list[str]:
    """The syncer's command line. -I -S: the standard library alone, no site, so that it
    starts in milliseconds. (Tests give one that holds or fails its syncs.)"""
    return [sys.executable, "-I", "-S", sqlite_syncer.__file__, wal_path]


class _Syncer:
    """One syncer process, the pipe ends this process keeps, and who reads its answers:
    an event loop (``readers``), else a thread of its own."""

    def __init__(self, wal_path: str, readers: FdReaders | None,
                 answered: Callable[[_Syncer], bool]) -> None:
        self.readers = readers
        # A process group of its own: a terminal's Ctrl-C (sent to the server's group) never
        # reaches it, not even while it starts; it syncs what the worker's last puts wrote
        # and exits when its input closes (the worker is gone).
        self.process = subprocess.Popen(syncer_command(wal_path), stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, bufsize=0, close_fds=True,
                                        process_group=0)
        assert self.process.stdin is not None and self.process.stdout is not None
        self.requests = self.process.stdin.fileno()
        self.replies = self.process.stdout.fileno()
        if readers is not None:
            readers.add_reader(self.replies, lambda: answered(self))
        else:
            threading.Thread(target=self._read_all, args=(answered,), name="tsd-wal-sync",
                             daemon=True).start()

    def ask(self) -> bool:
        """Ask for a sync; False if the syncer is gone."""
        try:
            os.write(self.requests, ASK)
            return True
        except OSError:  # BrokenPipeError above all: it exited
            return False

    def reply(self) -> int | None:
        """The answer to the sync asked (blocks until it comes): 0, an errno, or None when
        the syncer is gone."""
        try:
            data = os.read(self.replies, REPLY.size)
        except OSError:
            return None
        return REPLY.unpack(data)[0] if len(data) == REPLY.size else None

    def end(self) -> None:
        """End it (it exits on its closed input) and stop reading it. A thread reading it
        closes its answers' pipe itself once it finds it ended: it may be blocked reading."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.readers is not None:
            if not self.readers.is_closed():
                self.readers.remove_reader(self.replies)
            self.process.stdout.close()

    def _read_all(self, answered: Callable[[_Syncer], bool]) -> None:
        """A thread's loop over the answers, where no event loop reads them."""
        while answered(self):
            pass
        assert self.process.stdout is not None
        self.process.stdout.close()


class WalSync:
    """The syncs of one store's WAL file for this process's prompt commits (module doc)."""

    def __init__(self, wal_path: str) -> None:
        self.wal_path = wal_path
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._committed = 0  # prompt commits of this process so far
        self._synced = 0  # of them, on disk
        self._asked: int | None = None  # commits counted when the sync under way was asked
        self._waiting: list[tuple[int, Future[None]]] = []
        self._syncer: _Syncer | None = None
        self._readers: FdReaders | None = None

    def read_on(self, readers: FdReaders) -> None:
        """From now on the syncer's answers are read by ``readers`` (the server's event
        loop), and :meth:`durable`'s futures are done in its thread; :meth:`durable` is then
        called in that thread only. Starts the syncer now, not at the first put."""
        with self._lock:
            self._this_process()
            self._readers = readers
            if self._syncer is not None and self._syncer.readers is not readers:
                self._gone(self._syncer)  # read by a thread, or a loop that has ended
            # One sync under way at a time: a second ask would let the first answer cover
            # commits made after that sync began.
            settled = self._ask() if self._waiting and self._asked is None else []
            if self._syncer is None:
                try:
                    self._syncer = self._started()
                except OSError:
                    pass  # started again by the first durable(), which fails if it fails
        _settle(settled)

    def committed(self) -> None:
        """Count a prompt commit that just returned: :meth:`durable` covers it from now."""
        with self._lock:
            self._this_process()
            self._committed += 1

    def durable(self) -> Future[None]:
        """A future done when every prompt commit counted so far is on disk (an error: the
        sync failed, and with it every commit it was to make durable)."""
        done: Future[None] = Future()
        with self._lock:
            self._this_process()
            if self._synced >= self._committed:
                done.set_result(None)
                return done
            self._waiting.append((self._committed, done))
            settled = self._ask() if self._asked is None else []
        _settle(settled)
        return done

    def close(self) -> None:
        """End this process's syncer (the store closes); commits waiting fail. In the
        event loop's thread, if one reads the answers."""
        with self._lock:
            if self._pid != os.getpid():
                return
            syncer, self._syncer, self._asked = self._syncer, None, None
            settled = self._fail_waiting(OSError("the store was closed"))
        if syncer is not None:
            syncer.end()
        _settle(settled)

    def _this_process(self) -> None:
        """Forget what a parent process had (a fork, gunicorn's): its syncer, its commits."""
        if self._pid != os.getpid():
            self._reset()

    def _started(self) -> _Syncer:
        """The syncer, started if there is none (under the lock)."""
        if self._syncer is None:
            self._syncer = _Syncer(self.wal_path, self._readers, self._answered)
        return self._syncer

    def _ask(self) -> Settled:
        """Ask for a sync of every commit counted so far (under the lock); the futures to
        fail when no syncer can be had."""
        for _attempt in range(2):  # a syncer that is gone is started again, once
            try:
                syncer = self._started()
            except OSError as exc:
                return self._fail_waiting(exc)
            if syncer.ask():
                self._asked = self._committed
                return []
            self._gone(syncer)
        return self._fail_waiting(OSError("the WAL syncer exits as it starts"))

    def _fail_waiting(self, error: BaseException) -> Settled:
        failed, self._waiting = self._waiting, []
        return [(future, error) for _, future in failed]

    def _answered(self, syncer: _Syncer) -> bool:
        """Take the syncer's answer: settle the commits it covers, ask for the rest. False
        when the syncer is gone (those still waiting are asked of a new one)."""
        code = syncer.reply()
        with self._lock:
            if syncer is not self._syncer:  # ended meanwhile (a thread reading it learns it)
                return False
            settled: Settled = []
            if code is None:
                self._gone(syncer)
            elif self._asked is not None:
                settled = self._covered(self._asked, code)
            self._asked = None
            if self._waiting:
                settled += self._ask()
        _settle(settled)
        return code is not None

    def _covered(self, asked: int, code: int) -> Settled:
        """The futures a sync of the first ``asked`` commits settles: done, or every one
        waiting failed with its error (under the lock)."""
        if code:
            return self._fail_waiting(OSError(code, os.strerror(code)))
        self._synced = max(self._synced, asked)
        covered = [future for seq, future in self._waiting if seq <= asked]
        self._waiting = [(seq, future) for seq, future in self._waiting if seq > asked]
        return [(future, None) for future in covered]

    def _gone(self, syncer: _Syncer) -> None:
        """A syncer that exited, or is to be replaced: ended, forgotten (under the lock)."""
        self._syncer = None
        self._asked = None
        syncer.end()


def _settle(futures: Settled) -> None:
    """Done outside the lock: a future's callbacks may ask for the next sync."""
    for future, error in futures:
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
