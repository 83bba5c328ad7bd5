"""The ``pytsd`` command: serve, create tables, import, inspect, compact (OpenTSDB's ``tsdb``)."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import sys
import time
from collections.abc import Iterable, Iterator
from typing import IO

import click

from app import __version__
from app.config import load_config
from app.errors import TsdbError
from app.meta.tree_builder import attach_tree_processing
from app.storage import codec
from app.storage.base import SPACE_USED, able
from app.storage.sqlite import SqliteStore
from app.tsdb import TSDB
from app.tsdb.compaction import compact_table
from app.tsdb.importer import BATCH_POINTS, Importer
from app.tsdb.schema import create_tables
from app.tsdb.writer import PointWriter
from plugin.cli import auth as auth_group


def open_tsdb(**overrides: object) -> TSDB:
    tsdb = TSDB(load_config({k: v for k, v in overrides.items() if v is not None}))
    attach_tree_processing(tsdb)
    return tsdb


class TsdbGroup(click.Group):
    """Report pytsd's own errors (bad input, storage down) as one line, not a traceback."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except TsdbError as exc:
            details = f" ({exc.details})" if exc.details else ""
            raise click.ClickException(exc.message + details) from exc


@click.group(cls=TsdbGroup)
@click.version_option(__version__, prog_name="pytsd", message="%(prog)s %(version)s")
def main() -> None:
    """pytsd: an OpenTSDB-compatible time-series server."""


main.add_command(auth_group)  # `pytsd auth ...`: the credentials of the auth plugin


@main.command()
@click.option("--bind", default=None, help="Address (tsd.network.bind).")
@click.option("--port", type=int, default=None, help="Port (tsd.network.port).")
@click.option("--workers", type=int, default=None, help="Gunicorn workers.")
def serve(bind: str | None, port: int | None, workers: int | None) -> None:
    """Serve the HTTP API and the line protocol with gunicorn (docs/serving.md)."""
    from app.server.launch import serve as run_server

    sys.exit(run_server(bind, port, workers, echo=click.echo))


@main.command("create-tables")
@click.option("--compression", default=None,
              help="GZ, SNAPPY, LZ4, ZSTD, LZO, BZIP2 or NONE (tsd.storage.hbase.compression).")
@click.option("--bloom-filter", default=None,
              help="ROW, ROWCOL or NONE (tsd.storage.hbase.bloom_filter).")
@click.option("--ttl", "ttl_s", default=None,
              help="Seconds the data table keeps cells, 0 forever (tsd.storage.hbase.data_ttl_s).")
def create_tables_command(compression: str | None, bloom_filter: str | None,
                          ttl_s: str | None) -> None:
    """Create OpenTSDB's tables (tsdb, tsdb-uid, tsdb-tree, tsdb-meta) if missing."""
    tsdb = open_tsdb(**{"tsd.storage.hbase.compression": compression,
                        "tsd.storage.hbase.bloom_filter": bloom_filter,
                        "tsd.storage.hbase.data_ttl_s": ttl_s})
    store = tsdb.store  # the embedded store makes its tables as it opens
    created = [*tsdb.created_tables, *create_tables(store, tsdb.config)]
    click.echo(f"created: {', '.join(created)}" if created else "all tables exist")


def read_lines(raw: IO[bytes]) -> Iterator[str]:
    """Lines of a plain or gzip stream (detected by its magic bytes)."""
    gzipped = raw.read(2) == b"\x1f\x8b"
    raw.seek(0)
    stream: IO[bytes] = gzip.GzipFile(fileobj=raw) if gzipped else raw  # type: ignore[assignment]
    text = io.TextIOWrapper(stream, encoding="utf-8")
    yield from text
    text.detach()  # leave closing the file to its owner


@main.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--auto-metric", is_flag=True, help="Assign UIDs to unknown metrics.")
@click.option("--progress/--no-progress", default=True)
@click.option("--no-plugins", is_flag=True,
              help="Skip the write filter and real-time publisher plugins (a backfill).")
def import_command(files: tuple[str, ...], auto_metric: bool, progress: bool,
                   no_plugins: bool) -> None:
    """Import files in OpenTSDB's text format (plain or gzip), through the one write path
    the put endpoints use (plugins included unless --no-plugins)."""
    tsdb = open_tsdb(**({"tsd.core.auto_create_metrics": True} if auto_metric else {}))
    started = time.perf_counter()
    ok = failed = 0
    for path in files:
        good, bad = import_file(PointWriter(tsdb, plugins=not no_plugins), path, progress)
        ok, failed = ok + good, failed + bad
    elapsed = time.perf_counter() - started
    click.echo(f"imported {ok} points ({failed} failed) in {elapsed:.2f}s "
               f"({ok / max(elapsed, 1e-9):,.0f} points/s)")
    if failed:
        sys.exit(1)


def import_file(writer: PointWriter, path: str, progress: bool) -> tuple[int, int]:
    from tqdm import tqdm

    importer = Importer(writer)
    ok = failed = 0
    with open(path, "rb") as raw, tqdm(total=os.path.getsize(path), unit="B",
                                       unit_scale=True, desc=path, disable=not progress,
                                       file=sys.stderr) as bar:
        for number, line in enumerate(read_lines(raw), start=1):
            if number % 10_000 == 0:
                bar.update(raw.tell() - bar.n)  # compressed bytes read so far
            if not line.strip() or line.startswith("#"):
                continue
            try:
                importer.add(line, number)
            except TsdbError as exc:
                failed += 1
                click.echo(f"{path}:{number}: {exc.message}: {line.strip()}", err=True)
                continue
            if importer.pending >= BATCH_POINTS:
                failed += _flushed(importer, path)
        failed += _flushed(importer, path)
        ok = importer.stored
        bar.update(bar.total - bar.n)
    return ok, failed


def _flushed(importer: Importer, path: str) -> int:
    """Write the importer's batch (a storage failure fails the import); report and count
    the lines the store refused."""
    refused = importer.flush()
    for line in refused:
        click.echo(f"{path}:{line.number}: {line.error.message}: {line.line.strip()}", err=True)
    return len(refused)


@main.command()
@click.argument("names", nargs=-1, required=True)
def mkmetric(names: tuple[str, ...]) -> None:
    """Assign UIDs to metric names."""
    _assign(open_tsdb(), "metrics", names)


@main.group()
def uid() -> None:
    """Look up and assign UIDs."""


@uid.command("assign")
@click.argument("kind", type=click.Choice(["metrics", "tagk", "tagv"]))
@click.argument("names", nargs=-1, required=True)
def uid_assign(kind: str, names: tuple[str, ...]) -> None:
    """Assign UIDs to names of a kind."""
    _assign(open_tsdb(), kind, names)


def _assign(tsdb: TSDB, kind: str, names: Iterable[str]) -> None:
    from app.tsdb.uid import KIND_LABELS, validate_name

    for name in names:
        validate_name(KIND_LABELS[kind], name, tsdb.config["tsd.core.tag.allow_specialchars"])
        click.echo(f"{kind} {name}: {tsdb.uids[kind].get_or_create_id(name).hex().upper()}")


@uid.command("grep")
@click.argument("kind", required=False, type=click.Choice(["metrics", "tagk", "tagv"]))
@click.argument("regex", default="")
def uid_grep(kind: str | None, regex: str) -> None:
    """List UIDs whose names match a regular expression."""
    tsdb = open_tsdb()
    pattern = re.compile(regex)
    for each in [kind] if kind else ["metrics", "tagk", "tagv"]:
        for name, uid_bytes in tsdb.uids[each].grep(lambda n: bool(pattern.search(n))):
            click.echo(f"{each} {name}: {uid_bytes.hex().upper()}")


@uid.command("rename")
@click.argument("kind", type=click.Choice(["metrics", "tagk", "tagv"]))
@click.argument("name")
@click.argument("new_name")
def uid_rename(kind: str, name: str, new_name: str) -> None:
    """Rename a UID (its data keeps the UID; only the name changes)."""
    from app.tsdb.uid import KIND_LABELS, validate_name

    tsdb = open_tsdb()
    validate_name(KIND_LABELS[kind], new_name, tsdb.config["tsd.core.tag.allow_specialchars"])
    tsdb.uids[kind].rename(name, new_name, tsdb.uid_table_name)
    click.echo(f"{kind} {name} renamed to {new_name}")


@uid.command("delete")
@click.argument("kind", type=click.Choice(["metrics", "tagk", "tagv"]))
@click.argument("name")
def uid_delete(kind: str, name: str) -> None:
    """Delete a UID's mappings and UIDMeta (its data points stay, unreadable by name)."""
    from app.meta.sync import delete_uid

    uid_bytes = delete_uid(open_tsdb(), kind, name)
    click.echo(f"UID {kind} {name} ({uid_bytes.hex().upper()}) deleted.")


def _progress(rows: int, last_row: bytes) -> None:
    click.echo(f"... {rows} rows (to resume: --start-row {last_row.hex()})", err=True)


def _start_row(text: str | None) -> bytes | None:
    try:
        return bytes.fromhex(text) if text else None
    except ValueError:
        raise click.BadParameter(f"not hex: {text}", param_hint="--start-row") from None


@uid.command("metasync")
@click.option("--start-row", default=None, help="Resume at this row key (hex, from progress).")
def uid_metasync(start_row: str | None) -> None:
    """Create missing TSMeta and UIDMeta from the data table; fix their created times."""
    from app.meta.sync import metasync

    report = metasync(open_tsdb(), _progress, _start_row(start_row))
    click.echo(f"scanned {report.rows} rows, {report.series} series: "
               f"{report.ts_metas_created} TSMeta created, {report.ts_metas_updated} updated, "
               f"{report.uid_metas_written} UIDMeta written, {report.bad_uids} UIDs without "
               "a name")


@uid.command("metapurge")
def uid_metapurge() -> None:
    """Delete every TSMeta, counter and UIDMeta cell."""
    from app.meta.sync import metapurge

    meta_cells, uid_cells = metapurge(open_tsdb())
    click.echo(f"deleted {meta_cells} cells from the meta table and {uid_cells} UIDMeta cells")


@uid.command("treesync")
def uid_treesync() -> None:
    """Run every stored TSMeta through every enabled tree (builds branches and leaves)."""
    from app.meta.tree_builder import treesync

    metas, trees = treesync(open_tsdb())
    click.echo(f"processed {metas} TSMeta objects through {trees} trees")


@uid.command("fsck")
@click.option("--fix", is_flag=True, help="Repair what is found (default: only report).")
def uid_fsck(fix: bool) -> None:
    """Check the UID table for orphaned and inconsistent mappings (OpenTSDB's uid fsck)."""
    from app.tsdb.uid_fsck import fsck

    tsdb = open_tsdb()
    report = fsck(tsdb, fix=fix)
    for line in report.errors:
        click.echo(f"ERROR: {line}")
    for line in report.warnings:
        click.echo(f"WARN: {line}")
    for line in report.fixes:
        click.echo(f"FIX: {line}")
    for line in report.waste_lines():
        click.echo(line)
    click.echo(f"{report.cells} UID cells analyzed: {len(report.errors)} errors, "
               f"{len(report.warnings)} warnings")
    if fix and report.fixes:
        again = fsck(tsdb)
        click.echo(f"after fixing: {len(again.errors)} errors, {len(again.warnings)} warnings")
        sys.exit(1 if again.errors else 0)
    sys.exit(1 if report.errors else 0)


@main.command("fsck")
@click.option("--full-scan", is_flag=True, help="Accepted for OpenTSDB's syntax: always full.")
@click.option("--fix", is_flag=True, help="Fix what the other flags allow.")
@click.option("--fix-all", is_flag=True, help="Every flag below but --last-write-wins.")
@click.option("--compact", is_flag=True, help="With --fix: rewrite every row compacted.")
@click.option("--resolve-duplicates", is_flag=True, help="Keep one point per timestamp.")
@click.option("--last-write-wins", is_flag=True, help="Keep the newest write (else oldest).")
@click.option("--delete-orphans", is_flag=True, help="Delete rows whose UIDs have no name.")
@click.option("--delete-unknown-columns", is_flag=True, help="Delete unknown columns.")
@click.option("--delete-bad-rows", is_flag=True, help="Delete rows with invalid keys.")
@click.option("--delete-bad-compacts", is_flag=True, help="Delete undecodable compactions.")
@click.option("--delete-bad-values", is_flag=True, help="Delete values of the wrong length.")
@click.option("--start-row", default=None, help="Resume at this row key (hex, from progress).")
def fsck_command(full_scan: bool, fix: bool, fix_all: bool, compact: bool,
                 resolve_duplicates: bool, last_write_wins: bool, delete_orphans: bool,
                 delete_unknown_columns: bool, delete_bad_rows: bool,
                 delete_bad_compacts: bool, delete_bad_values: bool,
                 start_row: str | None) -> None:
    """Check the data table as OpenTSDB's fsck does (exit 1 when it found errors, fixed or
    not, as OpenTSDB does)."""
    from app.tsdb.fsck import FsckOptions, fsck

    del full_scan
    options = FsckOptions.fix_all() if fix_all else FsckOptions(
        fix, compact, resolve_duplicates, last_write_wins, delete_orphans,
        delete_unknown_columns, delete_bad_rows, delete_bad_compacts, delete_bad_values)
    options.last_write_wins = last_write_wins
    report = fsck(open_tsdb(), options, _progress, _start_row(start_row))
    for line in report.messages:
        click.echo(f"ERROR: {line}")
    for line in report.summary():
        click.echo(line)
    sys.exit(1 if report.errors else 0)


@main.command()
@click.argument("metric")
@click.option("--start", "start_s", type=int, default=0, help="Unix seconds, inclusive.")
@click.option("--end", "end_s", type=int, default=2**32 - 1, help="Unix seconds, inclusive.")
def scan(metric: str, start_s: int, end_s: int) -> None:
    """Print a metric's rows and cells in human-readable form (like ``tsdb scan``)."""
    tsdb = open_tsdb()
    metric_uid = tsdb.metrics.get_id(metric)
    table = tsdb.data_table()
    for salt in tsdb.layout.salt_prefixes():
        start, stop = tsdb.layout.metric_scan_range(salt, metric_uid, start_s, end_s)
        for row, cells in table.scan(row_start=start, row_stop=stop):
            _print_row(tsdb, row, cells, sys.stdout)


def _print_row(tsdb: TSDB, row: bytes, cells: dict[bytes, bytes], out: IO[str]) -> None:
    parts = tsdb.layout.parse_row_key(row)
    tags = " ".join(f"{tsdb.tagk.get_name(k)}={tsdb.tagv.get_name(v)}" for k, v in parts.tags)
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(parts.base_time_s))
    out.write(f"{row.hex()} {tsdb.metrics.get_name(parts.metric_uid)} "
              f"{parts.base_time_s} ({when}) {tags}\n")
    for column, value in cells.items():
        qualifier = column.split(b":", 1)[1]
        decoded = codec.decode_row(parts.base_time_s, [(qualifier, value)])
        points = ", ".join(f"{ts}={v:g}" for ts, v in zip(decoded.ts_ms.tolist(),
                                                          decoded.values.tolist()))
        kind = ("annotation" if codec.is_annotation_qualifier(qualifier)
                else f"{decoded.ts_ms.size} pts")
        out.write(f"  {column.decode('latin-1').split(':')[0]}:{qualifier.hex()} "
                  f"= {value.hex()} [{kind}] {points if decoded.ts_ms.size <= 8 else ''}\n")


@main.command()
@click.argument("table_name")
@click.option("--prefix", default="", help="Row key prefix, hex.")
@click.option("--limit", type=int, default=None, help="Most rows.")
def cells(table_name: str, prefix: str, limit: int | None) -> None:
    """Print every cell of a table as one JSON line (hex row, qualifier and value)."""
    table = open_tsdb().store.table(table_name)
    rows = table.scan(row_prefix=bytes.fromhex(prefix) if prefix else None, limit=limit)
    for row, row_cells in rows:
        for column, value in row_cells.items():
            family, _, qualifier = column.partition(b":")
            click.echo(json.dumps({"row": row.hex(), "family": family.decode(),
                                   "qualifier": qualifier.hex(), "value": value.hex()}))


@main.command()
def space() -> None:
    """Report the embedded store's disk use: file size, pages in use, bytes per data point."""
    tsdb = open_tsdb()
    space_used = able(tsdb.data_table(), SPACE_USED)
    if space_used is None:
        raise click.ClickException("disk use is reported by the embedded store only "
                                   "(HBase: see its own metrics)")
    used = space_used.space_used()
    click.echo(f"file {used.file_bytes:,} bytes (WAL {used.wal_bytes:,}), "
               f"in use {used.used_bytes:,} bytes ({used.free_pages:,} of {used.pages:,} "
               f"pages free), {used.points:,} data points")
    click.echo(f"bytes per point: file {used.file_bytes_per_point:.2f}, "
               f"in use {used.used_bytes_per_point:.2f}")
    if not used.auto_vacuum:
        click.echo("this file does not give freed pages back: run `pytsd vacuum` once")


@main.command()
def vacuum() -> None:
    """Rewrite the embedded store once so that it gives freed pages back by itself
    (incremental auto-vacuum; stores made before it): stop the server first."""
    store = open_tsdb().store
    if not isinstance(store, SqliteStore):
        raise click.ClickException("only the embedded store is vacuumed")
    before = os.path.getsize(store.path)
    started = time.perf_counter()
    store.vacuum()
    click.echo(f"vacuumed {store.path}: {before:,} -> {os.path.getsize(store.path):,} bytes "
               f"in {time.perf_counter() - started:.1f}s; freed pages are now given back")


@main.command()
@click.option("--now", "now_s", type=int, default=None, help="Pretend it is this unix time.")
def compact(now_s: int | None) -> None:
    """Compact every finished hour row of the data table into one column per row (and strip
    the kept hours, tsd.storage.sqlite.one_copy)."""
    tsdb = open_tsdb()
    stats = compact_table(tsdb.data_table(), tsdb.layout, now_s=now_s)
    click.echo(f"scanned {stats.rows_scanned} rows, compacted {stats.rows_compacted} "
               f"({stats.cells_merged} cells merged)")
    from app.tsdb.hour_strip import strip_all, stripping_table

    table = stripping_table(tsdb)  # the server's background strip, all of it now
    if table is not None:
        click.echo(f"one copy: {strip_all(table).cells_stripped} cells of kept hours "
                   "gave their values to their hour columns")


@main.command()
@click.option("--start", "start_s", type=int, required=True, help="First second (unix time).")
@click.option("--end", "end_s", type=int, default=None,
              help="End second, exclusive (default: the rollup horizon, the last closed hour).")
@click.option("--metric", "metrics", multiple=True, help="Only this metric (repeatable).")
def rollup(start_s: int, end_s: int | None, metrics: tuple[str, ...]) -> None:
    """Compute OpenTSDB rollups (sum, count, min, max) from raw data over [start, end)."""
    from app.tsdb.read.rollup_choice import rollup_horizon_ms
    from app.tsdb.rollups import compute_rollups

    tsdb = open_tsdb()
    if end_s is None:
        end_s = rollup_horizon_ms(tsdb.config["tsd.rollups.compute.lag_s"]) // 1000
    started = time.perf_counter()
    stats = compute_rollups(tsdb, start_s, end_s, metrics or None)
    click.echo(f"rolled up {stats.points_read} points of {stats.series} series into "
               f"{stats.cells_written} cells in {time.perf_counter() - started:.1f}s "
               f"({'; '.join(stats.spans) or 'no whole interval in range'})")


@main.command()
@click.option("--hours", type=int, default=24, help="Hours of data, ending now.")
@click.option("--if-empty", is_flag=True, help="Do nothing when demo data already exists.")
def demo(hours: int, if_empty: bool) -> None:
    """Load the demo data set (creates the tables first)."""
    from app.tsdb.demo import load_demo

    tsdb = open_tsdb(**{"tsd.core.auto_create_metrics": True})
    create_tables(tsdb.store, tsdb.config)
    if if_empty and tsdb.metrics.find_id("sys.cpu.user") is not None:
        click.echo("demo data already loaded")
        return
    started = time.perf_counter()
    count = load_demo(tsdb, hours=hours)
    click.echo(f"loaded {count} demo points in {time.perf_counter() - started:.1f}s")


if __name__ == "__main__":
    main()
