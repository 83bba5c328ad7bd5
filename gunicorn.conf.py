"""Gunicorn settings for pytsd: ``gunicorn --config gunicorn.conf.py wsgi:application``.

Every value can be overridden from the environment (variables below) or with gunicorn's own
``GUNICORN_CMD_ARGS``. The Docker image uses this file unchanged.
"""

import os

# 0.0.0.0 because the server runs in a container or behind a proxy; OpenTSDB's port.
bind = os.environ.get("GUNICORN_BIND", "0.0.0.0:4242")

# Sync workers: queries are CPU-bound numpy work, so threads would only contend for the GIL.
# WEB_CONCURRENCY is the variable gunicorn and most platforms already use for this.
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = "sync"

# Each worker opens its own HBase Thrift connections inside create_app(); loading the app
# before forking would share those sockets between processes.
preload_app = False

# A long dashboard query may legitimately take tens of seconds; beyond this the worker is
# killed and restarted (Grafana shows the 502 rather than hanging forever).
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "120"))
graceful_timeout = int(os.environ.get("GUNICORN_GRACEFUL_TIMEOUT", "30"))
# Grafana's proxy reuses connections between panel refreshes.
keepalive = int(os.environ.get("GUNICORN_KEEPALIVE", "5"))

# Recycle workers now and then so a slow leak cannot grow without bound; jitter avoids
# restarting every worker at once.
max_requests = int(os.environ.get("GUNICORN_MAX_REQUESTS", "10000"))
max_requests_jitter = max_requests // 10

# Logs go to stdout/stderr, where `docker compose logs` and journald pick them up.
accesslog = os.environ.get("GUNICORN_ACCESSLOG", "-")
errorlog = "-"
loglevel = os.environ.get("GUNICORN_LOGLEVEL", "info")
# Combined log format plus the request duration in milliseconds (%(M)s).
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms "%(f)s" "%(a)s"'

# Worker heartbeat files on tmpfs: a container's overlay filesystem can stall them.
if os.path.isdir("/dev/shm"):
    worker_tmp_dir = "/dev/shm"

# Trust X-Forwarded-* only from a proxy on the same host unless told otherwise.
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
