"""Every worker's metrics read from their files (app/observe/metrics.py), with the file of a
process that was creating it when read, or was killed then: empty."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.observe import metrics

COUNT_ONE = """
from prometheus_client import Counter
Counter("pytsd_test_files", "a counter of a worker").inc(3)
"""


def test_an_empty_metric_file_reads_as_no_metrics(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    env = {**os.environ, metrics.MULTIPROC_ENV: str(tmp_path)}
    subprocess.run([sys.executable, "-c", COUNT_ONE], env=env, check=True)  # a worker's file
    (tmp_path / "counter_999999.db").touch()  # another's, created and not sized yet
    monkeypatch.setenv(metrics.MULTIPROC_ENV, str(tmp_path))
    assert metrics.total("pytsd_test_files_total") == 3
