"""Real OpenTSDB writers against a real pytsd (gunicorn with the project's worker), both backends.

Each client writes through its own protocol code (telnet lines or HTTP), then the test reads
the points back through pytsd's HTTP API and checks the values: a raw socket session,
potsdb (telnet), opentsdb-py (telnet and HTTP), pyopentsdb (HTTP, trailing slashes on every
URL) and Debian's collectd with its write_tsdb plugin, started as a process.
"""

from __future__ import annotations

import datetime
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import BACKENDS, HBASE_TABLE_SETS, backend_config, make_tsdb
from tests.e2e.tsd_process import TsdProcess, read_until_closed, start_tsd

T0 = 1356998400
COLLECTD = Path("/usr/sbin/collectd")
WAIT_S = 20.0


@pytest.fixture(scope="module", params=BACKENDS)
def tsd(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[TsdProcess]:
    """pytsd over an empty store of each backend (metrics auto-created)."""
    tmp = tmp_path_factory.mktemp(f"clients-{request.param}")
    config = backend_config(str(request.param), tmp)
    make_tsdb(config).close()
    process = start_tsd(tmp, {**config, "tsd.core.auto_create_metrics": True}, workers=2)
    yield process
    process.stop()
    HBASE_TABLE_SETS.recycle(config)


def read_back(tsd: TsdProcess, metric: str, tags: str = "", expected: int = 1,
              start: int = T0 - 1) -> list[dict[str, Any]]:
    """The series of ``metric`` once ``expected`` points are readable (clients send async)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        response = requests.get(f"{tsd.url}/api/query", timeout=10,
                                params={"start": str(start), "m": f"sum:{metric}{tags}"})
        series = response.json() if response.status_code == 200 else []
        if sum(len(s["dps"]) for s in series) >= expected or time.monotonic() > deadline:
            return list(series)
        time.sleep(0.2)


def test_raw_socket_session(tsd: TsdProcess) -> None:
    with tsd.connect() as sock:
        sock.sendall(f"put raw.m {T0} 1 host=a\n"
                     f"put raw.m {T0 + 10} oops host=a\n"
                     f"put raw.m {T0 + 20} 2.5 host=a\n"
                     "version\nhelp\nnonsense\n"
                     f"put raw.m {T0 + 30} 3 host=a\nexit\n".encode())
        reply = read_until_closed(sock).decode()
    lines = reply.splitlines()
    assert lines[0] == "put: invalid value: Invalid character 'o' in oops"
    assert lines[1].startswith("pytsd 2.4.1 built at revision ")
    assert lines[2].startswith("Built on ")
    assert lines[3:] == [
        "available commands: stats dropcaches version exit help put rollup histogram ",
        "unknown command: nonsense.  Try `help'."]
    [series] = read_back(tsd, "raw.m", expected=3)
    assert series["dps"] == {str(T0): 1, str(T0 + 20): 2.5, str(T0 + 30): 3}


def test_potsdb_telnet(tsd: TsdProcess) -> None:
    import potsdb

    client = potsdb.Client("127.0.0.1", port=tsd.port, host_tag=False)
    for i in range(100):
        client.log("potsdb.metric", i * 1.5, host="web01", timestamp=T0 + i)
    client.wait()
    [series] = read_back(tsd, "potsdb.metric", "{host=web01}", expected=100)
    assert series["dps"] == {str(T0 + i): i * 1.5 for i in range(100)}


@pytest.mark.parametrize("protocol", ["TELNET", "HTTP"])
def test_opentsdb_py(tsd: TsdProcess, protocol: str) -> None:
    from opentsdb import TSDBClient

    metric = f"opentsdb_py.{protocol.lower()}"
    client = TSDBClient("127.0.0.1", tsd.port, protocol=protocol, host_tag=False,
                        send_metrics_limit=100_000)
    for i in range(60):
        client.send(metric, i, dc="lga", timestamp=T0 + 60 * i)
    client.close()
    client.wait()
    [series] = read_back(tsd, metric, "{dc=lga}", expected=60)
    assert series["dps"] == {str(T0 + 60 * i): i for i in range(60)}
    if protocol == "HTTP":
        assert client.statuses["failed"] == 0


def test_pyopentsdb_trailing_slashes(tsd: TsdProcess) -> None:
    from pyopentsdb import tsdb

    connector = tsdb.TsdbConnector(tsd.url)
    points = [{"metric": "pyopentsdb.m", "timestamp": T0 + i, "value": (i + 1) * 0.25,
               "tags": {"host": "web02"}} for i in range(20)]
    assert connector.put(data=points) is None  # 204: POST /api/put/
    start = datetime.datetime.fromtimestamp(T0 - 1, datetime.UTC)
    result = connector.query(start=start, metrics=[{"aggregator": "sum",
                                                    "metric": "pyopentsdb.m"}])
    assert result[0]["dps"] == {str(T0 + i): (i + 1) * 0.25 for i in range(20)}
    assert connector.version()["version"] == "2.4.1"


@pytest.mark.skipif(not COLLECTD.exists() and os.environ.get("CI") != "true",
                    reason="collectd missing (scripts/install-collectd.sh)")
def test_collectd_write_tsdb(tsd: TsdProcess, tmp_path: Path) -> None:
    """collectd's write_tsdb sends what collectd's unixsock receives (PUTVAL), as telnet puts
    (``put exec.pytsd.gauge.answer <t> 42 fqdn=collectd-test  source=collectd``: two spaces)."""
    sock_path = tmp_path / "collectd.sock"
    config = tmp_path / "collectd.conf"
    config.write_text(f"""
Hostname "collectd-test"
FQDNLookup false
Interval 1
BaseDir "{tmp_path}"
PIDFile "{tmp_path}/collectd.pid"
PluginDir "/usr/lib/collectd"
TypesDB "/usr/share/collectd/types.db"
LoadPlugin logfile
<Plugin logfile>
  File "{tmp_path}/collectd.log"
  LogLevel info
</Plugin>
LoadPlugin unixsock
<Plugin unixsock>
  SocketFile "{sock_path}"
</Plugin>
LoadPlugin write_tsdb
<Plugin write_tsdb>
  <Node "pytsd">
    Host "127.0.0.1"
    Port "{tsd.port}"
    HostTags "source=collectd"
  </Node>
</Plugin>
""")
    collectd = subprocess.Popen([str(COLLECTD), "-f", "-C", str(config)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + WAIT_S
        while not sock_path.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        now_s = int(time.time())
        with socket.socket(socket.AF_UNIX) as unix:
            unix.connect(str(sock_path))
            for i, value in enumerate((42, 43.5, 44)):
                unix.sendall(f'PUTVAL "collectd-test/exec-pytsd/gauge-answer" '
                             f"{now_s - 10 + i}:{value}\n".encode())
                assert unix.recv(1024).startswith(b"0 "), "collectd refused the value"
    finally:
        collectd.terminate()  # write_tsdb buffers its lines; they are sent by now
        collectd.wait(timeout=30)
    series = read_back(tsd, "exec.pytsd.gauge.answer", expected=3, start=now_s - 60)
    log = (tmp_path / "collectd.log").read_text() if (tmp_path / "collectd.log").exists() else ""
    metrics = requests.get(f"{tsd.url}/api/suggest?type=metrics&max=1000", timeout=10).json()
    assert len(series) == 1, (metrics, log)
    assert series[0]["tags"] == {"fqdn": "collectd-test", "source": "collectd"}
    assert series[0]["dps"] == {str(now_s - 10): 42, str(now_s - 9): 43.5, str(now_s - 8): 44}


def test_clients_are_installed() -> None:
    """The clients above come from the test extras; collectd from scripts/install-collectd.sh."""
    import opentsdb
    import potsdb
    import pyopentsdb

    assert all((opentsdb, potsdb, pyopentsdb))
    if os.environ.get("CI") == "true":
        assert COLLECTD.exists() and shutil.which("collectd") is not None
