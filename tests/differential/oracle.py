"""The reference OpenTSDB 2.4.1 TSDs of the differential suite, run by scripts/opentsdb/opentsdb.sh.

Each :class:`OpenTSDB` is one TSD on a table set of its own (a prefix) of the project's HBase:
a *writer* loads the data through its own ``/api/put``; a *reader* (compaction off, so it never
rewrites what it reads) serves tables that pytsd wrote.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "opentsdb" / "opentsdb.sh"
HEAP = os.environ.get("TSD_TEST_OPENTSDB_HEAP", "768m")
FSCK_TOTAL = re.compile(r"Fsck: Total Errors: (\d+)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def opentsdb_settings(salt_width: int, appends: bool, compaction: bool) -> dict[str, str]:
    """The OpenTSDB config keys of a table layout (the same names pytsd reads)."""
    settings = {"tsd.storage.enable_compaction": str(compaction).lower(),
                "tsd.storage.enable_appends": str(appends).lower()}
    if salt_width:
        settings |= {"tsd.storage.salt.width": str(salt_width), "tsd.storage.salt.buckets": "4"}
    return settings


class OpenTSDB:
    """One TSD started (and stopped) through the project's script; HTTP via ``requests``."""

    def __init__(self, name: str, prefix: str, thrift: str, settings: dict[str, str]) -> None:
        self.name = name
        self.prefix = prefix
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "OPENTSDB_NAME": name, "OPENTSDB_PORT": str(self.port),
                    "OPENTSDB_TABLE_PREFIX": prefix, "OPENTSDB_THRIFT": thrift,
                    "OPENTSDB_HEAP": HEAP,
                    "OPENTSDB_SETTINGS": ";".join(f"{k}={v}" for k, v in settings.items())}
        self.session = requests.Session()
        self.managed = True  # started and stopped here; else someone else's (make oracle-up)

    @classmethod
    def running(cls, address: str, prefix: str) -> OpenTSDB:
        """A TSD started outside the suite (CI: ``OPENTSDB_FRESH=1 make oracle-up``)."""
        tsd = cls("external", prefix, "", {})
        tsd.url = f"http://{address}"
        tsd.managed = False
        return tsd

    def _script(self, *args: str, timeout_s: float = 300, ok: tuple[int, ...] = (0,)) -> str:
        done = subprocess.run([str(SCRIPT), *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout_s, check=False)
        if done.returncode not in ok:
            raise RuntimeError(f"opentsdb.sh {' '.join(args)} failed ({done.returncode}):\n"
                               f"{done.stdout}\n{done.stderr}")
        return done.stdout + done.stderr

    def start(self) -> OpenTSDB:
        if self.managed:
            self._script("start")
            return self
        status, text = self.request("GET", "/api/suggest?type=metrics&max=1")
        if (status, text) != (200, "[]"):
            raise RuntimeError(f"the OpenTSDB at {self.url} must start on empty tables "
                               f"(OPENTSDB_FRESH=1 make oracle-up); /api/suggest: {text[:200]}")
        return self

    def stop(self) -> None:
        self.session.close()
        if self.managed:
            self._script("stop")

    def tool(self, cls: str, *args: str) -> str:
        """Run an OpenTSDB CLI class (``UidManager``, ``Fsck``) over this TSD's tables with
        its settings; no TSD needs to run. Returns the output."""
        return self._script("tool", cls, *args)

    def fsck_errors(self) -> int:
        """``Fsck --full-scan``'s total error count over this TSD's tables (read only); it
        exits 1 when it found errors."""
        output = self._script("tool", "net.opentsdb.tools.Fsck", "--full-scan", ok=(0, 1))
        match = FSCK_TOTAL.search(output)
        if not match:
            raise RuntimeError(f"no fsck summary in:\n{output[-3000:]}")
        return int(match.group(1))

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, str]:
        response = self.session.request(method, self.url + path, timeout=120,
                                        data=None if body is None else body,
                                        headers={"Content-Type": "application/json"})
        return response.status_code, response.text


def stop_all(tsds: Iterable[OpenTSDB]) -> None:
    """Stop every TSD; a failure to stop one is reported and the others are still stopped."""
    for tsd in tsds:
        try:
            tsd.stop()
        except Exception as exc:  # noqa: BLE001 - report, keep stopping the others
            print(f"stopping {tsd.name}: {exc}")
