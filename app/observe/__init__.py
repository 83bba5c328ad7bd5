"""What pytsd tells about itself: counters and metrics shared by a server's workers, the
queries running and completed, and the state of the store. The API, the line protocol and the
server all report here; nothing here imports them."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs on this host (a worker of the server, say): a
    signal 0 it may refuse us (another user's) still proves it exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
