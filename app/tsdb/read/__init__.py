"""The read path of a sub-query, as parts: the keys to read (``keys``), the row sources
(storage scan and hour cache in ``rows``, closed ranges in ``app.tsdb.closed_range``, rollup
tables in ``app.tsdb.rollup_reader``, the split helper's half in ``app.tsdb.split``), one
decode (``decode``), the fused decode-and-downsample (``fused``) and the combination of them
for one sub-query (``series``). ARCHITECTURE.md draws it."""
