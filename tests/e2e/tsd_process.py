"""Start pytsd under gunicorn with the project's worker, as a real process on a free port.

The one way tests and benchmarks start gunicorn: :func:`launch` (a process group of its own,
output to a log), :func:`wait_until_responds`, and :func:`gunicorn_server` (both, and a stop
on the way out). ``start_tsd(settings)`` runs ``gunicorn app.wsgi:application -c
gunicorn.conf.py`` from a temporary folder (it must work from anywhere) with ``settings`` as
``TSD_*`` variables and returns a handle; ``stop()`` sends SIGTERM (graceful). Raw-socket
helpers speak to it byte by byte.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0


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


def workers_peak_rss_kb(master_pid: int) -> list[int]:
    """VmHWM (peak resident memory, KiB) of each worker of the gunicorn master ``master_pid``."""
    children = Path(f"/proc/{master_pid}/task/{master_pid}/children").read_text().split()
    peaks = []
    for pid in children:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peaks.append(int(line.split()[1]))
    return peaks


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


def demo_store_in(folder: Path) -> str:
    """``tsd.storage`` of a new SQLite store in ``folder`` holding the demo data set (a day
    ending now: 7 metrics, 10 s points)."""
    from app.tsdb.demo import load_demo
    from tests.conftest import make_tsdb

    url = f"sqlite:///{folder / 'demo.db'}"
    tsdb = make_tsdb({"tsd.storage": url, "tsd.core.auto_create_metrics": True})
    load_demo(tsdb)
    tsdb.close()
    return url


def launch(env: Mapping[str, str], log: Path, *, workers: int = 2, args: Sequence[str] = (),
           app: str = "wsgi:application", cwd: Path = ROOT) -> TsdProcess:
    """Start gunicorn with pytsd's config on a free loopback port (``env`` on top of ours),
    in a session of its own; output to ``log``. Does not wait: see :func:`wait_until_responds`."""
    port = free_port()
    full_env = {**os.environ, "GUNICORN_CMD_ARGS": "", "PYTHONPATH": str(ROOT),
                "TSD_NETWORK_PORT": str(port), "TSD_NETWORK_WORKER_THREADS": str(workers),
                **env}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", app, "--config", str(ROOT / "gunicorn.conf.py"),
             *args], cwd=cwd, env=full_env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    return TsdProcess(process, port, log)


def wait_until_responds(tsd: TsdProcess, path: str = "/api/version",
                        headers: Mapping[str, str] | None = None,
                        timeout_s: float = START_TIMEOUT_S, any_status: bool = False
                        ) -> TsdProcess:
    """Wait for a 200 on ``path`` (any answer with ``any_status``: a server that wants
    credentials); if the server exits or stays silent, stop it and raise with its log."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if tsd.process.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {tsd.process.returncode}:\n"
                               f"{tsd.log.read_text()}")
        try:
            status = requests.get(tsd.url + path, timeout=5, headers=headers).status_code
            if status == 200 or any_status:
                return tsd
        except requests.RequestException:  # not listening yet, or still booting
            pass
        time.sleep(0.2)
    tsd.stop()
    raise RuntimeError(f"gunicorn did not answer {path} in {timeout_s} s:\n{tsd.log.read_text()}")


@contextmanager
def gunicorn_server(env: Mapping[str, str], log: Path, *, workers: int = 2,
                    args: Sequence[str] = (), app: str = "wsgi:application", cwd: Path = ROOT,
                    path: str = "/api/version", headers: Mapping[str, str] | None = None,
                    any_status: bool = False) -> Iterator[TsdProcess]:
    """:func:`launch`, :func:`wait_until_responds`, and a graceful stop on the way out."""
    tsd = wait_until_responds(launch(env, log, workers=workers, args=args, app=app, cwd=cwd),
                              path, headers, any_status=any_status)
    try:
        yield tsd
    finally:
        tsd.stop()


def start_tsd(tmp: Path, settings: dict[str, Any], workers: int = 1,
              gunicorn_args: tuple[str, ...] = (), app: str = "app.wsgi:application",
              environ: dict[str, str] | None = None) -> TsdProcess:
    """``settings``: pytsd keys; ``environ``: other variables (gunicorn's)."""
    env = {env_name(key): str(value) for key, value in settings.items()}
    env.update(environ or {})
    if "TSD_STORAGE" not in env and "TSD_STORAGE" not in os.environ:
        env["TSD_STORAGE"] = empty_store(tmp / "tsd.db")
    tsd = launch(env, tmp / f"gunicorn-{time.monotonic_ns()}.log", workers=workers,
                 args=gunicorn_args, app=app, cwd=tmp)
    return wait_until_responds(tsd)


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
