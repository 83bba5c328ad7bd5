"""``pytsd serve``: run gunicorn with pytsd's worker and settings from any folder.

gunicorn runs as a child process so this command can say "serving on ..." only once the
server answers, and forward the signals a terminal or a supervisor sends (a SIGHUP reloads,
SIGTERM stops gracefully) before exiting with gunicorn's own status.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from app.config import env_name, load_config

START_TIMEOUT_S = 60.0
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
                     signal.SIGTTIN, signal.SIGTTOU, signal.SIGUSR1, signal.SIGUSR2)


def serve(bind: str | None, port: int | None, workers: int | None,
          echo: Callable[[str], Any] = print) -> int:
    """Start gunicorn, wait until it answers, report, then wait for it; return its exit code."""
    overrides = {"tsd.network.bind": bind, "tsd.network.port": port,
                 "tsd.network.worker_threads": workers}
    env = {**os.environ, **{env_name(key): str(value)
                            for key, value in overrides.items() if value is not None}}
    config = load_config(environ=env)
    echo(f"pytsd: storage {config['tsd.storage']}")
    echo(f"pytsd: settings from {_config_source(env)}")
    argv = [sys.executable, "-m", "gunicorn", "app.wsgi:application",
            "--config", "python:app.server.gunicorn_conf"]
    child = subprocess.Popen(argv, env=env)
    for sig in FORWARDED_SIGNALS:
        signal.signal(sig, lambda number, _frame: child.send_signal(number))
    host, port_number = str(config["tsd.network.bind"]), int(config["tsd.network.port"])
    if _wait_until_answering(child, _probe_host(host), port_number):
        echo(f"pytsd serving on http://{_url_host(host)}:{port_number} "
             f"({config['tsd.network.worker_threads']} workers; HTTP and the telnet-style "
             "line protocol on this port)")
    return child.wait()


def _config_source(env: dict[str, str]) -> str:
    path = env.get("TSD_CONFIG")
    named = sorted(name for name in env if name.startswith("TSD_") and name != "TSD_CONFIG")
    source = f"{path} (TSD_CONFIG)" if path else "defaults (no TSD_CONFIG file)"
    return source + (f" and the environment ({', '.join(named)})" if named else "")


def _probe_host(bind: str) -> str:
    if bind in ("0.0.0.0", ""):
        return "127.0.0.1"
    return "::1" if bind == "::" else bind


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _wait_until_answering(child: subprocess.Popen[bytes], host: str, port: int) -> bool:
    url = f"http://{_url_host(host)}:{port}/api/version"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and child.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:  # noqa: S310 (local)
                if answer.status == 200:
                    return True
        except OSError:  # not listening yet
            time.sleep(0.2)
    return False
