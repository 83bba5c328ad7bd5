"""TSUIDs as the API sees them: hex text in, checked bytes and tag names out."""

from __future__ import annotations

from app.errors import BadRequestError
from app.storage.codec import RowKeyLayout
from app.tsdb import TSDB

TSUID_FORMAT = ("A TSUID is the hex metric UID followed by tagk/tagv UID pairs of the "
                "configured widths")


def parse_tsuid(layout: RowKeyLayout, text: str, require_tags: bool = False) -> bytes:
    """The bytes of a hex TSUID made of whole UIDs; :class:`BadRequestError` otherwise."""
    try:
        tsuid = bytes.fromhex(text)
        layout.row_key_from_tsuid(tsuid, 0)  # checks the UID widths
    except ValueError:
        raise BadRequestError(f"Invalid TSUID: {text}", TSUID_FORMAT) from None
    if require_tags and len(tsuid) == layout.metric_width:
        raise BadRequestError(f"Invalid TSUID: {text}", "A TSUID needs at least one tag pair")
    return tsuid


def tsuid_tags(tsdb: TSDB, tsuid: bytes) -> dict[str, str]:
    """The tag names of a TSUID, in its (tagk UID) order; raises NoSuchUniqueId."""
    layout = tsdb.layout
    pair = layout.tagk_width + layout.tagv_width
    return {tsdb.tagk.get_name(tsuid[i:i + layout.tagk_width]):
            tsdb.tagv.get_name(tsuid[i + layout.tagk_width:i + pair])
            for i in range(layout.metric_width, len(tsuid), pair)}
