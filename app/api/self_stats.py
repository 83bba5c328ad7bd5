"""pytsd writes its own ``/api/stats`` figures into itself every ``tsd.stats.self_interval_s``
seconds (off by default), as OpenTSDB users do with tcollector's TSD collector; the provisioned
Grafana dashboard "pytsd itself" reads them (``grafana/dashboards/pytsd-self.json``).

One worker writes for the server: the one holding an exclusive lock on a file in the server's
run directory (another takes over when it exits). The points go through the one write path
with ``tsd.*`` names, so they need ``tsd.core.auto_create_metrics`` or those metrics assigned.
"""

from __future__ import annotations

import fcntl
import os
import re
from typing import IO, Any

from flask.blueprints import BlueprintSetupState

from app.api import bp
from app.api.put import writer_of
from app.api.stats import collect
from app.tsdb import TSDB
from app.tsdb.background import run_every
from app.tsdb.points import DataPoint
from app.tsdb.writer import PointWriter

# OpenTSDB's tag value characters; anything else in a route or dashboard becomes "_".
NOT_TAG_CHARS = re.compile(r"[^a-zA-Z0-9\-_./]")
_lock_file: list[IO[str]] = []  # held for the process's life once taken


def stats_points(tsdb: TSDB) -> list[DataPoint]:
    """``/api/stats`` as data points, the server's figures only (not those tagged ``pid``)."""
    found = []
    for item in collect(tsdb):
        if "pid" in item["tags"]:
            continue  # per-process figures: every restart would assign new tag value UIDs
        text = str(item["value"])
        value: int | float = float(text) if "." in text or "e" in text.lower() else int(text)
        tags = {key: NOT_TAG_CHARS.sub("_", str(tag)) or "none"
                for key, tag in item["tags"].items()}
        found.append(DataPoint(item["metric"], int(item["timestamp"]), value, tags))
    return found


def write_self_stats(tsdb: TSDB, writer: PointWriter) -> str | None:
    """Write this server's figures once, if this worker is the server's writer."""
    if not _elected():
        return None
    points = stats_points(tsdb)
    errors = [error for error in writer.write(points) if error]
    if errors:
        return f"self-stats: {len(errors)} of {len(points)} points refused: {errors[0]}"
    return None


def _elected() -> bool:
    if _lock_file:
        return True
    folder = os.environ.get("PYTSD_RUN_DIR")
    if not folder:
        return True  # one process, nobody to share with
    handle = open(os.path.join(folder, "self-stats.lock"), "a")  # noqa: SIM115 (kept open)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return False
    _lock_file.append(handle)
    return True


@bp.record_once
def _start(state: BlueprintSetupState) -> None:
    interval_s = float(state.app.config["TSD"]["tsd.stats.self_interval_s"])
    if interval_s <= 0:
        return
    extensions: dict[str, Any] = state.app.extensions
    run_every("self-stats", interval_s,
              lambda: write_self_stats(extensions["tsdb"], writer_of(extensions)),
              wait_first=True)
