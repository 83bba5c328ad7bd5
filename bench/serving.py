"""Helpers for the serving benchmarks: a pytsd server over the demo store, worker memory, and
a background ``/api/version`` sampler whose p99 shows whether the server stays responsive."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import requests
from common import ROOT, free_port


def demo_store() -> str:
    """A fresh embedded store holding the demo day (7 metrics, 10 s points)."""
    from app.tsdb.demo import load_demo
    from tests.conftest import make_tsdb

    url = f"sqlite:///{tempfile.mkdtemp(prefix='pytsd-bench-')}/demo.db"
    tsdb = make_tsdb({"tsd.storage": url, "tsd.core.auto_create_metrics": True})
    load_demo(tsdb)
    tsdb.close()
    return url


@dataclass
class Server:
    url: str
    port: int
    process: subprocess.Popen[bytes]

    def workers(self) -> list[int]:
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[1]) == self.process.pid:
                    pids.append(int(entry.name))
        return pids

    def reset_peak_rss(self) -> None:
        for pid in self.workers():
            try:  # "5" resets VmHWM (Linux >= 4.0); without permission the peak is cumulative
                Path(f"/proc/{pid}/clear_refs").write_text("5")
            except OSError:
                pass

    def peak_rss_mb(self) -> float:
        peak = 0
        for pid in self.workers():
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]))
            except OSError:
                continue
        return peak / 1024


@contextmanager
def pytsd_server(settings: dict[str, str], workers: int = 2) -> Iterator[Server]:
    """gunicorn with pytsd's worker and config, on a free loopback port, access log off."""
    port = free_port()
    env = {**os.environ, "GUNICORN_ACCESSLOG": "", "GUNICORN_CMD_ARGS": "--log-level warning",
           "TSD_NETWORK_PORT": str(port), "TSD_NETWORK_WORKER_THREADS": str(workers),
           "PYTHONPATH": str(ROOT), **settings}
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "app.wsgi:application", "--config",
         str(ROOT / "gunicorn.conf.py")], cwd=tempfile.gettempdir(), env=env,
        start_new_session=True)
    server = Server(f"http://127.0.0.1:{port}", port, process)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if requests.get(server.url + "/api/version", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(0.2)
        else:
            raise RuntimeError("the server did not start")
        yield server
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@dataclass
class VersionSampler:
    """GET /api/version over one keep-alive connection, every ``interval_s``, until stopped."""

    url: str
    interval_s: float = 0.01
    timeout_s: float = 5.0
    samples_s: list[float] = field(default_factory=list)
    failures: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> VersionSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with requests.Session() as session:
            while not self._stop.is_set():
                started = time.perf_counter()
                try:
                    ok = session.get(self.url + "/api/version",
                                     timeout=self.timeout_s).status_code == 200
                except requests.RequestException:
                    ok = False
                self.samples_s.append(time.perf_counter() - started)
                self.failures += not ok
                self._stop.wait(self.interval_s)

    def p99_ms(self) -> float:
        return float(np.percentile(np.array(self.samples_s) * 1000, 99)) if self.samples_s \
            else float("nan")
