"""The read path of a sub-query, as parts: the plan made once (``plan``: hours, buckets,
fused or not) and the keys to read (``keys``); the row sources (storage scan and hour cache in
``rows`` with ``cached`` and ``keep``, closed ranges in ``app.tsdb.closed_range``, rollup
tables in ``app.tsdb.rollup_reader``, the split helper's half in ``app.tsdb.split``, whose
process is the serving layer's ``app.server.split_helper``); one decode (``decode``), the
fused decode-and-downsample (``fused``), and the merge of the sources for one sub-query
(``series``). ``app.tsdb.reader.SeriesReader`` is the entry point; ARCHITECTURE.md draws it."""
