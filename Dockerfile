# pytsd: the OpenTSDB-compatible HTTP API under gunicorn.
#   docker build -t pytsd .
#   docker run -p 4242:4242 -v pytsd-data:/data pytsd          # embedded store in /data
#   docker run -p 4242:4242 -e TSD_STORAGE=hbase://hbase:9090 pytsd
# Settings are OpenTSDB keys as TSD_* variables (docs/configuration.md); gunicorn's are in
# gunicorn.conf.py (WEB_CONCURRENCY, GUNICORN_TIMEOUT, ...).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: install pytsd and its dependencies into a virtualenv -------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# Only what the wheel needs; tests, docs and the Grafana files stay out of the image.
COPY pyproject.toml README.md ./
COPY app ./app
COPY plugin ./plugin
# The project itself, not a registry package: its dependency ranges live in pyproject.toml.
# hadolint ignore=DL3013
RUN pip install ".[hbase]"

# ---- runtime ---------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="pytsd" \
      org.opencontainers.image.description="OpenTSDB-compatible time-series server" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TSD_STORAGE=sqlite:////data/pytsd.db \
    TSD_NETWORK_BIND=0.0.0.0
# A fixed uid so volume ownership is predictable across rebuilds; a named volume mounted on
# /data (the embedded store) inherits the owner set here.
RUN groupadd --system --gid 10001 pytsd \
 && useradd --system --uid 10001 --gid pytsd --home-dir /srv/pytsd --create-home pytsd \
 && mkdir /data \
 && chown pytsd:pytsd /data
COPY --from=build /opt/venv /opt/venv
WORKDIR /srv/pytsd
COPY wsgi.py gunicorn.conf.py ./
# Numeric, so the runtime need not resolve the name (and Kubernetes' runAsNonRoot can check it).
USER 10001:10001
EXPOSE 4242
# The slim image has no curl; python's urllib is enough (non-2xx raises, so exit 1).
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:4242/api/version', timeout=4)"]
CMD ["gunicorn", "--config", "gunicorn.conf.py", "wsgi:application"]
