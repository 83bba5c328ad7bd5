"""The embedded store's syncer: a process that syncs one WAL file to disk when asked.

Run as a script (``python -I -S sqlite_syncer.py WAL_PATH``) by :mod:`app.storage.sqlite_sync`,
one per serving process: it reads a request from its standard input, syncs the file, and
writes :data:`REPLY` to its standard output: 0, or the ``errno`` of a failed sync. Being a
process of its own, it never takes the server's GIL, where a thread that synced took it two
or three times a sync (docs/performance.md).
It imports the standard library alone, so that it starts in a few milliseconds, and exits
when its standard input closes (its worker is gone).
"""

from __future__ import annotations

import errno
import os
import struct
import sys

REPLY = struct.Struct("=i")  # 0: synced; else the errno of the failed sync
ASK = b"s"  # one request: sync the file now


def sync(wal_path: str) -> int:
    """Sync ``wal_path``'s data to disk; 0, or the failure's errno. A WAL that does not
    exist is synced: every commit in it was checkpointed into the synced database file."""
    try:
        fd = os.open(wal_path, os.O_RDONLY)
    except FileNotFoundError:
        return 0
    except OSError as exc:
        return exc.errno or errno.EIO
    try:
        os.fdatasync(fd)
        return 0
    except OSError as exc:
        return exc.errno or errno.EIO
    finally:
        os.close(fd)


def serve(wal_path: str, requests_fd: int, replies_fd: int) -> None:
    """Answer each request with a sync begun after it arrived, until the requests end
    (its asker has one request at a time under way)."""
    while os.read(requests_fd, len(ASK)):
        os.write(replies_fd, REPLY.pack(sync(wal_path)))


if __name__ == "__main__":
    serve(sys.argv[1], sys.stdin.fileno(), sys.stdout.fileno())
