"""The read path of a sub-query: a plan made once, the sources it chose, one merge by time.

- the plan (``plan``), frozen before any row is read: window, hours, filled buckets, filters,
  the rows in UIDs (``select``: exact keys or a scan, by cost; bounds in ``keys``), fused or
  not, the hour cache's part (``CachePolicy``, sized by ``seen``), the rollup table
  (``rollup_choice``) and the split (``split_choice``);
- the sources, each reading the plan over a span of its rows and giving series: the storage
  scan or exact keys through the hour cache's row entries (``rows`` with ``cached`` and
  ``keep``), the closed hours a key range at a time (``closed_ranges``), a rollup table
  (``rollup_table`` with ``rollup_rows`` and ``rollup_ranges``), and the worker's helper
  process for the later half of a split read (``split``; the process is the serving layer's,
  ``app.server.split_helper``);
- how they combine: the raw rows (``series``), rollup buckets and raw spans (``rollup_read``),
  the two halves (``split``); joined by the one merge by time (``merge``); cells decoded into
  arrays in ``decode``, or decoded and downsampled a chunk at a time (``fused``).

``app.tsdb.reader.SeriesReader`` is the entry point; ARCHITECTURE.md draws the path."""
