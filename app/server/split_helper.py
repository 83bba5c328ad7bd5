"""The split helper process of a worker (``app.tsdb.read.split`` decides when a query is split and
joins the parts): started on first use or at boot, one query at a time, answering over a pipe
the buckets of the hours it read (``app.tsdb.read.split.read_half``), through memory both processes
map when they fit. When it fails, is stopped, or answers with an error (a limit, the
deadline), the worker reads that half itself; a helper that died is started again at most
every ``RESTART_AFTER_S``. Run as ``python -m app.server.split_helper`` (by :class:`Helper`).
"""

from __future__ import annotations

import logging
import mmap
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import IO, Any

import numpy as np

from app.config import load_config
from app.engine.flat import FlatSeries, constant
from app.engine.staged import StagedPart
from app.query.limits import NO_DEADLINE, Deadline
from app.server.cpu_class import as_batch
from app.server.malloc import keep_freed
from app.server.shares import WorkerShares
from app.tsdb import TSDB
from app.tsdb.hour_cache import cache_for
from app.tsdb.read import split, split_choice

log = logging.getLogger(__name__)

# A helper that died (or never started) is started again at most this often.
RESTART_AFTER_S = 10.0
# How long past the query's deadline the worker waits for the helper before stopping it.
GRACE_S = 5.0
# Frames on the helper's pipes: an 8-byte length, then a pickle.
_LENGTH = struct.Struct("<Q")
# The buckets come back through memory both processes map (no copy through the pipe): at
# most this much, touched only as far as the largest answer (a bigger one takes the pipe).
SHARED_BYTES = 256 << 20
# Another worker that ended a query this recently still counts as querying: a client's
# next query (a dashboard's next panel) follows within milliseconds.
OTHERS_RECENT_MS = 200
# The request that empties the helper's hour cache (a benchmark's cold runs).
FORGET = ("forget",)


def _packed(part: StagedPart, stats: tuple[int, int, int], shared: mmap.mmap | None
            ) -> tuple[Any, ...]:
    """The helper's answer: its part, the buckets written into the shared memory when they
    fit (then only their count is sent), and its read counts."""
    buckets = part.buckets
    total = buckets.ts_ms.size
    if shared is not None and total * 16 <= len(shared):
        ts_ms, values = _shared_arrays(shared, total)
        ts_ms[:], values[:] = buckets.ts_ms, buckets.values
        return part.names, buckets.offsets, part.raw_points, (total, None), stats
    return part.names, buckets.offsets, part.raw_points, (buckets.ts_ms, buckets.values), stats


def _shared_arrays(shared: mmap.mmap, total: int) -> tuple[np.ndarray, np.ndarray]:
    """``total`` timestamps, then as many values, at the start of the shared memory."""
    return (np.frombuffer(shared, dtype=np.int64, count=total),
            np.frombuffer(shared, dtype=np.float64, count=total, offset=total * 8))


def _unpacked(answer: tuple[Any, ...], shared: mmap.mmap | None
              ) -> tuple[StagedPart, tuple[int, int, int]]:
    """The helper's part (its buckets may be views of the shared memory) and read counts."""
    names, offsets, raw_points, (ts_ms, values), stats = answer
    if values is None:  # in the shared memory: read before the helper is asked again
        assert shared is not None
        ts_ms, values = _shared_arrays(shared, ts_ms)
    size = len(ts_ms)
    buckets = FlatSeries(ts_ms, values, constant(0, np.int64, size),
                         constant(True, np.bool_, size), offsets)
    return StagedPart(names, buckets, raw_points), stats


class Helper:
    """The helper process of one worker's store, started on first use; one query at a time."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._config = config
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._ready = False
        self._started_at = -RESTART_AFTER_S
        self._shared: mmap.mmap | None = None
        self._owner = 0  # the pid that started the process
        self.parts_read = 0  # answers the worker used (a measure for tests and logs)
        self._finalizer: weakref.finalize[Any, Any] | None = None

    def claim(self) -> bool:
        """Take the helper for one query when it is up and free and no other worker of the
        server is querying (see :func:`yield_to`); never waits."""
        if _workers is not None and _workers.others_querying(OTHERS_RECENT_MS):
            return False
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._up():
                return True
        except Exception as exc:  # whatever it is, the worker reads alone
            self._failed(exc)
        self._lock.release()
        return False

    def release(self) -> None:
        self._lock.release()

    def prepare(self) -> None:
        """Start the process now (a server worker at boot), so that the first large query
        finds it up."""
        with self._lock:
            if not self._own():
                try:
                    self._start()
                except Exception as exc:  # the worker serves without it (started again later)
                    self._failed(exc)

    def ask(self, request: tuple[Any, ...]) -> bool:
        """Send one request (the helper is claimed); False when the helper is gone."""
        assert self._process is not None and self._process.stdin is not None
        try:
            _send(self._process.stdin, request)
            return True
        except Exception as exc:  # whatever it is, the worker reads alone
            self._failed(exc)
            return False

    def answer(self, deadline: Deadline) -> tuple[StagedPart, tuple[int, int, int]] | None:
        """The series and read counts (rows, stored bytes, points) answering the request
        sent; None when the helper failed or refused (why is logged), so that the worker
        reads those hours itself. The part may be a view of the shared memory."""
        reply = self._reply(deadline)
        if reply is None:
            return None
        status, body = reply
        if status != "ok":
            log.info("split query: the helper refused its part (%s); reading it here", body)
            return None
        self.parts_read += 1
        return _unpacked(body, self._shared)

    def _reply(self, deadline: Deadline) -> tuple[str, Any] | None:
        """The helper's reply to the request sent, or None (then it is stopped) when it
        fails or does not reply by ``deadline`` and ``GRACE_S`` more."""
        process = self._process
        assert process is not None and process.stdout is not None
        wait_s = None
        if deadline.timeout_ms:
            wait_s = max(0.0, deadline.timeout_ms / 1000 - deadline.elapsed_ms() / 1000)
            wait_s += GRACE_S
        try:
            if not _readable(process.stdout, wait_s):
                raise TimeoutError("no answer from the helper by the query's deadline")
            status, body = _receive(process.stdout)
            return status, body
        except Exception as exc:  # whatever it is, the worker reads alone
            self._failed(exc)
            return None

    def stop(self) -> None:
        if self._finalizer is not None:
            self._finalizer()

    def clear_cache(self) -> bool:
        """Empty the helper's hour cache, as ``HourCache.clear`` does this process's (its
        UID caches stay); False when the helper is not up."""
        if not self.claim():
            return False
        try:
            return self.ask(FORGET) and self._reply(NO_DEADLINE) == ("ok", None)
        finally:
            self.release()

    def wait_up(self, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until the helper started by :meth:`prepare` has
        booted and takes queries, whatever the other workers do (a worker at boot); False
        when it has not (failed, or slow)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self._lock.acquire(blocking=False):
                return True  # a query holds it: up
            try:
                if not self._own():
                    return False  # failed to start or died: started again on a later claim
                if self._up():
                    return True
            except Exception as exc:  # whatever it is, the worker reads alone
                self._failed(exc)
                return False
            finally:
                self._lock.release()
            time.sleep(0.02)
        return False

    def wait_ready(self, timeout_s: float) -> bool:
        """Wait until the helper takes queries (a benchmark before it times, a test)."""
        deadline = time.monotonic() + timeout_s
        while not self.claim():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        self.release()
        return True

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._own() and self._process is not None else None

    def _own(self) -> bool:
        """Whether this process started the helper (one inherited through a fork belongs to
        the parent) and it still runs."""
        process = self._process
        return process is not None and self._owner == os.getpid() and process.poll() is None

    def _up(self) -> bool:
        process = self._process
        if not self._own():
            if time.monotonic() - self._started_at >= RESTART_AFTER_S:
                self._start()
            return False
        if not self._ready:
            assert process is not None and process.stdout is not None
            if not _readable(process.stdout, 0):
                return False
            self._ready = _receive(process.stdout) == ("ready", None)
        return self._ready

    def _start(self) -> None:
        if self._owner == os.getpid():
            self.stop()
        self._started_at = time.monotonic()
        root = str(Path(__file__).resolve().parents[2])  # where the app package lies
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [root, os.environ.get("PYTHONPATH", "")]))}
        shared_fd = os.memfd_create("pytsd-split") if hasattr(os, "memfd_create") else None
        try:
            if shared_fd is not None:
                os.ftruncate(shared_fd, SHARED_BYTES)  # sparse: pages come when written
                self._shared = mmap.mmap(shared_fd, SHARED_BYTES)
            # A process group of its own: a terminal's Ctrl-C (sent to the server's group)
            # never reaches it, not even while it imports; it ends when its input closes.
            process = subprocess.Popen(
                [sys.executable, "-m", "app.server.split_helper"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, env=env, bufsize=0, process_group=0,
                pass_fds=() if shared_fd is None else (shared_fd,))
        finally:
            if shared_fd is not None:
                os.close(shared_fd)  # the map and the child hold their own
        assert process.stdin is not None
        self._process, self._ready, self._owner = process, False, os.getpid()
        self._finalizer = weakref.finalize(self, _stop, process, self._owner)
        _send(process.stdin, (self._config, shared_fd if self._shared is not None else None))
        log.info("split query: helper process %d started", process.pid)

    def _failed(self, exc: BaseException) -> None:
        log.warning("split query: the helper failed (%s); stopping it", exc)
        self.stop()
        self._process, self._ready = None, False


def _stop(process: subprocess.Popen[bytes], owner: int) -> None:
    """End a helper: its input closed, and killed, which is safe as it only reads. No wait
    for it to leave by itself: a worker stopping on Ctrl-C would wait seconds for a helper
    still starting, and gunicorn's second quit signal would land in that wait as a
    SystemExit traceback. (Not from a forked process: the helper is its parent's.)"""
    if owner != os.getpid():
        return
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            pipe.close()
    if process.poll() is None:
        process.kill()
    process.wait()


_HELPERS: weakref.WeakKeyDictionary[TSDB, Helper] = weakref.WeakKeyDictionary()
_HELPERS_LOCK = threading.Lock()
_workers: WorkerShares | None = None


def yield_to(workers: WorkerShares | None) -> None:
    """Split no read while another worker of the server runs a query (``workers``' counts).
    The split takes a second core; with the other worker querying there is none idle, and
    its third busy process makes every light request wait for a CPU (issue 25: with 2
    expensive loops per worker, ``/api/version``'s p99 passed 50 ms only in rounds where
    reads were split)."""
    global _workers
    _workers = workers


def prepare_helper(tsdb: TSDB) -> Helper | None:
    """Start ``tsdb``'s helper ahead of the queries, when queries may be split here; the
    helper started (None: none)."""
    if tsdb.config["tsd.query.split.enable"] and len(os.sched_getaffinity(0)) > 1:
        helper = helper_for(tsdb)
        helper.prepare()
        return helper
    return None


def helper_for(tsdb: TSDB) -> Helper:
    """The process's helper for ``tsdb``'s store (not started until a query claims it)."""
    with _HELPERS_LOCK:
        helper = _HELPERS.get(tsdb)
        if helper is None:
            helper = _HELPERS[tsdb] = Helper(dict(tsdb.config))
        return helper


def _readable(pipe: IO[bytes], wait_s: float | None) -> bool:
    """Whether the helper answered within ``wait_s`` (None: however long it takes). A poll,
    not a select: a busy server's descriptors go past select's 1,024."""
    poller = select.poll()
    poller.register(pipe, select.POLLIN)
    return bool(poller.poll(None if wait_s is None else int(wait_s * 1000)))


def _send(pipe: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    pipe.write(_LENGTH.pack(len(data)))
    view = memoryview(data)
    while view:  # an unbuffered pipe may take part of it
        written = pipe.write(view)
        view = view[written or 0:]


def _receive(pipe: IO[bytes]) -> Any:
    (size,) = _LENGTH.unpack(_read_exactly(pipe, _LENGTH.size))
    return pickle.loads(_read_exactly(pipe, size))


def _read_exactly(pipe: IO[bytes], size: int) -> bytearray:
    data = bytearray(size)
    view, at = memoryview(data), 0
    while at < size:
        got = pipe.readinto(view[at:])  # type: ignore[attr-defined]
        if not got:
            raise EOFError("the helper's pipe closed")
        at += got
    return data


def serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    """The helper's loop: the settings, then one answer per request until its input ends."""
    settings, shared_fd = _receive(requests)
    config = dict(settings)
    shared = None if shared_fd is None else mmap.mmap(shared_fd, SHARED_BYTES)
    # The helper reads; it never splits again nor compacts.
    config.update({"tsd.query.split.enable": False,
                   "tsd.storage.compaction.background": False})
    tsdb = TSDB(load_config(config, environ={}))
    tsdb.open_early()  # before it says ready: a first query's half does not open it
    _send(answers, ("ready", None))
    while True:
        try:
            request = _receive(requests)
        except EOFError:
            return
        if request == FORGET:
            cache = cache_for(tsdb)
            if cache is not None:
                cache.clear()
            _send(answers, ("ok", None))
            continue
        try:
            part, stats = split.read_half(tsdb, request)
            answer: tuple[str, Any] = ("ok", _packed(part, stats, shared))
        except Exception as exc:  # the worker reads these hours itself, and meets it again
            answer = ("error", f"{type(exc).__name__}: {exc}")
        _send(answers, answer)


# Reads in this process split with its helpers.
split_choice.use_helpers(helper_for)


if __name__ == "__main__":
    # A server's signals reach its whole process group: the worker decides when the helper
    # ends (its input closes), so a query in flight during a graceful stop still gets its part.
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: "
                                                      "split helper: %(message)s")
    as_batch()  # it only ever reads queries (app/server/cpu_class.py)
    keep_freed()  # a part's arrays reuse the last one's pages (app/server/malloc.py)
    # Answers on a private copy of the output; a stray print goes to the log instead.
    answers = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    try:
        serve(os.fdopen(0, "rb", buffering=0), answers)
    except BrokenPipeError:
        pass  # the worker left (a stop) while this answered: nothing to tell anyone
