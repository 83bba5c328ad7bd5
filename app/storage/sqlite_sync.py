"""One disk sync for many prompt commits: the embedded store's group sync of its WAL.

A prompt write (``SqliteStore.prompt``) commits without SQLite's own sync, so that the
server's loop, which stores a small put itself, never waits for the disk. The put is
acknowledged once :meth:`WalSync.durable`'s future is done: a ``fdatasync`` of the WAL file
that began after its commit. That is what ``synchronous=FULL`` does at each commit (sync the
WAL, in WAL mode), done once for every commit that came meanwhile: the commits of the
process go on while the disk syncs, and one sync acknowledges them all. SQLite still syncs
the WAL before a checkpoint copies it into the database file, and the file after, as it
does for every setting.

One thread per store and process syncs, only while prompt commits wait for it.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future


class WalSync:
    """The syncs of one store's WAL file for this process's prompt commits (module doc)."""

    def __init__(self, wal_path: str) -> None:
        self.wal_path = wal_path
        self._lock = threading.Condition()
        self._committed = 0  # prompt commits of this process so far
        self._synced = 0  # of them, on disk
        self._waiting: list[tuple[int, Future[None]]] = []
        self._thread: threading.Thread | None = None
        self._pid = -1

    def committed(self) -> None:
        """Count a prompt commit that just returned: :meth:`durable` covers it from now."""
        with self._lock:
            self._committed += 1

    def durable(self) -> Future[None]:
        """A future done when every prompt commit counted so far is on disk (an error: the
        sync failed, and with it every commit it was to make durable)."""
        done: Future[None] = Future()
        with self._lock:
            if self._synced >= self._committed:
                done.set_result(None)
                return done
            self._waiting.append((self._committed, done))
            self._start()
            self._lock.notify()
        return done

    def _start(self) -> None:
        """The sync thread, once per process (a fork, gunicorn's, has none)."""
        if self._pid != os.getpid() or self._thread is None or not self._thread.is_alive():
            self._pid = os.getpid()
            self._thread = threading.Thread(target=self._run, name="tsd-wal-sync",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._waiting:
                    self._lock.wait()
                upto = self._committed  # every commit counted before this sync starts
            error = self._sync()
            with self._lock:
                if error is None:
                    self._synced = max(self._synced, upto)
                done = [f for seq, f in self._waiting if error is not None or seq <= upto]
                self._waiting = [(seq, f) for seq, f in self._waiting
                                 if error is None and seq > upto]
            for future in done:
                if error is None:
                    future.set_result(None)
                else:
                    future.set_exception(error)

    def _sync(self) -> OSError | None:
        try:
            fd = os.open(self.wal_path, os.O_RDONLY)
        except FileNotFoundError:
            return None  # no WAL: every commit was checkpointed into the synced file
        except OSError as exc:
            return exc
        try:
            os.fdatasync(fd)
            return None
        except OSError as exc:
            return exc
        finally:
            os.close(fd)
