"""How HBase's exceptions become pytsd's storage errors (app/storage/hbase_errors.py).

The messages are shaped like what HBase 2.6's Thrift1 gateway sends: the Java exception's
``toString()`` followed by its stack trace, as bytes.
"""

from __future__ import annotations

import happybase  # noqa: F401 - registers the Hbase_thrift module
import pytest
from Hbase_thrift import IllegalArgument
from Hbase_thrift import IOError as HBaseIOError
from thriftpy2.transport import TTransportException

from app.errors import StorageError, StorageUnavailableError, TablesMissingError
from app.storage import hbase_errors

TRACE = b"\n\tat org.apache.hadoop.hbase.client.ConnectionImplementation.locateRegion(X.java:1)"


def test_only_the_first_line_of_a_java_exception_is_kept() -> None:
    exc = HBaseIOError(message=b"org.apache.hadoop.hbase.TableNotFoundException: t_tsdb" + TRACE)
    error = hbase_errors.hbase_error("h:9090", "get row of tsdb", exc)
    assert type(error) is TablesMissingError
    assert error.code == 503
    assert error.message == ("Table not found: t_tsdb. "
                             "Create OpenTSDB's tables with `pytsd create-tables`")
    assert error.details == ("HBase failed to get row of tsdb: "
                             "org.apache.hadoop.hbase.TableNotFoundException: t_tsdb")


@pytest.mark.parametrize("java", [
    b"org.apache.hadoop.hbase.client.RetriesExhaustedException: Failed after attempts=16",
    b"org.apache.hadoop.hbase.NotServingRegionException: region is not online",
])
def test_region_server_trouble_is_a_503(java: bytes) -> None:
    error = hbase_errors.hbase_error("h:9090", "scan tsdb", HBaseIOError(message=java + TRACE))
    assert isinstance(error, StorageUnavailableError)
    assert error.code == 503
    assert error.details == java.decode()


def test_other_hbase_errors_are_a_500_naming_the_operation() -> None:
    exc = IllegalArgument(message=b"java.lang.IllegalArgumentException: bad column")
    error = hbase_errors.hbase_error("h:9090", "write to tsdb", exc)
    assert (type(error), error.message, error.details) == (
        StorageError, "HBase failed to write to tsdb (Thrift server at h:9090)",
        "java.lang.IllegalArgumentException: bad column")


def test_transport_failures_and_timeouts() -> None:
    eof = TTransportException(type=TTransportException.END_OF_FILE,
                              message="TSocket read 0 bytes")
    timeout = TTransportException(type=TTransportException.TIMED_OUT, message="timed out")
    assert hbase_errors.is_transport_error(eof) and not hbase_errors.is_timeout(eof)
    assert hbase_errors.is_timeout(timeout) and hbase_errors.is_timeout(TimeoutError())
    assert hbase_errors.is_transport_error(ConnectionResetError())
    assert not hbase_errors.is_transport_error(HBaseIOError(message=b"x"))
    assert hbase_errors.unavailable("h:1", "scan tsdb", eof).message == (
        "HBase is unavailable: the Thrift server at h:1 cannot be reached (scan tsdb)")
    assert "did not answer in time" in hbase_errors.unavailable("h:1", "op", timeout).message


def test_lost_scanners_are_recognised() -> None:
    assert hbase_errors.is_lost_scanner(IllegalArgument(message=b"scanner ID is invalid"))
    assert hbase_errors.is_lost_scanner(HBaseIOError(
        message=b"org.apache.hadoop.hbase.UnknownScannerException: Unknown scanner 'x'"))
    assert not hbase_errors.is_lost_scanner(HBaseIOError(message=b"something else"))
