"""``aiowheel spark generate|replay|report|stream``: the pipeline from the command line.

This module owns the ``spark`` command group: its arguments, its defaults (everything under
``./aiowheel-data/``, so ``aiowheel spark generate`` followed by ``aiowheel spark replay`` works
on a fresh machine), and what it shows while Spark works: a live progress bar fed by Spark's
status tracker (stages and tasks) or by the streaming query's progress (micro-batches, rows,
watermark), then a summary table. Use :func:`add_arguments` to hang the group under another
parser, or :func:`main` to run it on its own (``python -m aiowheel.spark``).
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from aiowheel.spark.events import EventFormat, read_events
from aiowheel.spark.generate import generate
from aiowheel.spark.replay import replay
from aiowheel.spark.report import report
from aiowheel.spark.session import spark_session
from aiowheel.spark.stream import stream, watermark, write_stream_files

__all__ = ["add_arguments", "main", "run"]

DATA = "aiowheel-data"
DEFAULT_EVENTS = os.path.join(DATA, "events.parquet")
DEFAULT_EXPIRIES = os.path.join(DATA, "expiries.parquet")
DEFAULT_REPORT = os.path.join(DATA, "report")
DEFAULT_INCOMING = os.path.join(DATA, "incoming")
DEFAULT_STREAM_OUT = os.path.join(DATA, "stream-expiries")
DEFAULT_CHECKPOINT = os.path.join(DATA, "checkpoint")

T = TypeVar("T")


def _path(text: str) -> str:
    """A local path made absolute (the JVM may not share this process's working directory);
    a URL such as ``s3a://bucket/events`` is kept as it is."""
    return text if "://" in text else os.path.abspath(text)


def _count(name: str) -> Callable[[str], int]:
    """A parser of the count called ``name``: a whole number >= 1."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(f"{name} must be a whole number >= 1, got {text!r}")
        return value

    return parse


_shards = _count("shards")
_max_files = _count("max-files-per-trigger")


def _timeouts(text: str) -> list[float]:
    """Parse ``"15,30,60"`` into seconds."""
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"timeouts must be comma-separated seconds such as 15,30,60, got {text!r}"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError(f"timeouts must name at least one timeout, got {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``generate``, ``replay``, ``report`` and ``stream`` commands to ``parser``."""
    parser.add_argument(
        "--master",
        default=None,
        help="Spark master URL (default: the one spark-submit gave, else local[*])",
    )
    commands = parser.add_subparsers(dest="spark_command", required=True, metavar="COMMAND")

    gen = commands.add_parser("generate", help="write a synthetic event log (Parquet)")
    gen.add_argument(
        "--out", type=_path, default=DEFAULT_EVENTS, help=f"(default: {DEFAULT_EVENTS})"
    )
    gen.add_argument("--connections", type=int, default=100_000)
    gen.add_argument("--duration", type=float, default=300.0, help="seconds of log")
    gen.add_argument("--keepalive", type=float, default=25.0, help="seconds between keepalives")
    gen.add_argument("--jitter", type=float, default=0.1)
    gen.add_argument("--timeout", type=float, default=30.0, help="idle timeout to build around")
    gen.add_argument("--tick", type=float, default=0.001)
    gen.add_argument("--silent-share", type=float, default=0.05)
    gen.add_argument("--reconnect-share", type=float, default=0.05)
    gen.add_argument("--close-share", type=float, default=0.1)
    gen.add_argument("--duplicate-share", type=float, default=0.01)
    gen.add_argument("--out-of-order-share", type=float, default=0.02)
    gen.add_argument("--boundary-share", type=float, default=0.02)
    gen.add_argument("--seed", type=int, default=0)

    def add_log(command: argparse.ArgumentParser, timeouts: str) -> None:
        command.add_argument(
            "--events",
            type=_path,
            default=DEFAULT_EVENTS,
            help=f"event log (default: {DEFAULT_EVENTS})",
        )
        command.add_argument("--format", choices=["parquet", "json", "csv"], default=None)
        command.add_argument(
            "--timeouts",
            type=_timeouts,
            default=_timeouts(timeouts),
            help=f"comma-separated idle timeouts in seconds (default: {timeouts})",
        )
        command.add_argument("--tick", type=float, default=0.001, help="timer tick, seconds")
        command.add_argument("--horizon", type=float, default=None, help="default: last ts")

    rep = commands.add_parser("replay", help="every expiry IdleTimeouts would produce")
    add_log(rep, "30")
    rep.add_argument(
        "--out", type=_path, default=DEFAULT_EXPIRIES, help=f"(default: {DEFAULT_EXPIRIES})"
    )

    cap = commands.add_parser("report", help="capacity metrics, plots and an HTML page")
    add_log(cap, "15,30,60")
    cap.add_argument("--bucket", type=float, default=1.0, help="seconds per bucket")
    cap.add_argument(
        "--out", type=_path, default=DEFAULT_REPORT, help=f"(default: {DEFAULT_REPORT})"
    )

    live = commands.add_parser("stream", help="the streaming idle-expiry job")
    live.add_argument(
        "--source", type=_path, default=DEFAULT_INCOMING, help=f"(default: {DEFAULT_INCOMING})"
    )
    live.add_argument("--format", choices=["parquet", "json", "csv"], default="parquet")
    live.add_argument(
        "--out", type=_path, default=DEFAULT_STREAM_OUT, help=f"(default: {DEFAULT_STREAM_OUT})"
    )
    live.add_argument(
        "--checkpoint",
        type=_path,
        default=DEFAULT_CHECKPOINT,
        help=f"(default: {DEFAULT_CHECKPOINT})",
    )
    live.add_argument("--timeouts", type=_timeouts, default=_timeouts("30"))
    live.add_argument("--tick", type=float, default=0.001)
    live.add_argument("--delay", type=float, default=10.0, help="watermark delay, seconds")
    live.add_argument(
        "--processing-time",
        default=None,
        help="keep running with one micro-batch per interval, e.g. '10 seconds' "
        "(default: process the files there and stop)",
    )
    live.add_argument(
        "--shards",
        type=_shards,
        default=None,
        help="groups keys are hashed into (default: 8 per shuffle partition); a restart "
        "must keep the number the checkpoint was started with",
    )
    live.add_argument(
        "--max-files-per-trigger",
        type=_max_files,
        default=None,
        metavar="N",
        help="cap on new files per micro-batch (default: all that have landed; a micro-batch "
        "has a fixed cost, so fewer, larger ones are faster: see docs/spark.md)",
    )
    live.add_argument(
        "--api",
        choices=["row", "pandas"],
        default="pandas",
        help="the operator: pandas (transformWithStateInPandas, default) or row "
        "(transformWithState); a checkpoint keeps the one it was started with",
    )
    live.add_argument(
        "--feed",
        type=_path,
        default=None,
        metavar="LOG",
        help="first split this Parquet event log (e.g. the generated one) by arrival into "
        "--files slices under --source",
    )
    live.add_argument("--files", type=int, default=4, help="slices for --feed (default: 4)")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``spark`` command; returns the process exit status."""
    parser = argparse.ArgumentParser(
        prog="aiowheel spark", description="The aiowheel Spark pipeline."
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace, console: Console | None = None) -> int:
    """Run the command parsed by a parser :func:`add_arguments` set up."""
    console = console or Console(stderr=True)
    with console.status("starting Spark"):
        spark = spark_session(args.master)
    commands: dict[str, Callable[[SparkSession, argparse.Namespace, Console], int]] = {
        "generate": _generate,
        "replay": _replay,
        "report": _report,
        "stream": _stream,
    }
    return commands[args.spark_command](spark, args, console)


@contextmanager
def _spark_progress(spark: SparkSession, console: Console, what: str) -> Iterator[None]:
    """Show Spark's running stages as a progress bar until the block ends."""
    tracker = spark.sparkContext.statusTracker()
    done = threading.Event()
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("tasks"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task(what, total=None)

        def poll() -> None:
            while not done.wait(0.25):
                stages = [tracker.getStageInfo(i) for i in tracker.getActiveStageIds()]
                live = [stage for stage in stages if stage is not None]
                if live:
                    total = sum(stage.numTasks for stage in live)
                    completed = sum(stage.numCompletedTasks for stage in live)
                    names = ", ".join(str(stage.stageId) for stage in live)
                    progress.update(
                        task,
                        description=f"{what} (stage {names})",
                        total=total,
                        completed=completed,
                    )

        poller = threading.Thread(target=poll, name="aiowheel-spark-progress", daemon=True)
        poller.start()
        try:
            yield
        finally:
            done.set()
            poller.join()


def _timed(console: Console, what: str, spark: SparkSession, action: Callable[[], T]) -> T:
    start = time.perf_counter()
    with _spark_progress(spark, console, what):
        result = action()
    console.print(f"[green]✓[/] {what} in {time.perf_counter() - start:.1f} s")
    return result


def _generate(spark: SparkSession, args: argparse.Namespace, console: Console) -> int:
    def write() -> int:
        events = generate(
            spark,
            connections=args.connections,
            duration=args.duration,
            keepalive=args.keepalive,
            jitter=args.jitter,
            timeout=args.timeout,
            tick=args.tick,
            silent_share=args.silent_share,
            reconnect_share=args.reconnect_share,
            close_share=args.close_share,
            duplicate_share=args.duplicate_share,
            out_of_order_share=args.out_of_order_share,
            boundary_share=args.boundary_share,
            seed=args.seed,
            path=args.out,
        )
        return events.count()

    count = _timed(console, f"generating {args.out}", spark, write)
    console.print(f"{count:,} events from {args.connections:,} connections in {args.out}")
    return 0


def _load(spark: SparkSession, args: argparse.Namespace, console: Console) -> bool:
    if os.path.exists(args.events) or "://" in args.events:
        return True
    console.print(
        f"[red]no event log at {args.events}[/]: run [bold]aiowheel spark generate[/] first, "
        "or pass --events PATH"
    )
    return False


def _replay(spark: SparkSession, args: argparse.Namespace, console: Console) -> int:
    if not _load(spark, args, console):
        return 2
    fmt: EventFormat | None = args.format
    events = read_events(spark, args.events, format=fmt)
    expiries = replay(spark, events, timeouts=args.timeouts, tick=args.tick, horizon=args.horizon)
    _timed(
        console,
        f"replaying {args.events}",
        spark,
        lambda: expiries.write.mode("overwrite").parquet(args.out),
    )
    counts = (
        spark.read.parquet(args.out)
        .groupBy("timeout")
        .agg(F.count(F.lit(1)).alias("expiries"), F.count_distinct("key").alias("keys"))
        .orderBy("timeout")
        .collect()
    )
    table = Table(title="expiries per idle timeout")
    table.add_column("timeout (s)", justify="right")
    table.add_column("expiries", justify="right")
    table.add_column("keys expired", justify="right")
    found = {row.timeout: row for row in counts}
    for timeout in sorted(set(args.timeouts)):
        row = found.get(float(timeout))
        table.add_row(
            f"{timeout:g}",
            f"{row.expiries if row else 0:,}",
            f"{row.keys if row else 0:,}",
        )
    Console().print(table)
    console.print(f"expiries: {args.out}")
    return 0


def _report(spark: SparkSession, args: argparse.Namespace, console: Console) -> int:
    if not _load(spark, args, console):
        return 2
    fmt: EventFormat | None = args.format
    events = read_events(spark, args.events, format=fmt)
    files = _timed(
        console,
        f"computing capacity metrics of {args.events}",
        spark,
        lambda: report(
            spark,
            events,
            args.out,
            timeouts=args.timeouts,
            tick=args.tick,
            horizon=args.horizon,
            bucket=args.bucket,
        ),
    )
    table = Table(title="what if: one row per idle timeout")
    for column in (
        "timeout (s)",
        "expirations",
        "peak pending",
        "mean pending",
        "peak expirations/s",
        "pending at end",
    ):
        table.add_column(column, justify="right")
    for row in files.summary.itertuples(index=False):
        table.add_row(
            f"{row.timeout:g}",
            f"{row.expirations:,}",
            f"{row.peak_pending:,}",
            f"{row.mean_pending:,.0f}",
            f"{row.peak_expirations_per_second:,.1f}",
            f"{row.pending_at_horizon:,}",
        )
    Console().print(table)
    console.print(f"report: {files.index}")
    return 0


def _stream(spark: SparkSession, args: argparse.Namespace, console: Console) -> int:
    if args.feed is not None:
        # Read as is: the generated log's arrival column orders the slices.
        log = spark.read.parquet(args.feed)
        _timed(
            console,
            f"splitting {args.feed} into {args.files} files under {args.source}",
            spark,
            lambda: write_stream_files(log, args.source, files=args.files, format=args.format),
        )
    os.makedirs(args.source, exist_ok=True)
    query = stream(
        spark,
        args.source,
        output=args.out,
        checkpoint=args.checkpoint,
        timeouts=args.timeouts,
        tick=args.tick,
        delay=args.delay,
        format=args.format,
        processing_time=args.processing_time,
        max_files_per_trigger=args.max_files_per_trigger,
        shards=args.shards,
        api=args.api,
    )
    with console.status("streaming") as status:
        try:
            while query.isActive:
                progress = query.lastProgress
                if progress:
                    status.update(
                        f"streaming: batch {progress['batchId']}, "
                        f"{progress['numInputRows']:,} rows in it, "
                        f"watermark {watermark(query) or 0:.3f} s"
                    )
                query.awaitTermination(1)
        except KeyboardInterrupt:
            console.print("stopping (the checkpoint keeps the state; run again to go on)")
            query.stop()
    if query.exception() is not None:
        console.print(f"[red]stream failed:[/] {query.exception()}")
        return 1
    emitted = spark.read.parquet(args.out).count() if os.path.exists(args.out) else 0
    console.print(
        f"[green]✓[/] stream stopped at watermark {watermark(query) or 0:.3f} s; "
        f"{emitted:,} expiries in {args.out}"
    )
    return 0
