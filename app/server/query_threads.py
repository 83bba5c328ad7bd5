"""The worker's query threads, which an expensive query may leave at a lower OS priority.

An expensive query runs its thread at a higher nice value (``app.tsdb.admission``); without
``CAP_SYS_NICE`` the thread cannot go back, so after that job it ends and a keeper thread
starts another in its place. The keeper, not the ending thread, starts it: Linux gives a new
thread the nice value of the thread that starts it, and the keeper has the worker's own.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from app.tsdb.admission import thread_must_retire

Job = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class QueryThreads(Executor):
    """``size`` threads (started at once) taking jobs in order, as a ThreadPoolExecutor."""

    def __init__(self, size: int, name: str) -> None:
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._starts: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._name = name
        self._numbers = itertools.count()
        self._closed = False
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()
        for _ in range(size):
            self._starts.put(True)
        self._keeper = threading.Thread(target=self._keep, name=f"{name}-keeper", daemon=True)
        self._keeper.start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if self._closed:
            raise RuntimeError("cannot schedule new futures after shutdown")
        future: Future[Any] = Future()
        self._jobs.put((future, fn, args, kwargs))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._closed = True
        if cancel_futures:
            while True:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is not None:
                    job[0].cancel()
        self._starts.put(False)
        self._jobs.put(None)  # each thread puts it back for the next
        if wait:
            self._keeper.join()
            with self._lock:
                threads = list(self._threads)
            for thread in threads:
                thread.join()

    def _keep(self) -> None:
        while self._starts.get() and not self._closed:
            thread = threading.Thread(target=self._work, daemon=True,
                                      name=f"{self._name}_{next(self._numbers)}")
            with self._lock:
                self._threads.add(thread)
            thread.start()

    def _work(self) -> None:
        try:
            while True:
                job = self._jobs.get()
                if job is None:
                    self._jobs.put(None)
                    return
                future, fn, args, kwargs = job
                del job
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(fn(*args, **kwargs))
                    except BaseException as exc:  # the caller's to see, as in the stdlib pool
                        future.set_exception(exc)
                del future, fn, args, kwargs
                if thread_must_retire():
                    self._starts.put(True)
                    return
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())
