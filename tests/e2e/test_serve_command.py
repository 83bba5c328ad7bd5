"""``pytsd serve`` from any folder: it reports once the server answers, and stops cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests

from tests.e2e.tsd_process import empty_store, free_port


def test_serve_from_any_folder_reports_only_once_answering(tmp_path: Path) -> None:
    port = free_port()
    store = empty_store(tmp_path / "serve.db")
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("TSD_", "GUNICORN", "WEB_CONCURRENCY"))}
    env.update({"TSD_STORAGE": store, "PYTHONPATH": ""})
    pytsd = Path(sys.executable).parent / "pytsd"
    process = subprocess.Popen([str(pytsd), "serve", "--port", str(port), "--workers", "1"],
                               cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(2)]
        assert lines[0] == f"pytsd: storage {store}\n"
        assert lines[1].startswith("pytsd: settings from defaults (no TSD_CONFIG file)")
        for _ in range(20):  # gunicorn's log lines (stdout too) come first
            line = process.stdout.readline()
            if line.startswith("pytsd serving on"):
                break
        assert line.startswith(f"pytsd serving on http://127.0.0.1:{port} (1 workers")
        # printed only after the server answered: the very next request must succeed
        assert requests.get(f"http://127.0.0.1:{port}/api/version", timeout=5).json()[
            "version"] == "2.4.1"
        process.send_signal(signal.SIGTERM)  # forwarded to gunicorn: a graceful stop
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def test_ctrl_c_stops_quietly(tmp_path: Path) -> None:
    """Ctrl-C in a terminal signals the whole process group (pytsd, gunicorn, its workers):
    the server stops at once, with no traceback from a worker or a split-query helper, even
    while a helper is still starting."""
    port = free_port()
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("TSD_", "GUNICORN", "WEB_CONCURRENCY"))}
    env.update({"TSD_STORAGE": empty_store(tmp_path / "serve.db"), "PYTHONPATH": ""})
    pytsd = Path(sys.executable).parent / "pytsd"
    process = subprocess.Popen([str(pytsd), "serve", "--port", str(port), "--workers", "2"],
                               cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("pytsd serving on"):
                break
        requests.get(f"http://127.0.0.1:{port}/api/version", timeout=5)
        started = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)
        output = process.communicate(timeout=30)[0]
        stopped_s = time.monotonic() - started
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    for word in ("Traceback", "SystemExit", "KeyboardInterrupt", "BrokenPipeError"):
        assert word not in output, output
    assert "Shutting down: Master" in output
    assert stopped_s < 10, stopped_s  # 1-3 s on a loaded 2-core machine; 4-8 s before
