"""How the HBase backend turns Thrift and HBase failures into pytsd's storage errors.

Two families of failure reach the adapter:

* transport failures (``TTransportException``, ``OSError``, an exhausted connection pool): the
  Thrift gateway cannot be reached or the socket broke. These are 503s: retrying later may work.
* exceptions HBase raises through the gateway (``IOError``, ``IllegalArgument``, ...). Their
  message is a Java exception with its stack trace; only its first line is kept, so no stack
  trace ever reaches a client. Region-server trouble behind a healthy gateway is a 503 too;
  anything else is a 500.
"""

from __future__ import annotations

from thriftpy2.thrift import TException
from thriftpy2.transport import TTransportException

from app.errors import StorageError, StorageUnavailableError, TablesMissingError

# Java exception names that mean "HBase cannot serve this right now", not "this is wrong".
UNAVAILABLE_MARKERS = (
    "RetriesExhausted", "NotServingRegion", "RegionOffline", "RegionTooBusy",
    "NoServerForRegion", "ServerNotRunningYet", "PleaseHold", "CallQueueTooBig",
    "CallTimeout", "SocketTimeout", "ConnectException", "MasterNotRunning",
    "RegionServerStopped", "ServerTooBusy",
)
# The gateway forgets a scanner after its lease; the scan is reopened where it stopped.
LOST_SCANNER_MARKERS = ("scanner ID is invalid", "UnknownScanner", "ScannerTimeout",
                        "LeaseException")


def first_line(exc: BaseException) -> str:
    """The exception's message without a Java stack trace (HBase sends ``bytes``)."""
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    if isinstance(message, bytes):
        message = message.decode("utf-8", "replace")
    return str(message).strip().splitlines()[0] if str(message).strip() else type(exc).__name__


def is_transport_error(exc: BaseException) -> bool:
    """True for failures of the connection itself (the request may not have reached HBase)."""
    return isinstance(exc, TTransportException | OSError)


def is_timeout(exc: BaseException) -> bool:
    """A socket timeout: HBase is slow, so retrying would only double the wait."""
    if isinstance(exc, TimeoutError):
        return True
    return isinstance(exc, TTransportException) and exc.type == TTransportException.TIMED_OUT


def is_lost_scanner(exc: BaseException) -> bool:
    return isinstance(exc, TException) and any(
        marker in first_line(exc) for marker in LOST_SCANNER_MARKERS)


def unavailable(address: str, op: str, exc: BaseException) -> StorageUnavailableError:
    """A 503 for a gateway that cannot be reached, timed out, or has no free connection."""
    if is_timeout(exc):
        reason = "did not answer in time"
    else:
        reason = "cannot be reached"
    return StorageUnavailableError(
        f"HBase is unavailable: the Thrift server at {address} {reason} ({op})",
        first_line(exc))


def hbase_error(address: str, op: str, exc: BaseException) -> StorageError:
    """An exception raised by HBase behind the gateway, as a 503 or a 500."""
    line = first_line(exc)
    if any(marker in line for marker in UNAVAILABLE_MARKERS):
        return StorageUnavailableError(
            f"HBase is unavailable: its region servers did not serve the request ({op})", line)
    if "TableNotFoundException" in line:
        table = line.rpartition(": ")[2] or "?"
        return TablesMissingError(table, f"HBase failed to {op}: {line}")
    if "NamespaceNotFoundException" in line:
        return StorageError(f"HBase namespace not found ({op})",
                            f"{line}. Create it in the HBase shell: create_namespace '<name>'")
    return StorageError(f"HBase failed to {op} (Thrift server at {address})", line)
