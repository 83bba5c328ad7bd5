"""Helpers shared by the benchmarks: a temp store, a gunicorn server, percentiles, memory."""

from __future__ import annotations

import os
import resource
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def temp_storage_url(name: str = "bench.db") -> str:
    return f"sqlite:///{tempfile.mkdtemp(prefix='pytsd-bench-')}/{name}"


@contextmanager
def gunicorn_server(env: dict[str, str], workers: int = 2) -> Iterator[str]:
    """pytsd under gunicorn on a free loopback port (access log off); yield its base URL.

    Ready at its first HTTP answer, whatever the status (a server with authentication
    answers 401), and once every worker accepts: a worker still loading the app would leave
    the first connections of a run all to the others."""
    from app.server.worker import READY_LOG
    from tests.e2e.tsd_process import gunicorn_server as serve

    log = Path(tempfile.mkdtemp(prefix="pytsd-bench-")) / "gunicorn.log"
    env = {"GUNICORN_ACCESSLOG": "/dev/null", "GUNICORN_CMD_ARGS": "--log-level info", **env}
    with serve(env, log, workers=workers, any_status=True) as tsd:
        deadline = time.monotonic() + 60
        while log.read_text().count(READY_LOG) < workers:
            assert time.monotonic() < deadline, f"not every worker started: {log}"
            time.sleep(0.05)
        yield tsd.url


def percentiles_ms(samples_s: list[float]) -> str:
    ms = np.array(samples_s) * 1000
    return (f"p50 {np.percentile(ms, 50):.2f} ms, p95 {np.percentile(ms, 95):.2f} ms, "
            f"max {ms.max():.2f} ms")


def peak_rss_mb() -> float:
    """Peak resident memory of this process, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def children_cpu_s() -> float:
    """CPU seconds (user + system) of every finished, waited-for descendant process: read it
    before starting a server and after stopping it to get what the server itself burnt,
    whatever else the machine is running."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def idle_server_cpu_s(env: dict[str, str], workers: int = 2) -> float:
    """CPU seconds a server costs to start and stop with nothing to do (the baseline)."""
    before = children_cpu_s()
    with gunicorn_server(env, workers=workers):
        pass
    return children_cpu_s() - before


def pid_cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process (all its threads) from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def tree_cpu_s(root: int, *, with_root: bool = True) -> float:
    """CPU seconds (user + system) so far of ``root``'s living descendants (Linux /proc), and
    of ``root`` itself unless ``with_root`` is false."""
    total, pending = 0.0, [root]
    while pending:
        pid = pending.pop()
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as children:
                    pending += [int(child) for child in children.read().split()]
            if with_root or pid != root:
                total += pid_cpu_s(pid)
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited meanwhile
    return total


def descendants_cpu_s() -> float:
    """CPU seconds (user + system) so far of this process's living descendants (Linux /proc):
    read it around one phase of a running server to get what the server burnt in that phase
    alone (``children_cpu_s`` counts only processes that have exited)."""
    return tree_cpu_s(os.getpid(), with_root=False)
