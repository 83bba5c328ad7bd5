"""The domain error hierarchy.

Every error a user can cause is a :class:`TsdbError` carrying the HTTP status OpenTSDB answers with.
Nothing here imports Flask: ``app/api/errors.py`` is the one place that turns these into
OpenTSDB's ``{"error": {"code", "message", "details"}}`` responses.
"""

from __future__ import annotations


class TsdbError(Exception):
    """Base class: a message for the user, optional details, and an HTTP status code."""

    code = 500

    def __init__(self, message: str, details: str | None = None, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        if code is not None:
            self.code = code


class BadRequestError(TsdbError):
    """The request is malformed or names something invalid (OpenTSDB's BadRequestException)."""

    code = 400


class NotFoundError(TsdbError):
    """The endpoint or object does not exist."""

    code = 404


class MethodNotAllowedError(TsdbError):
    """The endpoint exists but not for this HTTP verb."""

    code = 405


class NoSuchUniqueName(BadRequestError):
    """A name has no UID: OpenTSDB's ``No such name for 'metrics': 'x'``."""

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f"No such name for '{kind}': '{name}'")
        self.kind = kind
        self.name = name


class NoSuchUniqueId(TsdbError):
    """A stored UID has no reverse mapping (a corrupt or partially written UID table)."""

    def __init__(self, kind: str, uid: bytes) -> None:
        super().__init__(f"No such unique ID for '{kind}': {uid.hex().upper()}")
        self.kind = kind
        self.uid = uid


class UidExhaustedError(TsdbError):
    """The UID space of one kind is full for its configured width."""

    code = 400


class QueryLimitError(TsdbError):
    """A query would read more than the configured limits allow (OpenTSDB's 413)."""

    code = 413


class QueryTimeoutError(TsdbError):
    """A query ran longer than ``tsd.query.timeout``."""

    code = 408


class StorageError(TsdbError):
    """The storage backend failed; wraps backend exceptions so they never leak to clients."""

    code = 500


class StorageUnavailableError(StorageError):
    """The storage backend cannot be reached right now."""

    code = 503


class TablesMissingError(StorageError):
    """OpenTSDB's tables do not exist on HBase: the server is up but not set up (503)."""

    code = 503

    def __init__(self, table: str, details: str | None = None) -> None:
        super().__init__(
            f"Table not found: {table}. Create OpenTSDB's tables with `pytsd create-tables`",
            details or "Like OpenTSDB, pytsd does not create tables on HBase by itself; "
            "`pytsd create-tables` (or OpenTSDB's create_table.sh) makes tsdb, tsdb-uid, "
            "tsdb-tree and tsdb-meta")
        self.table = table
