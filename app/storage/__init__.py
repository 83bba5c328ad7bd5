"""Storage backends, picked by the ``tsd.storage`` URL."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from app.config import Config
from app.errors import TsdbError
from app.storage.base import Store

SQLITE_PREFIX = "sqlite:///"
SQLITE_FORMS = "sqlite:///relative/path.db (from the working directory) or sqlite:////abs/path.db"


def sqlite_path(url: str, cwd: Path | None = None) -> Path:
    """The file a ``sqlite:`` URL names, by SQLAlchemy's convention.

    ``sqlite:///data/x.db`` is relative to the working directory and ``sqlite:////srv/x.db`` is
    absolute: three slashes end the (empty) host, whatever follows is the path as written.
    """
    if not url.startswith(SQLITE_PREFIX):
        raise TsdbError(f"Invalid tsd.storage URL: {url}", f"Use {SQLITE_FORMS}")
    path = url[len(SQLITE_PREFIX):]
    if not path or path.endswith("/") or path == ":memory:" or "?" in path:
        raise TsdbError(f"Invalid tsd.storage URL: {url}",
                        f"Name a database file: {SQLITE_FORMS}")
    return (cwd or Path.cwd()) / path  # an absolute path wins over cwd in the join


def embedded(config: Config) -> bool:
    """Whether ``tsd.storage`` names the embedded store (its ``tsd.storage.sqlite.*``
    settings apply)."""
    return urlparse(config["tsd.storage"]).scheme == "sqlite"


def describe_storage(config: Config) -> str:
    """Where the data lives, for a startup log line (the embedded store's resolved file)."""
    url = config["tsd.storage"]
    if embedded(config):
        return f"embedded store {sqlite_path(url)} ({url})"
    return f"{url}, table prefix {config['tsd.storage.hbase.table_prefix']!r}"


def open_store(config: Config) -> Store:
    """Open the backend named by ``tsd.storage`` (``sqlite:///path`` or ``hbase://host:port``)."""
    url = config["tsd.storage"]
    parsed = urlparse(url)
    if parsed.scheme == "sqlite":
        from app.storage.sqlite import SqliteStore

        return SqliteStore(sqlite_path(url), synchronous=config["tsd.storage.sqlite.synchronous"],
                           page_size=config["tsd.storage.sqlite.page_size"],
                           pack_cells=config["tsd.storage.sqlite.pack_cells"])
    if parsed.scheme == "hbase":
        try:
            from app.storage.hbase import HBaseStore
        except ImportError as exc:
            raise TsdbError("The HBase backend needs happybase",
                            "Install it with: pip install 'pytsd[hbase]'") from exc
        return HBaseStore.from_config(config)
    raise TsdbError(f"Unknown storage backend in tsd.storage: {url}",
                    f"Use {SQLITE_FORMS}, or hbase://host:port")
