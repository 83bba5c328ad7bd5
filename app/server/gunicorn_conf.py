"""gunicorn settings for pytsd; the top-level ``gunicorn.conf.py`` imports this module.

Address, port and worker count come from pytsd's settings (``tsd.network.*``: ``TSD_*``
variables or the ``TSD_CONFIG`` file); gunicorn's own variables below, and
``GUNICORN_CMD_ARGS``, still override them. The timeouts and caps of each connection are
pytsd settings too (docs/serving.md), read by the worker itself.
"""

import os

from app.config import load_config

_config = load_config()

# 127.0.0.1 unless told otherwise: the Docker image sets TSD_NETWORK_BIND=0.0.0.0.
bind = [os.environ.get("GUNICORN_BIND",
                       f"{_config['tsd.network.bind']}:{_config['tsd.network.port']}")]
if _config["tsd.network.telnet_port"]:  # the line protocol alone (the worker knows the port)
    bind.append(f"{_config['tsd.network.bind']}:{_config['tsd.network.telnet_port']}")

# WEB_CONCURRENCY is the variable gunicorn and most platforms already use for this.
workers = int(os.environ.get("WEB_CONCURRENCY", str(_config["tsd.network.worker_threads"])))
worker_class = "app.server.worker.TsdWorker"

# Each worker opens its own HBase Thrift connections inside create_app(); loading the app
# before forking would share those sockets between processes.
preload_app = False

# The event loop, not the request threads, tells the arbiter a worker is alive, so this only
# fires when a worker's loop itself hangs; query deadlines are tsd.query.timeout's job.
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "30"))
# In-flight requests get this long to finish on a graceful stop or reload.
graceful_timeout = int(os.environ.get("GUNICORN_GRACEFUL_TIMEOUT", "30"))

# Recycle workers now and then so a slow leak cannot grow without bound; jitter avoids
# restarting every worker at once.
max_requests = int(os.environ.get("GUNICORN_MAX_REQUESTS", "10000"))
max_requests_jitter = max_requests // 10

# Logs go to stdout/stderr, where `docker compose logs` and journald pick them up.
# GUNICORN_ACCESSLOG="" turns the access log off.
accesslog = os.environ.get("GUNICORN_ACCESSLOG", "-") or None
errorlog = "-"
loglevel = os.environ.get("GUNICORN_LOGLEVEL", "info")

# Worker heartbeat files on tmpfs: a container's overlay filesystem can stall them.
if os.path.isdir("/dev/shm"):
    worker_tmp_dir = "/dev/shm"

# gunicorn >= 25.1 opens a control socket at one fixed path per user
# ($XDG_RUNTIME_DIR/gunicorn.ctl): two pytsd instances would fight over it. pytsd has no use
# for it (reload and stop are signals), so it stays off.
control_socket_disable = True

# Trust X-Forwarded-* only from a proxy on the same host unless told otherwise.
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")

# One directory per server for what its workers share (app/observe/): the counters of
# /metrics and /api/stats, the completed queries of /api/stats/query. Made here, in the
# arbiter, before any worker imports prometheus_client (which reads the variable once); a
# reload (SIGHUP re-runs this file) keeps it, so counters survive worker restarts.
if not os.environ.get("PYTSD_RUN_DIR"):
    import tempfile

    # On tmpfs when there is one: every query and counter touches these files.
    os.environ["PYTSD_RUN_DIR"] = tempfile.mkdtemp(
        prefix="pytsd-run-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    os.environ["PYTSD_RUN_DIR_MADE"] = "1"  # ours to remove on exit
    os.makedirs(os.path.join(os.environ["PYTSD_RUN_DIR"], "metrics"))
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR",
                          os.path.join(os.environ["PYTSD_RUN_DIR"], "metrics"))


def child_exit(server, worker):  # type: ignore[no-untyped-def]
    from app.observe.metrics import worker_exited

    worker_exited(worker.pid)
    # A worker killed or exited without leaving its slot: its connections per address
    # (tsd.core.connections.per_ip_limit) must not count against the server any more.
    shares = getattr(server.worker_class, "shares", None)
    if shares is not None:
        shares.forget(worker.pid)


def on_exit(server):  # type: ignore[no-untyped-def]
    import shutil

    if os.environ.get("PYTSD_RUN_DIR_MADE"):
        shutil.rmtree(os.environ["PYTSD_RUN_DIR"], ignore_errors=True)
