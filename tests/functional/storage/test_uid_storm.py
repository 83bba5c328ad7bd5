"""A storm of concurrent UID creation: several OS processes, several threads each, all
creating the same new names at once, on every backend. What OpenTSDB's UniqueId leaves behind
after such a storm (an orphan reverse mapping per lost race, which ``uid fsck`` reports) pytsd
must not: every name gets one UID that every process agrees on, and fsck finds 0 errors."""

from __future__ import annotations

import multiprocessing
import random
import threading
from pathlib import Path
from typing import Any

from app.config import load_config
from app.tsdb import TSDB
from app.tsdb.uid import KINDS
from app.tsdb.uid_fsck import fsck

PROCESSES = 3
THREADS = 4
NAMES = [f"storm.{i:03d}" for i in range(200)]


def _create_all(config: dict[str, Any], seed: int, barrier: Any, queue: Any) -> None:
    """One pytsd process: ``THREADS`` threads each creating every name of every kind, in an
    order of their own, started together with the other processes."""
    tsdb = TSDB(load_config(config, environ={}))
    tsdb.uid_table()  # connect before the start line, so the storm starts at once
    found: list[dict[str, dict[str, str]]] = []
    failures: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def create(thread_seed: int) -> None:
        order = [(kind, name) for kind in KINDS for name in NAMES]
        random.Random(thread_seed).shuffle(order)
        mine: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}
        start.wait()
        try:
            for kind, name in order:
                mine[kind][name] = tsdb.uids[kind].get_or_create_id(name).hex()
        except BaseException as exc:  # reported to the test, not lost in a thread
            failures.append(exc)
        found.append(mine)

    threads = [threading.Thread(target=create, args=(seed * 100 + n,)) for n in range(THREADS)]
    barrier.wait(timeout=120)
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    queue.put({"found": found, "failures": [repr(exc) for exc in failures],
               "burned": {kind: tsdb.uids[kind].ids_burned for kind in KINDS}})


def test_concurrent_creation_leaves_no_fsck_error(
        tsd_config: dict[str, Any], tsdb: TSDB, tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    barrier = context.Barrier(PROCESSES)
    workers = [context.Process(target=_create_all, args=(tsd_config, seed, barrier, queue))
               for seed in range(PROCESSES)]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=240) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    assert [result["failures"] for result in results] == [[]] * PROCESSES
    answers = [mine for result in results for mine in result["found"]]
    assert len(answers) == PROCESSES * THREADS
    tsdb.drop_caches()
    for kind in KINDS:
        agreed = {name: {answer[kind][name] for answer in answers} for name in NAMES}
        assert {name: len(uids) for name, uids in agreed.items()} == dict.fromkeys(NAMES, 1)
        uids = {name: bytes.fromhex(next(iter(found))) for name, found in agreed.items()}
        assert len(set(uids.values())) == len(NAMES)  # no two names share a UID
        for name, uid in uids.items():
            assert tsdb.uids[kind].get_id(name) == uid
            assert tsdb.uids[kind].get_name(uid) == name
    report = fsck(tsdb)
    assert report.errors == []
    # Every UID a lost race took stays taken (MAXID only grows) but its reverse row is gone:
    # what is left is fsck's "Max ID ... Maybe N IDs were deleted?" warning, one per kind at
    # most, and the burned UIDs the processes counted are exactly MAXID beyond the names.
    burned = {kind: sum(result["burned"][kind] for result in results) for kind in KINDS}
    assert report.burned == {kind: burned[kind] for kind in KINDS}
    for kind in KINDS:
        assert tsdb.uids[kind].max_id() == len(NAMES) + burned[kind]
    assert all(warning.startswith("Max ID for ") for warning in report.warnings)
