"""``parallel.ahead``: work started ahead on worker threads, handed back in order."""

from __future__ import annotations

import threading

import pytest

from app.tsdb import parallel


@pytest.fixture(params=[1, 2])
def threads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(parallel, "THREADS", request.param)
    return int(request.param)


def test_results_come_back_in_order(threads: int) -> None:
    release = threading.Event()

    def work(n: int) -> int:
        if n == 0 and threads > 1:  # the first finishes last: order must not follow completion
            assert release.wait(5)
        elif n == 2:
            release.set()
        return n * 10

    assert list(parallel.ahead(work, [0, 1, 2, 3, 4])) == [0, 10, 20, 30, 40]


def test_work_runs_on_another_thread_only_with_two_threads(threads: int) -> None:
    names = list(parallel.ahead(lambda _: threading.current_thread().name, range(4)))
    on_workers = [name.startswith("decode") for name in names]
    assert on_workers == [threads > 1] * 4


def test_an_items_error_is_raised_at_its_turn(threads: int) -> None:
    def work(n: int) -> int:
        if n == 2:
            raise ValueError("item 2")
        return n

    got = []
    with pytest.raises(ValueError, match="item 2"):
        for result in parallel.ahead(work, range(5)):
            got.append(result)
    assert got == [0, 1]


def test_closing_early_does_not_start_the_rest(threads: int) -> None:
    started: list[int] = []
    lock = threading.Lock()

    def work(n: int) -> int:
        with lock:
            started.append(n)
        return n

    results = parallel.ahead(work, range(100))
    assert next(results) == 0
    results.close()
    # at most THREADS items were started beyond the one handed back
    assert len(started) <= 1 + threads
