"""Helpers for the serving benchmarks: a pytsd server over the demo store, worker memory, and
a background ``/api/version`` sampler whose p99 shows whether the server stays responsive."""

from __future__ import annotations

import multiprocessing
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import requests
from common import pid_cpu_s  # also puts the repository on sys.path (app, tests)


def demo_store() -> str:
    """A fresh embedded store holding the demo day (7 metrics, 10 s points)."""
    from tests.e2e.tsd_process import demo_store_in

    return demo_store_in(Path(tempfile.mkdtemp(prefix="pytsd-bench-")))


@dataclass
class Server:
    url: str
    port: int
    process: subprocess.Popen[bytes]

    def workers(self) -> list[int]:
        return _children(self.process.pid)

    def pids(self) -> list[int]:
        """The gunicorn master, its workers and their split helpers, for their CPU (a helper
        that has exited took its CPU with it)."""
        workers = self.workers()
        return [self.process.pid, *workers, *(h for w in workers for h in _children(w))]

    def split_helpers_cpu_s(self) -> float:
        """CPU seconds the workers' children (their split helpers) have used so far."""
        total = 0.0
        for worker in self.workers():
            for helper in _children(worker):
                try:
                    total += pid_cpu_s(helper)
                except OSError:
                    continue  # exited meanwhile
        return total

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


def _children(parent: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                pids.append(int(entry.name))
    return pids


@contextmanager
def pytsd_server(settings: dict[str, str], workers: int = 2) -> Iterator[Server]:
    """gunicorn with pytsd's worker and config, on a free loopback port, access log off."""
    from tests.e2e.tsd_process import launch, wait_until_responds

    env = {"GUNICORN_ACCESSLOG": "", "GUNICORN_CMD_ARGS": "--log-level warning", **settings}
    log = Path(tempfile.mkdtemp(prefix="pytsd-bench-")) / "gunicorn.log"
    tsd = wait_until_responds(launch(env, log, workers=workers, app="app.wsgi:application",
                                     cwd=Path(tempfile.gettempdir())), timeout_s=60)
    try:
        yield Server(tsd.url, tsd.port, tsd.process)
    finally:
        tsd.stop(timeout_s=40)


class VersionSampler:
    """GET /api/version over one keep-alive connection every ``interval_s`` until stopped.

    It runs in its own process: in a thread of the benchmark it would wait for the GIL behind
    the probe's own client code and measure the client, not the server.
    """

    def __init__(self, url: str, interval_s: float = 0.01, timeout_s: float = 5.0) -> None:
        self.url, self.interval_s, self.timeout_s = url, interval_s, timeout_s
        self.samples_s: list[float] = []
        self.failures = 0
        self._stop = multiprocessing.Event()
        self._results, sender = multiprocessing.Pipe(duplex=False)
        self._process = multiprocessing.Process(target=self._run, args=(sender,), daemon=True)

    def __enter__(self) -> VersionSampler:
        self._process.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.samples_s, self.failures = self._results.recv()
        self._process.join()

    def _run(self, sender: Any) -> None:
        samples: list[float] = []
        failures = 0
        with requests.Session() as session:
            while not self._stop.is_set():
                started = time.perf_counter()
                try:
                    ok = session.get(self.url + "/api/version",
                                     timeout=self.timeout_s).status_code == 200
                except requests.RequestException:
                    ok = False
                samples.append(time.perf_counter() - started)
                failures += not ok
                self._stop.wait(self.interval_s)
        sender.send((samples, failures))

    def p99_ms(self) -> float:
        return float(np.percentile(np.array(self.samples_s) * 1000, 99)) if self.samples_s \
            else float("nan")
