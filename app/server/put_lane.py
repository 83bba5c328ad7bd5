"""``POST /api/put`` answered without the WSGI app when storing its points is all it asks.

The worker hands a complete request here when :meth:`PutLane.takes` it: the plain target
(no query string such as ``?details``, ``?summary``, ``?sync``; no other spelling of the
path) and headers Flask's hooks would pass untouched (app/api/put_direct.py decides those,
and which settings allow it at all). The access log, body limits and the request queue are
the server's, as for every request.

**Groups.** Puts that arrive together (read in one turn of the loop), or while a group is
being written, go together as the next group: one writer call for them all (storing two
50-point bodies at once costs ~2/3 of storing them one by one, four ~1/2). Each put of a
group is answered Flask's 204 when all its points were stored, else by the app, told what
was stored.

**On the loop.** On the embedded store a group is stored by the loop itself, as prompt
writes (``PromptWrites``: no wait for another writer, no disk sync at commit), and answered
when the store's next WAL sync has it on disk (a syncer process syncs for every commit the
worker made meanwhile, and the loop reads its answers: app/storage/sqlite_sync.py): no hop
to a thread and back, and no sync while the write lock is held. The loop waits only for
another worker's put commit (short); when any other writer is under way (a line-protocol
block, a merge, compaction), the group goes to a thread, which waits its turn. On HBase
every group goes to a thread: a write there is a network round trip.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from app.api.put import STORED_PUT, StoredPut
from app.api.put_direct import NO_CONTENT_HEADERS, NO_CONTENT_REASON, PUT_PATH, DirectPuts
from app.server.simple_http import encode_reply
from app.server.wsgi_bridge import Reply, Request, WsgiApp, build_environ, call_app

PUT_TARGET = PUT_PATH.encode("ascii")
# Groups written at once by one worker: two, so that one group's parsing and encoding runs
# while the other waits for its disk sync (the store's own group commit joins their syncs).
GROUPS_IN_FLIGHT = 2

# Flask's 204 (app/api/put_direct.py), and its bytes to a plain request, made once.
NO_CONTENT = Reply(204, NO_CONTENT_REASON, NO_CONTENT_HEADERS, b"",
                   encode_reply(204, NO_CONTENT_REASON, NO_CONTENT_HEADERS, b""))

# Runs a function with its arguments in the request pool.
InThread = Callable[..., "asyncio.Future[Any]"]


@dataclass
class _Put:
    request: Request
    peer: tuple[str, int]
    server: tuple[str, int]
    answer: asyncio.Future[Reply] = field(default_factory=lambda: (
        asyncio.get_running_loop().create_future()))


class PutLane:
    """The worker's direct puts (module doc)."""

    def __init__(self, app: WsgiApp, direct: DirectPuts, in_thread: InThread) -> None:
        self.app = app
        self.direct = direct
        self.in_thread = in_thread
        self._waiting: list[_Put] = []
        self._writing = 0  # groups in a thread now
        self._here_soon = False  # _write_here is scheduled
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop reading the syncs

    @classmethod
    def of(cls, app: Any, in_thread: InThread) -> PutLane | None:
        """None when every put must go through the app (a setting: app/api/put_direct.py)."""
        direct = DirectPuts.of(app)
        return None if direct is None else cls(app, direct, in_thread)

    def on_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """From now on ``loop`` (the worker's, which runs) reads the store's syncs: the
        syncer starts now, not at the first put (module doc)."""
        if self.direct.prompt_store is not None and loop is not self._loop:
            self._loop = loop
            self.direct.read_syncs_on(loop)

    def takes(self, request: Request) -> bool:
        return (request.target == PUT_TARGET and request.method == "POST"
                and self.direct.takes(request.headers))

    async def answer(self, request: Request, peer: tuple[str, int],
                     server: tuple[str, int]) -> Reply:
        """Store the request's points with its group and answer it."""
        put = _Put(request, peer, server)
        self._waiting.append(put)
        self._schedule()
        return await put.answer

    def _schedule(self) -> None:
        """Write the waiting puts: on the loop once this turn's requests are read, or in a
        thread (module doc)."""
        if self.direct.prompt_store is not None and not self._writing:
            if not self._here_soon:
                self._here_soon = True
                asyncio.get_running_loop().call_soon(self._write_here)
        elif self._writing < GROUPS_IN_FLIGHT:
            self._write_next()

    def _write_here(self) -> None:
        """Store the waiting puts on the loop; answer them once durable."""
        self._here_soon = False
        if self._writing or not self._waiting:  # a thread took them, or follows with them
            return
        group, self._waiting = self._waiting, []
        started = time.perf_counter()
        self.on_loop(asyncio.get_running_loop())  # a no-op but in tests: a loop each
        try:
            stored = self.direct.store_promptly([put.request.body for put in group])
        except Exception as exc:  # as a thread's failure: each put learns it, none hangs
            self._answered(group, None, exc)
            return
        if stored is None:  # another writer under way: a thread waits for it
            self._waiting = group + self._waiting
            self._write_next()
            return
        # Done on the loop, which reads the syncs (on_loop): no hop through call_soon.
        self.direct.durable().add_done_callback(partial(self._durable, group, stored, started))

    def _durable(self, group: list[_Put], stored: list[StoredPut | None], started: float,
                 synced: Future[None]) -> None:
        if synced.cancelled():  # the loop is closing: not known durable, not answered
            self._answered(group, None, None)
            return
        error = synced.exception()
        if error is not None:  # the sync failed: nothing of the group is known to be stored
            stored = self.direct.unsynced(stored, error)
        if all(outcome is not None and outcome.complete for outcome in stored):
            try:
                replies = self._replies(group, stored, started)
            except Exception as exc:  # as a thread's failure: each put learns it
                self._answered(group, None, exc)
                return
            self._answered(group, replies, None)
            return
        self._writing += 1  # the app answers in a thread: later puts wait their turn
        replied = self.in_thread(self._replies, group, stored, started)
        replied.add_done_callback(partial(self._written, group))

    def _write_next(self) -> None:
        group, self._waiting = self._waiting, []
        self._writing += 1
        written = self.in_thread(self._answer_all, group)
        written.add_done_callback(partial(self._written, group))

    def _written(self, group: list[_Put], done: asyncio.Future[list[Reply]]) -> None:
        self._writing -= 1
        if done.cancelled():
            self._answered(group, None, None)
        else:
            error = done.exception()
            self._answered(group, None if error is not None else done.result(), error)
        if self._waiting:
            self._schedule()

    @staticmethod
    def _answered(group: list[_Put], replies: list[Reply] | None,
                  error: BaseException | None) -> None:
        """Each put's answer: its reply, else ``error``, else cancelled."""
        for number, put in enumerate(group):
            if put.answer.done():
                continue  # its connection was closed meanwhile (shutdown)
            if replies is not None:
                put.answer.set_result(replies[number])
            elif error is not None:
                put.answer.set_exception(error)
            else:
                put.answer.cancel()

    def _answer_all(self, group: list[_Put]) -> list[Reply]:
        """Store the group's points and answer each put (in a thread: the store commits)."""
        started = time.perf_counter()
        return self._replies(group, self.direct.store([put.request.body for put in group]),
                             started)

    def _replies(self, group: list[_Put], stored: list[StoredPut | None],
                 started: float) -> list[Reply]:
        """Each put's answer: Flask's 204 when all its points were stored, else the app's
        (which may store it itself: in a thread then)."""
        elapsed_ms = (time.perf_counter() - started) * 1000
        replies = []
        for put, outcome in zip(group, stored):
            if outcome is not None and outcome.complete:
                self.direct.answered(elapsed_ms)
                replies.append(NO_CONTENT)
                continue
            # No CLIENT_GONE: only queries look whether their client is still there.
            environ = build_environ(put.request, put.peer, put.server)
            if outcome is not None:
                environ[STORED_PUT] = outcome
            replies.append(call_app(self.app, environ))
        return replies
