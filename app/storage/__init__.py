"""Storage backends, picked by the ``tsd.storage`` URL."""

from __future__ import annotations

from urllib.parse import urlparse

from app.config import Config
from app.errors import TsdbError
from app.storage.base import Store


def open_store(config: Config) -> Store:
    """Open the backend named by ``tsd.storage`` (``sqlite:///path`` or ``hbase://host:port``)."""
    url = config["tsd.storage"]
    parsed = urlparse(url)
    if parsed.scheme == "sqlite":
        from app.storage.sqlite import SqliteStore

        path = url[len("sqlite://"):]
        if not path or path == "/":
            raise TsdbError(f"Invalid tsd.storage URL: {url}", "Use sqlite:///absolute/path.db")
        return SqliteStore(path, synchronous=config["tsd.storage.sqlite.synchronous"])
    if parsed.scheme == "hbase":
        try:
            from app.storage.hbase import HBaseStore
        except ImportError as exc:
            raise TsdbError("The HBase backend needs happybase",
                            "Install it with: pip install 'pytsd[hbase]'") from exc
        return HBaseStore.from_config(config)
    raise TsdbError(f"Unknown storage backend in tsd.storage: {url}",
                    "Use sqlite:///path.db or hbase://host:port")
