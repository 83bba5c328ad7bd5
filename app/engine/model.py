"""Values the engine works on: per-series numpy arrays in, per-group results out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

Int64Array = npt.NDArray[np.int64]
Float64Array = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass
class Series:
    """One time series as read from storage, decoded.

    ``ts_ms`` is strictly ascending; ``is_int[i]`` says whether point i was stored as an integer
    (OpenTSDB prints integer results only when every contributing point is an integer).
    ``long_values`` holds the exact 64-bit value of integer points (0 elsewhere); leave it None
    when every integer fits a double exactly (|v| < 2**53). Without ``tag_uids`` the engine takes
    ``tags`` to be in row-key (tagk UID) order.
    """

    tsuid: str
    tags: dict[str, str]
    ts_ms: Int64Array
    values: Float64Array
    is_int: BoolArray
    annotations: list[dict[str, Any]] = field(default_factory=list)
    long_values: Int64Array | None = None
    # Storage order, which fixes OpenTSDB's result order: the row key without its base time
    # (salt, metric UID, tag UIDs) and each tag's (tagk UID, tagv UID).
    row_order: bytes = b""
    tag_uids: dict[str, tuple[bytes, bytes]] = field(default_factory=dict)


@dataclass
class GroupResult:
    """One element of the ``/api/query`` response array, before serialisation.

    ``values`` may hold NaN: with fill policy ``null`` it is printed as JSON ``null``,
    otherwise as OpenTSDB's ``NaN``. ``is_int`` is True when the group prints integers.
    OpenTSDB decides integer-or-double per point (§4.5): when ``int_mask`` is set, point i prints
    as an integer iff ``int_mask[i]``, using ``long_values[i]`` (exact 64-bit) when that is set.
    ``json_null`` is True when NaN prints as ``null`` (fill policy ``null``).
    """

    metric: str
    tags: dict[str, str]
    aggregate_tags: list[str]
    tsuids: list[str]
    ts_ms: Int64Array
    values: Float64Array
    is_int: bool
    query_index: int
    annotations: list[dict[str, Any]] = field(default_factory=list)
    int_mask: BoolArray | None = None
    long_values: Int64Array | None = None
    json_null: bool = False
    # Printed as "annotations": [] when empty (OpenTSDB's /api/query/gexp series arithmetic)
    show_empty_annotations: bool = False
