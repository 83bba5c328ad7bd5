"""The query pool's threads and the expensive lane's lower OS priority (issue 25): an expensive
query's thread runs at nice +``tsd.query.expensive_nice`` and is back at its own priority
afterwards, or, where it cannot raise it back (no CAP_SYS_NICE), replaced by a fresh thread."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import Future
from pathlib import Path

import pytest

from app.server.query_threads import QueryThreads
from app.tsdb.admission import Admission, AdmissionSettings, thread_must_retire

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux nice")


def nice_of_this_thread() -> int:
    stat = Path(f"/proc/self/task/{threading.get_native_id()}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[16])  # field 19, nice


def lanes(nice: int) -> Admission:
    return Admission(AdmissionSettings(cheap_slots=1, expensive_slots=1, expensive_points=1000,
                                       max_queue_ms=100, user_quota=0, dashboard_quota=0,
                                       expensive_nice=nice))


def in_thread(func):  # type: ignore[no-untyped-def]
    """Run ``func`` in a throwaway thread: it may be left at a lower priority."""
    result: Future[object] = Future()
    thread = threading.Thread(target=lambda: result.set_result(func()))
    thread.start()
    thread.join()
    return result.result()


def test_jobs_run_and_errors_reach_the_caller() -> None:
    pool = QueryThreads(2, "test-query")
    try:
        assert [pool.submit(pow, 2, n).result(timeout=5) for n in range(4)] == [1, 2, 4, 8]
        with pytest.raises(ZeroDivisionError):
            pool.submit(divmod, 1, 0).result(timeout=5)
    finally:
        pool.shutdown(wait=True)
    with pytest.raises(RuntimeError):
        pool.submit(int)


def test_an_expensive_query_runs_at_a_lower_priority_and_a_cheap_one_does_not() -> None:
    def run() -> tuple[int, int, int, int, bool]:
        admission = lanes(10)
        before = nice_of_this_thread()
        with admission.admitted(10, None, None):
            cheap = nice_of_this_thread()
        with admission.admitted(5000, None, None):
            expensive = nice_of_this_thread()
        return before, cheap, expensive, nice_of_this_thread(), thread_must_retire()

    before, cheap, expensive, after, retire = in_thread(run)
    assert (cheap, expensive) == (before, min(19, before + 10))
    # Back at its priority, or, unprivileged, marked for its pool to replace it.
    assert after == before or (retire and after == expensive)


def test_expensive_nice_zero_leaves_the_priority_alone() -> None:
    def run() -> tuple[int, int]:
        before = nice_of_this_thread()
        with lanes(0).admitted(5000, None, None):
            return before, nice_of_this_thread()

    before, during = in_thread(run)
    assert during == before


SCRIPT = textwrap.dedent("""
    import threading
    from pathlib import Path
    from app.server.query_threads import QueryThreads
    from app.tsdb.admission import lowered_priority

    def nice():
        stat = Path(f"/proc/self/task/{threading.get_native_id()}/stat").read_text()
        return threading.get_native_id(), int(stat.rsplit(")", 1)[1].split()[16])

    def expensive():
        with lowered_priority(10):
            return nice()

    pool = QueryThreads(1, "q")
    print((pool.submit(expensive).result(5), pool.submit(nice).result(5), nice()[1]))
""")


def test_an_unprivileged_thread_left_at_a_lower_priority_is_replaced() -> None:
    command = [sys.executable, "-c", SCRIPT]
    if os.geteuid() == 0:  # root: run it without CAP_SYS_NICE, as an ordinary user would
        if shutil.which("setpriv") is None:
            pytest.skip("root, and no setpriv to drop CAP_SYS_NICE")
        command = ["setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice", *command]
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=30).stdout
    (first_tid, first_nice), (second_tid, second_nice), main_nice = ast.literal_eval(out)
    assert first_nice == min(19, main_nice + 10)
    assert second_tid != first_tid and second_nice == main_nice
