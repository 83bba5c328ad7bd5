"""The README's quick start on a fresh copy of the repository, in a clean environment.

The copy holds what a clone would (git's tracked and not-ignored files), so no ``.venv``, no
data. It runs with a new HOME, a bare PATH (the base ``python3``, ``make``, ``curl``), pip
packages only from a local wheelhouse (``--no-index``), and proxies that refuse every
connection, so nothing can be fetched from the network. Then:

1. ``make run`` makes ``.venv`` with ``python3 -m venv``, installs, loads the demo and serves;
   the README's curl commands, run as written, read back what they wrote;
2. ``make run`` again, now without even the wheelhouse: it installs nothing and serves;
3. ``pytsd serve`` from another folder, over a new relative store path, serves and keeps a point.

The wheelhouse is the one step that uses the network (PyPI, or pip's cache), before the clean
environment starts, as a Docker layer would.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.tsd_process import stop_process_group

ROOT = Path(__file__).resolve().parents[2]
DEAD = "http://127.0.0.1:9"  # nothing listens there: every fetch through it fails
LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def copy_of_repository(target: Path) -> Path:
    """What ``git clone`` of this working tree gives: tracked and not-ignored files."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listing):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the tree is not part of it
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            (target / name).write_bytes(source.read_bytes())
            (target / name).chmod(source.stat().st_mode)
    return target


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pytsd[hbase]'s wheels (and its build backend) at the versions of constraints.txt.

    Kept in the user's cache, keyed by what decides its contents, because filling it asks
    PyPI for every package (a minute on a slow day); a new key makes a new one.
    """
    key = hashlib.sha256(b"".join((ROOT / name).read_bytes()
                                  for name in ("pyproject.toml", "constraints.txt")))
    key.update(sys.version.encode())
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pytsd"
    out = cache / f"wheelhouse-{key.hexdigest()[:16]}"
    if out.is_dir():
        return out
    cache.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(dir=cache, prefix="partial-"))
    command = [sys.executable, "-m", "pip", "download", "-q", "-d", str(partial),
               "-c", str(ROOT / "constraints.txt"), f"{ROOT}[hbase]", "setuptools>=68"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        shutil.rmtree(partial)
        pytest.fail(f"cannot build the wheelhouse (needs PyPI or pip's cache): {done.stderr}")
    try:
        partial.rename(out)
    except OSError:  # another run made it first
        shutil.rmtree(partial)
    return out


def clean_env(home: Path, wheelhouse: Path | None) -> dict[str, str]:
    """A bare environment: base python3 first on PATH, no network, pip only from a folder."""
    env = {"PATH": f"{Path(sys.base_prefix) / 'bin'}:/usr/local/bin:/usr/bin:/bin",
           "HOME": str(home), "LANG": "C.UTF-8", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "PIP_INDEX_URL": f"{DEAD}/simple", "PIP_RETRIES": "0", "PIP_TIMEOUT": "5",
           "no_proxy": "127.0.0.1,localhost", "NO_PROXY": "127.0.0.1,localhost"}
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        env[name] = DEAD
    if wheelhouse is not None:
        env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheelhouse))
    return env


@contextmanager
def serving(command: list[str], cwd: Path, env: dict[str, str], port: int,
            log: Path) -> Iterator[None]:
    """Run a server in its own process group until it answers; stop the whole group after."""
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300  # a hang, not slowness: the first start installs
        while not answers(port):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{' '.join(command)} did not serve:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield
    finally:
        stop_process_group(process)


def answers(port: int) -> bool:
    try:
        with LOCAL.open(f"http://127.0.0.1:{port}/api/version", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def call(port: int, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                     headers={"Content-Type": "application/json"})
    with LOCAL.open(request, timeout=30) as response:
        text = response.read().decode()
    return json.loads(text) if text else None


def readme_curl_commands() -> list[str]:
    """The quick start's curl commands, continuation lines joined, as a shell gets them."""
    readme = (ROOT / "README.md").read_text()
    quick_start = readme[readme.index("## Quick start"):readme.index("\n## ", readme.index(
        "## Quick start") + 1)]
    blocks = re.findall(r"```sh\n(.*?)```", quick_start, flags=re.S)
    curl_block = next(block for block in blocks if block.startswith("curl"))
    return [line for line in curl_block.replace("\\\n", " ").splitlines() if line.strip()]


def run_readme_commands(port: int, clone: Path, env: dict[str, str]) -> list[Any]:
    outputs = []
    for command in readme_curl_commands():
        assert "127.0.0.1:4242" in command
        done = subprocess.run(["bash", "-c", command.replace("127.0.0.1:4242",
                                                             f"127.0.0.1:{port}")],
                              cwd=clone, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (command, done.stderr)
        outputs.append(json.loads(done.stdout))
    return outputs


def test_the_readme_quick_start_on_a_fresh_clone_offline(
        tmp_path: Path, wheelhouse: Path) -> None:
    clone = copy_of_repository(tmp_path / "clone")
    home = tmp_path / "home"
    home.mkdir()
    assert not (clone / ".venv").exists() and not (clone / "data").exists()

    # 1. make run: venv, install from the wheelhouse only, demo, serve; the curl examples.
    port = free_port()
    make_run = ["make", "run", f"PORT={port}", "DEMO_HOURS=1"]
    first_log = tmp_path / "first-run.log"
    with serving(make_run, clone, clean_env(home, wheelhouse), port, first_log):
        suggest, by_dc, put, read_back = run_readme_commands(port, clone, clean_env(home, None))
    assert suggest == ["sys.cpu.system", "sys.cpu.user"]
    assert [series["tags"] for series in by_dc] == [{"dc": "lga"}, {"dc": "sjc"}]
    assert all(series["dps"] and 0 <= min(series["dps"].values()) for series in by_dc)
    assert put == {"success": 1, "failed": 0, "errors": []}
    assert [(s["metric"], s["tags"], list(s["dps"].values())) for s in read_back] == [
        ("my.metric", {"host": "me"}, [42])]
    first = first_log.read_text()
    assert "Installing into .venv: pytsd[hbase]" in first and "loaded " in first
    assert "include-system-site-packages = false" in (clone / ".venv/pyvenv.cfg").read_text()
    assert (clone / "data" / "pytsd.db").is_file()

    # 2. make run again, with no package source at all: nothing to install, the data is kept.
    offline = clean_env(home, None)
    port = free_port()
    second_log = tmp_path / "second-run.log"
    with serving(["make", "run", f"PORT={port}"], clone, offline, port, second_log):
        again = call(port, "/api/query?start=1h-ago&m=sum:my.metric%7Bhost=me%7D")
    assert [list(series["dps"].values()) for series in again] == [[42]]
    second = second_log.read_text()
    assert "demo data already loaded" in second and "pip install" not in second

    # 3. pytsd serve from another folder, over a new store path relative to it.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    port = free_port()
    env = {**offline, "TSD_STORAGE": "sqlite:///store/new.db",
           "TSD_CORE_AUTO_CREATE_METRICS": "true"}
    serve_log = tmp_path / "serve.log"
    with serving([str(clone / ".venv/bin/pytsd"), "serve", "--port", str(port)], elsewhere, env,
                 port, serve_log):
        call(port, "/api/put", {"metric": "elsewhere.m", "timestamp": 1700000000, "value": 7,
                                "tags": {"at": "x"}})
        kept = call(port, "/api/query?start=1699999000&end=1700001000&m=sum:elsewhere.m")
    assert [series["dps"] for series in kept] == [{"1700000000": 7}]
    assert (elsewhere / "store" / "new.db").is_file()
    assert f"storage: embedded store {elsewhere}/store/new.db" in serve_log.read_text()


def test_make_test_says_what_it_installs_before_installing(tmp_path: Path) -> None:
    clone = copy_of_repository(tmp_path / "clone")
    (clone / ".venv/bin").mkdir(parents=True)  # as if made: `make -n` then shows the installs
    (clone / ".venv/bin/python").touch()
    dry_run = subprocess.run(["make", "-n", "test"], cwd=clone, capture_output=True, text=True,
                             env=clean_env(tmp_path, None), timeout=60)
    lines = dry_run.stdout.splitlines()
    says = next(n for n, line in enumerate(lines) if "Installing for the tests" in line)
    installs = next(n for n, line in enumerate(lines) if "pip install" in line)
    assert says < installs
    assert "chromium with apt-get" in lines[says] and ".venv" in lines[says]
    assert lines[-1] == "scripts/run-tests.sh"
