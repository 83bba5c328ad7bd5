"""The orjson-backed dps renderer prints byte for byte what the pure-Python one printed.

The oracle is a frozen copy of the previous renderer (``tests/reference/serialize_v1.py``);
series are generated over every kind of value the serializer distinguishes: integers (small,
huge, exact 64-bit), doubles in Java's positional and scientific ranges, signed zeros, NaN,
infinities, mixed int/double points, ms and second keys, arrays, null fill. The functional
side (every query case through the app, both renderers) is in
``tests/functional/test_serialize_parity.py``.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from app.api import serialize
from tests.reference import serialize_v1

DOUBLES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-1e7, max_value=1e7),
    st.floats(min_value=1e-5, max_value=1e-2),
    st.floats(min_value=1e6, max_value=1e17),
    st.sampled_from([0.0, -0.0, 1e-3, 1e7, 9999999.999999998, 1e16, 5e-324, 1.7976931348623157e308,
                     float("nan"), 0.1, 2.5, 301.0]),
)
LONGS = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@st.composite
def series(draw: st.DrawFn) -> dict[str, object]:
    size = draw(st.integers(min_value=0, max_value=40))
    seconds = draw(st.booleans())
    stamps = sorted(draw(st.lists(st.integers(min_value=-(2**40), max_value=2**42),
                                  min_size=size, max_size=size, unique=True)))
    ts_ms = np.array(stamps, dtype=np.int64) * (1000 if seconds else 1)
    kind = draw(st.sampled_from(["double", "int", "long", "mixed"]))
    long_values = None
    int_mask = None
    if kind == "double":
        values = np.array(draw(st.lists(DOUBLES, min_size=size, max_size=size)), np.float64)
    else:
        longs = draw(st.lists(LONGS if kind == "long" else st.integers(-10**6, 10**6),
                              min_size=size, max_size=size))
        values = np.array(longs, dtype=np.float64)
        if kind == "long":
            long_values = np.array(longs, dtype=np.int64)
        if kind == "mixed":
            int_mask = np.array(draw(st.lists(st.booleans(), min_size=size, max_size=size)),
                                dtype=bool)
            doubles = draw(st.lists(DOUBLES, min_size=size, max_size=size))
            values = np.where(int_mask, values, np.array(doubles, np.float64))
    bounds = sorted(draw(st.lists(st.integers(-(2**43), 2**43), min_size=2, max_size=2)))
    return {"ts_ms": ts_ms, "values": values, "is_int": kind in ("int", "long"),
            "start_ms": bounds[0], "end_ms": bounds[1], "ms_resolution": draw(st.booleans()),
            "arrays": draw(st.booleans()), "null_for_nan": draw(st.booleans()),
            "int_mask": int_mask, "long_values": long_values}


@settings(max_examples=600, deadline=None)
@given(series())
def test_render_dps_is_byte_identical(case: dict[str, object]) -> None:
    ts_ms, values, is_int = case.pop("ts_ms"), case.pop("values"), case.pop("is_int")
    # Both cast the double points of a mixed series to int64 before masking them out
    # (numpy warns for huge ones); the warning is not what is compared.
    with np.errstate(invalid="ignore", over="ignore"):
        expected = serialize_v1.render_dps(ts_ms, values, is_int, **case)  # type: ignore[arg-type]
        actual = serialize.render_dps(ts_ms, values, is_int, **case)  # type: ignore[arg-type]
    assert actual == expected


def test_a_shared_grid_is_formatted_once_and_stays_right() -> None:
    cache = serialize.KeyCache()
    grid = np.arange(0, 60_000 * 1440, 60_000, dtype=np.int64) + 1_700_000_000_000
    rng = np.random.default_rng(7)
    for _ in range(5):
        values = np.round(rng.uniform(-1e9, 1e9, grid.size), 3)
        expected = serialize_v1.render_dps(grid, values, False, start_ms=0, end_ms=2**62)
        assert serialize.render_dps(grid, values, False, start_ms=0, end_ms=2**62,
                                    key_cache=cache) == expected
    assert len(cache._keys) == 1
