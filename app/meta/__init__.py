"""OpenTSDB 2.4's meta data: TSMeta, UIDMeta (``codec.py`` pure; the rest over a TSDB)."""
