"""``TsdWorker``: gunicorn's process model around one asyncio event loop per worker.

gunicorn's arbiter still pre-forks, restarts and reloads workers; inside a worker, the loop
accepts connections, tells HTTP from OpenTSDB's line protocol by the first byte (an upper-case
ASCII letter is an HTTP method, as in OpenTSDB's ``PipelineFactory``), reads each request in
full and only then runs the app in a bounded thread pool, so slow or idle clients cost no
thread. Queries get their own small pool: numpy work holds the GIL in bursts, and capping
how many run at once keeps light requests (``/api/version``) answering. The loop, not the
threads, tells the arbiter the worker is alive, so a long query does not get it killed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from gunicorn.workers.base import Worker

from app.query.budget import CLIENT_GONE
from app.server import split_helper
from app.server.accept import Acceptor
from app.server.access_log import AccessLog
from app.server.cpu_class import lane_class
from app.server.errors import HttpError, error_response
from app.server.http import BodyBudget, ClientWatch, serve_http
from app.server.malloc import keep_freed, one_arena
from app.server.settings import READ_BLOCK_BYTES, ServerLimits, is_heavy
from app.server.shares import WorkerShares
from app.server.split_helper import Helper, prepare_helper
from app.server.streams import drain, read_block
from app.server.telnet import serve_lines
from app.server.wsgi_bridge import Reply, Request, build_environ, call_app
from app.tsdb.admission import AdmissionSettings, run_lanes_in

if TYPE_CHECKING:
    from app.server.put_lane import PutLane

HEARTBEAT_S = 1.0
GIL_SWITCH_INTERVAL_S = 0.001
READY_LOG = "Accepting connections in worker"
# How long a worker waits for its split helper to boot before it reports ready without it.
HELPER_BOOT_S = 10.0


class Conn:
    """One accepted connection, as the protocol handlers and the shutdown see it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.peer = _address(writer.get_extra_info("peername"))
        self.server = _address(writer.get_extra_info("sockname"))
        self.idle = False  # waiting for a client's next request or line: safe to close
        self.active = False  # has sent its first byte (counts against the connection limit)
        self.crowded = False  # over the server's connections from its address
        self.task: asyncio.Task[Any] | None = asyncio.current_task()


def _address(value: Any) -> tuple[str, int]:
    if isinstance(value, tuple) and len(value) >= 2:
        return str(value[0]), int(value[1])
    return str(value or ""), 0  # a Unix socket


class TsdWorker(Worker):
    """The worker class: ``worker_class = "app.server.worker.TsdWorker"``."""

    closing = False
    puts: PutLane | None = None  # set in run(): the app's modules load in the worker
    access_log: AccessLog | None = None  # made at the first line (gunicorn's logger)
    # Made by the arbiter (gunicorn calls ``setup`` there) so that every fork shares it.
    shares: WorkerShares | None = None

    @classmethod
    def setup(cls) -> None:
        if cls.shares is None:
            cls.shares = WorkerShares()

    def run(self) -> None:
        # Hand the GIL over every 1 ms rather than 5: a light request (/api/version, a put)
        # needs it a few times between the loop and its thread, and each time may queue
        # behind every busy line-protocol or query thread of this worker.
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
        one_arena()  # before the pools' threads first allocate (app/server/malloc.py)
        keep_freed()  # a query's arrays reuse the last one's pages
        tsdb = getattr(self.wsgi, "extensions", {}).get("tsdb")
        self.helper: Helper | None = None
        if tsdb is not None:
            # The helper boots (imports, opens the store) while this worker opens its own:
            # a first query then pays neither (docs/performance.md, "A fresh server's first
            # query").
            self.helper = prepare_helper(tsdb)  # reads half a large query (split_helper.py)
            tsdb.open_early()
        self.limits = ServerLimits.from_config(_tsd_config(self.wsgi))
        from app.server.put_lane import PutLane  # the app's modules: in the worker only

        # Plain puts stored without the app's request cycle, in groups (put_lane.py).
        self.puts = PutLane.of(self.wsgi, lambda *job: self._submit(self.pool, *job))
        self.pool = ThreadPoolExecutor(self.limits.threads, thread_name_prefix="tsd-request")
        # Queries wait for their lane (app/tsdb/admission.py) in these threads: enough of
        # them that expensive queries waiting cannot leave a cheap one without a thread.
        lanes = AdmissionSettings.from_config(_tsd_config(self.wsgi))
        self.heavy_pool = ThreadPoolExecutor(lanes.threads_needed(),
                                             thread_name_prefix="tsd-query")
        run_lanes_in(lane_class)  # expensive queries as batch work (app/server/cpu_class.py)
        # Line-protocol calls get their own threads: a burst from hundreds of collectors
        # must not queue HTTP requests (a Grafana panel, /api/version) behind it.
        self.line_pool = ThreadPoolExecutor(self.limits.threads, thread_name_prefix="tsd-lines")
        self.conns: set[Conn] = set()
        self.sockets_held = 0  # accepted, including those not yet a Conn
        self.active = 0  # connections that have sent a first byte
        self.tasks: set[asyncio.Task[None]] = set()
        self.budget = BodyBudget(self.limits.max_buffered_bytes)
        self.waiting = 0  # HTTP requests handed to the pools and not answered yet
        self.running_jobs = 0  # anything in a thread right now, line-protocol calls included
        self.jobs_lock = threading.Lock()
        asyncio.run(self._main())
        self._exit_pools()

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        self.stopping = asyncio.Event()
        self.grace_s = float(self.cfg.graceful_timeout)
        loop.add_signal_handler(signal.SIGTERM, self._stop, True)
        loop.add_signal_handler(signal.SIGQUIT, self._stop, False)
        loop.add_signal_handler(signal.SIGINT, self._stop, False)
        shares = self.shares if self.shares is not None and self.shares.join() else None
        # Connections per client address, over every worker of the server when they share
        # memory (app/server/shares.py), else this worker's alone.
        self.addresses = shares or WorkerShares.private()
        split_helper.yield_to(self.addresses)  # a read splits only while the others are idle
        if self.puts is not None:
            self.puts.on_loop(loop)
        self.acceptor = Acceptor([_listener(sock) for sock in self.sockets], shares,
                                 lambda: self.sockets_held, self._on_socket)
        self.acceptor.start()
        heartbeat = asyncio.create_task(self._heartbeat())
        ready = asyncio.create_task(self._ready())
        await self.stopping.wait()
        ready.cancel()
        self.closing = True
        self.acceptor.close()  # stop accepting; the other workers keep the shared socket
        await self._drain()
        self.addresses.leave()  # its connections are closed: the slot and its counts go
        heartbeat.cancel()
        # Back to gunicorn's handlers before the loop closes its wake-up pipe: a second
        # SIGTERM from the arbiter while the process exits must neither kill it (the default
        # action) nor write to a closed pipe. A second SIGINT or SIGQUIT (Ctrl-C reaches the
        # worker and the arbiter, which then sends SIGQUIT) finds it already quitting:
        # handle_quit's sys.exit() there would print a SystemExit traceback from whatever
        # exit code it lands in.
        for sig in (signal.SIGTERM, signal.SIGQUIT, signal.SIGINT):
            loop.remove_signal_handler(sig)
            signal.signal(sig, self.handle_exit)

    async def _ready(self) -> None:
        """Log that the worker is ready once its helper is up too (its boot would take a core
        from the first queries; at most HELPER_BOOT_S): connections are served meanwhile."""
        if self.helper is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.helper.wait_up,
                                                             HELPER_BOOT_S)
        self.log.info("%s %s", READY_LOG, self.pid)  # the benchmarks wait for every worker

    def _stop(self, graceful: bool) -> None:
        self.alive = False
        if not graceful:
            self.cfg.worker_int(self)
            self.grace_s = 0.0
        self.stopping.set()

    async def _heartbeat(self) -> None:
        while True:
            self.notify()
            if self.ppid != os.getppid():
                self.log.info("Parent changed, shutting down: %s", self)
                self.alive = False
            if not self.alive:
                self.stopping.set()
            await asyncio.sleep(HEARTBEAT_S)

    async def _drain(self) -> None:
        """Close idle connections now; let in-flight ones finish, at most the graceful timeout."""
        deadline = time.monotonic() + self.grace_s
        while self.conns and time.monotonic() < deadline:
            for conn in list(self.conns):
                if conn.idle and conn.task is not None:
                    conn.task.cancel()
            await asyncio.sleep(0.05)
        for conn in list(self.conns):
            if conn.task is not None:
                conn.task.cancel()
        await asyncio.sleep(0)

    def _exit_pools(self) -> None:
        for pool in (self.pool, self.heavy_pool, self.line_pool):
            pool.shutdown(wait=False, cancel_futures=True)
        if self.running_jobs:
            # A query still running past the graceful timeout: exiting normally would wait
            # for its thread; the arbiter would kill us anyway, so leave now.
            self.log.warning("Worker %s exits with %d requests still running",
                             self.pid, self.running_jobs)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

    def _on_socket(self, sock: socket.socket) -> None:
        self.sockets_held += 1
        task = asyncio.get_running_loop().create_task(self._connection(sock))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _connection(self, sock: socket.socket) -> None:
        """Streams over an accepted socket (what ``asyncio.start_server`` would make)."""
        loop = asyncio.get_running_loop()
        address = _peer_host(sock)
        limit = self.limits.per_ip_limit
        # Counted from accept to close, whatever ends it (the finally below).
        crowded = limit > 0 and self.addresses.hold_address(address) > limit
        try:
            reader = asyncio.StreamReader(limit=READ_BLOCK_BYTES, loop=loop)
            protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
            try:
                transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock)
            except OSError:
                sock.close()  # reset before we got to it
                return
            await self._accept(reader, asyncio.StreamWriter(transport, protocol, reader, loop),
                               crowded)
        finally:
            if limit > 0:
                self.addresses.release_address(address)
            self.sockets_held -= 1
            self.acceptor.count_changed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      crowded: bool) -> None:
        conn = Conn(reader, writer)
        conn.crowded = crowded
        self.conns.add(conn)
        try:
            await self._serve(conn)
        except asyncio.CancelledError:
            pass  # shutdown closes idle connections
        except (ConnectionError, TimeoutError):
            pass  # the client went away or would not read: nothing to tell it
        except Exception:
            self.log.exception("Connection from %s failed", conn.peer[0])
        finally:
            self.conns.discard(conn)
            if conn.active:
                self.active -= 1
            writer.close()

    async def _serve(self, conn: Conn) -> None:
        limits = self.limits
        crowded = conn.crowded
        # Crowded, wait only briefly for the first bytes (to answer in the right protocol).
        # A connection that sends nothing within the first-byte timeout is closed: silent
        # sockets cost a coroutine for seconds, and never count against the connection limit.
        first = await self._first_bytes(conn, 1.0 if crowded else limits.first_byte_timeout_s)
        if not first:
            return
        conn.active = True
        self.active += 1
        over_limit = crowded or 0 < limits.connections_limit < self.active
        # 'A'..'Z': an HTTP method (no line-protocol command starts with a capital letter).
        lines_only = conn.server[1] == limits.telnet_port != 0
        is_http = 65 <= first[0] <= 90 and not lines_only
        if over_limit or self.closing:
            reason = ("too many connections from this address" if crowded
                      else "too many connections" if over_limit
                      else "the worker is shutting down")
            conn.writer.write(error_response(503, "Service Unavailable", reason.capitalize())
                              if is_http else f"error: {reason}\n".encode())
            await drain(conn.writer, 1.0)
        elif is_http:
            await serve_http(conn, first, self)
        else:
            await serve_lines(conn, first, self, self._session_runner(conn))

    async def _first_bytes(self, conn: Conn, timeout_s: float) -> bytes:
        conn.idle = True
        try:
            return await read_block(conn.reader, timeout_s or None)
        except (TimeoutError, ConnectionError):
            return b""
        finally:
            conn.idle = False

    def _session_runner(self, conn: Conn) -> Any:
        from app.lineproto.session import TelnetSession

        session = TelnetSession(self.wsgi, f"{conn.peer[0]}:{conn.peer[1]}")

        async def run_lines(lines: list[bytes]) -> tuple[bytes, bool]:
            return await self._in_thread(self.line_pool, session.handle_lines, lines)

        return run_lines

    async def run_request(self, request: Request, peer: tuple[str, int],
                          server: tuple[str, int], watch: ClientWatch) -> Reply:
        """Run the app (or the put lane) on a complete request in a thread; 503 when too
        many are waiting. The app is told (``watch``) if the client leaves meanwhile."""
        if self.waiting >= self.limits.queue_limit:
            raise HttpError(503, "Service Unavailable",
                            f"Over {self.limits.queue_limit} requests are waiting in this worker")
        if self.puts is not None and self.puts.takes(request):
            self.waiting += 1
            try:
                return await self.puts.answer(request, peer, server)
            finally:
                self.waiting -= 1
        environ = build_environ(request, peer, server)
        environ[CLIENT_GONE] = watch.start()
        heavy = is_heavy(environ["PATH_INFO"])
        self.waiting += 1
        if heavy:
            self.addresses.query_started()  # the other workers split no read meanwhile
        try:
            pool = self.heavy_pool if heavy else self.pool
            reply: Reply = await self._in_thread(pool, call_app, self.wsgi, environ)
            return reply
        finally:
            self.waiting -= 1
            if heavy:
                self.addresses.query_ended()

    async def _in_thread(self, pool: ThreadPoolExecutor, func: Any, *args: Any) -> Any:
        return await self._submit(pool, func, *args)

    def _submit(self, pool: ThreadPoolExecutor, func: Any, *args: Any) -> asyncio.Future[Any]:
        """``func(*args)`` in one of ``pool``'s threads, counted while it runs."""
        def job() -> Any:
            with self.jobs_lock:
                self.running_jobs += 1
            try:
                return func(*args)
            finally:
                with self.jobs_lock:
                    self.running_jobs -= 1

        return asyncio.get_running_loop().run_in_executor(pool, job)

    def access(self, peer: str, request: Request | None, status: int, size: int,
               duration_s: float) -> None:
        """Count a request and log it; ``request`` is None when it was rejected unread."""
        self.nr += 1
        if self.nr >= self.max_requests and self.alive:
            self.log.info("Autorestarting worker after current request.")
            self._stop(True)
        if not self.cfg.accesslog:
            return
        if self.access_log is None:
            self.access_log = AccessLog(self.log.access_log)
        if request is None:
            self.access_log.refused(peer, status, size)
        else:
            self.access_log.request(peer, request, status, size, duration_s)


def _peer_host(sock: socket.socket) -> str:
    """The client's address, as ``Conn.peer`` will say it ("" for a Unix socket or a client
    already gone)."""
    try:
        return _address(sock.getpeername())[0]
    except OSError:
        return ""


def _listener(sock: Any) -> socket.socket:
    """The raw socket inside gunicorn's listener wrapper, non-blocking for the loop."""
    raw: socket.socket = getattr(sock, "sock", sock)
    raw.setblocking(False)
    return raw


def _tsd_config(app: Any) -> Any:
    config = getattr(app, "config", None)
    if config is not None and "TSD" in config:
        return config["TSD"]
    from app.config import load_config

    return load_config()
