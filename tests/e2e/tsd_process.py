"""Start pytsd under gunicorn with the project's worker, as a real process on a free port.

``start_tsd(settings)`` runs ``gunicorn app.wsgi:application -c gunicorn.conf.py`` from a
temporary folder (it must work from anywhere) with ``settings`` as ``TSD_*`` variables, waits
until ``/api/version`` answers and returns a handle; ``stop()`` sends SIGTERM (graceful).
Raw-socket helpers speak to it byte by byte.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def env_name(key: str) -> str:
    return key.upper().replace(".", "_")


@dataclass
class TsdProcess:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def connect(self, timeout_s: float = 5.0) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int:
        return stop_process_group(self.process, sig, timeout_s)


def stop_process_group(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM,
                       timeout_s: float = 30.0) -> int:
    """Signal a server started with ``start_new_session`` (gunicorn and its workers), wait for
    it, and kill the group when it outlives ``timeout_s``; its exit code."""
    if process.poll() is None:
        os.killpg(process.pid, sig)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode


def empty_store(path: Path) -> str:
    """``tsd.storage`` of a new SQLite store with OpenTSDB's tables."""
    from tests.conftest import make_tsdb

    url = f"sqlite:///{path}"
    make_tsdb({"tsd.storage": url}).close()
    return url


def start_tsd(tmp: Path, settings: dict[str, Any], workers: int = 1,
              gunicorn_args: tuple[str, ...] = (), app: str = "app.wsgi:application",
              environ: dict[str, str] | None = None) -> TsdProcess:
    """``settings``: pytsd keys; ``environ``: other variables (gunicorn's)."""
    port = free_port()
    env = {**os.environ, "GUNICORN_CMD_ARGS": "", "PYTHONPATH": str(ROOT),
           "TSD_NETWORK_PORT": str(port), "TSD_NETWORK_WORKER_THREADS": str(workers)}
    env.update({env_name(key): str(value) for key, value in settings.items()})
    env.update(environ or {})
    if "TSD_STORAGE" not in env:
        env["TSD_STORAGE"] = empty_store(tmp / "tsd.db")
    log = tmp / f"gunicorn-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", app, "--config",
             str(ROOT / "gunicorn.conf.py"), *gunicorn_args],
            cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    tsd = TsdProcess(process, port, log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {process.returncode}:\n{log.read_text()}")
        try:
            if requests.get(f"{tsd.url}/api/version", timeout=5).status_code == 200:
                return tsd
        except requests.RequestException:  # not listening yet
            pass
        time.sleep(0.2)
    tsd.stop()
    raise RuntimeError(f"gunicorn did not answer in 30 s:\n{log.read_text()}")


def read_until_closed(sock: socket.socket, timeout_s: float = 5.0) -> bytes:
    """Everything the server sends until it closes; fails if it stays open past the timeout."""
    sock.settimeout(timeout_s)
    chunks = []
    while True:
        data = sock.recv(65536)
        if not data:
            return b"".join(chunks)
        chunks.append(data)


def read_exactly_until(sock: socket.socket, marker: bytes, timeout_s: float = 5.0) -> bytes:
    """Bytes up to and including ``marker`` (the connection stays open)."""
    sock.settimeout(timeout_s)
    data = b""
    while marker not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"closed before {marker!r}; got {data!r}")
        data += chunk
    return data


def read_response(sock: socket.socket, timeout_s: float = 5.0) -> tuple[int, dict[str, str],
                                                                          bytes]:
    """One HTTP response with a Content-Length body: status, headers (lower-case), body."""
    head = read_exactly_until(sock, b"\r\n\r\n", timeout_s)
    head, _, rest = head.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {name.lower(): value.strip() for name, _, value in
               (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, headers, rest[:length]
