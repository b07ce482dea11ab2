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
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from aiowheel._checks import check_count, check_length
from aiowheel.spark.events import EventFormat, read_events
from aiowheel.spark.generate import (
    _check_jitter,
    _check_positive,
    _check_share,
    _check_whole,
    generate,
)
from aiowheel.spark.metrics import _check_bucket
from aiowheel.spark.replay import _check_horizon, _check_tick, _check_timeouts, replay
from aiowheel.spark.report import report
from aiowheel.spark.session import _local_cores, spark_session
from aiowheel.spark.stream import EXPIRY_SCHEMA, stream, watermark, write_stream_files

__all__ = ["add_arguments", "main", "run"]

_DATA = "aiowheel-data"
_DEFAULT_EVENTS = os.path.join(_DATA, "events.parquet")
_DEFAULT_EXPIRIES = os.path.join(_DATA, "expiries.parquet")
_DEFAULT_REPORT = os.path.join(_DATA, "report")
_DEFAULT_INCOMING = os.path.join(_DATA, "incoming")
_DEFAULT_STREAM_OUT = os.path.join(_DATA, "stream-expiries")
_DEFAULT_CHECKPOINT = os.path.join(_DATA, "checkpoint")

_T = TypeVar("_T")


def _path(text: str) -> str:
    """A local path made absolute (the JVM may not share this process's working directory);
    a URL such as ``s3a://bucket/events`` is kept as it is."""
    return text if "://" in text else os.path.abspath(text)


def _timeouts(text: str) -> list[float]:
    """Parse ``"15,30,60"`` into seconds, checked as :func:`aiowheel.spark.replay` does."""
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"timeouts must be comma-separated seconds such as 15,30,60, got {text!r}"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError(f"timeouts must name at least one timeout, got {text!r}")
    return _checked(lambda: _check_timeouts(values))


def _checked(check: Callable[[], _T]) -> _T:
    """Run one of the Python API's own checks; its error, message unchanged, is a usage error
    (exit 2, before Spark starts)."""
    try:
        return check()
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _number(name: str, check: Callable[[float], object]) -> Callable[[str], float]:
    """An argument type: a number that ``check`` (the API's check of ``name``) accepts."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        _checked(lambda: check(value))
        return value

    return parse


def _whole(
    name: str, check: Callable[[int], object], expected: str = "a whole number"
) -> Callable[[str], int]:
    """An argument type: a whole number that ``check`` (the API's check of ``name``) accepts;
    text that is not one is refused as not ``expected``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be {expected}, got {text!r}") from None
        _checked(lambda: check(value))
        return value

    return parse


def _count(name: str) -> Callable[[str], int]:
    """An argument type: the count the Python API calls ``name``, a whole number >= 1."""
    return _whole(name, lambda value: check_count(value, name, 1, 2**31 - 1), "a whole number >= 1")


def _positive(name: str) -> Callable[[str], float]:
    return _number(name, lambda value: _check_positive(value, name))


def _share(name: str) -> Callable[[str], float]:
    return _number(name, lambda value: _check_share(value, name))


def _master(text: str) -> str:
    """A Spark master URL of a form Spark accepts (checked as Spark's launcher checks it, so a
    mistyped one is a usage error instead of a failed JVM start)."""
    if text == "yarn" or text.startswith(("spark", "k8s", "local")):
        return text
    raise argparse.ArgumentTypeError(
        f"master must be local, local[N], local[*], spark://HOST:PORT, yarn or k8s://URL, "
        f"got {text!r}"
    )


class _HelpFormatter(argparse.HelpFormatter):
    """Help that shows each option's default (unless it has none, or the help says it)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        shown = action.default not in (None, False, argparse.SUPPRESS)
        if shown and "default" not in text and action.option_strings:
            text += " (default: %(default)s)"
        return text


_tick = _number("tick", _check_tick)
_shards = _count("shards")
_max_files = _count("max_files_per_trigger")
_horizon = _number("horizon", _check_horizon)
_delay = _number("delay", lambda value: check_length(value, "delay", zero_ok=True))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``generate``, ``replay``, ``report`` and ``stream`` commands to ``parser``."""
    parser.add_argument(
        "--master",
        type=_master,
        default=None,
        help="Spark master URL (default: the one spark-submit gave, else local[*])",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show Spark's warnings and, when a command fails, the stack traces",
    )
    commands = parser.add_subparsers(dest="spark_command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help, formatter_class=_HelpFormatter)

    gen = command("generate", "write a synthetic event log (Parquet)")
    gen.add_argument("--out", type=_path, default=_DEFAULT_EVENTS, help="where to write the log")
    gen.add_argument(
        "--connections",
        type=_whole("connections", lambda value: _check_whole(value, "connections")),
        default=100_000,
        help="clients (keys conn-0000000, ...)",
    )
    gen.add_argument("--duration", type=_positive("duration"), default=300.0, help="seconds of log")
    gen.add_argument(
        "--keepalive",
        type=_positive("keepalive"),
        default=25.0,
        help="seconds between a client's keepalives",
    )
    gen.add_argument(
        "--jitter",
        type=_number("jitter", _check_jitter),
        default=0.1,
        help="each keepalive moves within +- jitter * keepalive of its schedule (0 to < 0.5)",
    )
    gen.add_argument(
        "--timeout",
        type=_positive("timeout"),
        default=30.0,
        help="idle timeout (seconds) the outages and boundary events are sized for",
    )
    gen.add_argument(
        "--tick", type=_tick, default=0.001, help="timer tick (seconds) the boundaries use"
    )
    gen.add_argument(
        "--silent-share",
        type=_share("silent_share"),
        default=0.05,
        help="share of clients that go silent for good",
    )
    gen.add_argument(
        "--reconnect-share",
        type=_share("reconnect_share"),
        default=0.05,
        help="share of clients that drop out once, longer than the timeout, and reconnect",
    )
    gen.add_argument(
        "--close-share",
        type=_share("close_share"),
        default=0.1,
        help="share of clients that close cleanly",
    )
    gen.add_argument(
        "--duplicate-share",
        type=_share("duplicate_share"),
        default=0.01,
        help="share of events delivered twice (same event_id)",
    )
    gen.add_argument(
        "--out-of-order-share",
        type=_share("out_of_order_share"),
        default=0.02,
        help="share of events that arrive late, by up to 5 s",
    )
    gen.add_argument(
        "--boundary-share",
        type=_share("boundary_share"),
        default=0.02,
        help="share of odd keepalives moved onto (or one tick before) the previous deadline",
    )
    gen.add_argument(
        "--seed",
        type=_whole("seed", int),
        default=0,
        help="the same seed gives the same log, on any number of cores",
    )

    def add_log(command: argparse.ArgumentParser, timeouts: str) -> None:
        command.add_argument("--events", type=_path, default=_DEFAULT_EVENTS, help="event log")
        command.add_argument(
            "--format",
            choices=["parquet", "json", "csv"],
            default=None,
            help="of the event log (default: from its file names, else parquet)",
        )
        command.add_argument(
            "--timeouts",
            type=_timeouts,
            default=timeouts,
            help="comma-separated idle timeouts in seconds",
        )
        command.add_argument("--tick", type=_tick, default=0.001, help="timer tick, seconds")
        command.add_argument(
            "--horizon",
            type=_horizon,
            default=None,
            help="where the log ends, seconds (default: its largest ts)",
        )

    rep = command("replay", "every expiry IdleTimeouts would produce")
    add_log(rep, "30")
    rep.add_argument(
        "--out", type=_path, default=_DEFAULT_EXPIRIES, help="where to write the expiries"
    )

    cap = command("report", "capacity metrics, plots and an HTML page")
    add_log(cap, "15,30,60")
    cap.add_argument(
        "--bucket", type=_number("bucket", _check_bucket), default=1.0, help="seconds per bucket"
    )
    cap.add_argument("--out", type=_path, default=_DEFAULT_REPORT, help="report folder")

    live = command("stream", "the streaming idle-expiry job")
    live.add_argument(
        "--source", type=_path, default=_DEFAULT_INCOMING, help="folder the event files land in"
    )
    live.add_argument(
        "--format",
        choices=["parquet", "json", "csv"],
        default="parquet",
        help="of the event files",
    )
    live.add_argument(
        "--out", type=_path, default=_DEFAULT_STREAM_OUT, help="folder of the expiries (Parquet)"
    )
    live.add_argument(
        "--checkpoint",
        type=_path,
        default=_DEFAULT_CHECKPOINT,
        help="the query's checkpoint: run again with the same one to go on",
    )
    live.add_argument(
        "--timeouts",
        type=_timeouts,
        default="30",
        help="comma-separated idle timeouts in seconds",
    )
    live.add_argument("--tick", type=_tick, default=0.001, help="timer tick, seconds")
    live.add_argument(
        "--delay",
        type=_delay,
        default=10.0,
        help="watermark delay: how late (event time, seconds) an event may still arrive",
    )
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
        help="the operator: pandas (transformWithStateInPandas) or row "
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
    live.add_argument(
        "--files",
        type=_whole("files", lambda value: check_count(value, "files", 1)),
        default=4,
        help="slices for --feed",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``spark`` command; returns the process exit status."""
    parser = argparse.ArgumentParser(
        prog="aiowheel spark",
        description="The aiowheel Spark pipeline.",
        formatter_class=_HelpFormatter,
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


# What Spark raises about a command's input (a path that is not there, files it cannot read,
# values the event log's checks refuse) and the API's own ValueError about the log's columns.
_INPUT_ERRORS = (PySparkException, Py4JJavaError, ValueError)


class _InputError(Exception):
    """A command failed on its input: ``what`` names it (a path), the cause is Spark's error."""

    def __init__(self, what: str, cause: BaseException) -> None:
        super().__init__(what, cause)
        self.what = what
        self.cause = cause

    def line(self) -> str:
        """One line: the input and the first line of Spark's message (for an error raised in
        the JVM, the Java exception's message, not py4j's "An error occurred while calling")."""
        lines = [line.strip() for line in str(self.cause).strip().splitlines()]
        if isinstance(self.cause, Py4JJavaError) and len(lines) > 1:
            # ": org.apache.spark.SparkException: Could not parse Master URL: 'local[x]'"
            lines = [_JAVA_EXCEPTION.sub("", lines[1].removeprefix(": ")), *lines[2:]]
        return f"{self.what}: {lines[0] if lines else type(self.cause).__name__}"


# The class name a Java exception's message starts with, as py4j shows it.
_JAVA_EXCEPTION = re.compile(r"^(?:[\w$]+\.)+[\w$]*(?:Exception|Error): ")


@contextmanager
def _about(what: str) -> Iterator[None]:
    """Errors Spark raises inside the block are about ``what``."""
    try:
        yield
    except _INPUT_ERRORS as exc:
        raise _InputError(what, exc) from exc


def run(args: argparse.Namespace, console: Console | None = None) -> int:
    """Run the command parsed by a parser :func:`add_arguments` set up.

    Returns 0 on success, 2 when an input path is missing (checked before Spark starts) and 1
    when Spark fails on the input: one line naming it, the stack traces only with ``--verbose``.
    """
    console = console or Console(stderr=True)
    verbose = bool(getattr(args, "verbose", False))
    missing = _missing_input(args)
    if missing is not None:
        console.print(missing)
        return 2
    try:
        with console.status("starting Spark"):
            # Spark logs a failed job's Java stack trace at ERROR: shown only when asked for.
            spark = spark_session(
                args.master,
                shuffle_partitions=_shuffle_partitions(args),
                log_level="WARN" if verbose else "OFF",
            )
    except _INPUT_ERRORS as exc:
        if verbose:
            console.print_exception(show_locals=False)
        master = args.master or "the default master"
        line = _InputError(f"Spark did not start on {master}", exc).line()
        console.print(f"[red]error:[/] {escape(line)}", highlight=False, soft_wrap=True)
        return 1
    commands: dict[str, Callable[[SparkSession, argparse.Namespace, Console], int]] = {
        "generate": _generate,
        "replay": _replay,
        "report": _report,
        "stream": _stream,
    }
    try:
        return commands[args.spark_command](spark, args, console)
    except _InputError as failure:
        if verbose:
            console.print_exception(show_locals=False)
        # Escaped: Spark's messages hold brackets ([PATH_NOT_FOUND], [key]) rich would eat.
        console.print(f"[red]error:[/] {escape(failure.line())}", highlight=False, soft_wrap=True)
        if not verbose:
            console.print("(--verbose shows the stack traces)")
        return 1


def _shuffle_partitions(args: argparse.Namespace) -> int | None:
    """The shuffle partitions of the command's session: one per core of a ``local[N]`` master
    for ``stream``, whose micro-batches ran fastest so in the benchmark (docs/spark.md: the
    fixed cost alike, the cost per row and the micro-batch without input lower than at two per
    core); None otherwise, for :func:`spark_session`'s default (two per core, which suits the
    batch jobs). A checkpoint keeps the partitions it was started with, whatever this says."""
    if args.spark_command != "stream" or args.master is None:
        return None
    return _local_cores(args.master)


def _missing_input(args: argparse.Namespace) -> str | None:
    """The message for an input path that does not exist, or None (URLs are not checked)."""
    if args.spark_command in ("replay", "report"):
        path, hint = (
            args.events,
            "run [bold]aiowheel spark generate[/] first, or pass --events PATH",
        )
    elif args.spark_command == "stream" and args.feed is not None:
        path, hint = args.feed, "pass --feed an event log (e.g. the generated one)"
    else:
        return None
    if "://" in path or os.path.exists(path):
        return None
    return f"[red]no event log at {path}[/]: {hint}"


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


def _timed(console: Console, what: str, spark: SparkSession, action: Callable[[], _T]) -> _T:
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


def _replay(spark: SparkSession, args: argparse.Namespace, console: Console) -> int:
    fmt: EventFormat | None = args.format
    with _about(args.events):
        events = read_events(spark, args.events, format=fmt)
        expiries = replay(
            spark, events, timeouts=args.timeouts, tick=args.tick, horizon=args.horizon
        )
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
    fmt: EventFormat | None = args.format
    with _about(args.events):
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
        feed: str = args.feed
        with _about(feed):
            # Read as is: the generated log's arrival column orders the slices.
            log = spark.read.parquet(feed)
            _timed(
                console,
                f"splitting {feed} into {args.files} files under {args.source}",
                spark,
                lambda: write_stream_files(log, args.source, files=args.files, format=args.format),
            )
    os.makedirs(args.source, exist_ok=True)
    with _about(args.source):
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
    # awaitTermination raises the query's failure; a query that ended before it is asked is
    # checked below.
    with console.status("streaming") as status, _about(args.source):
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
    failure = query.exception()
    if failure is not None:
        raise _InputError(args.source, failure)
    # The sink's files as its metadata log lists them; with the schema given, a sink that has
    # committed no file yet (no micro-batch had input) reads as empty instead of failing.
    emitted = (
        spark.read.schema(EXPIRY_SCHEMA).parquet(args.out).count()
        if os.path.exists(args.out) or "://" in args.out
        else 0
    )
    stopped = watermark(query)
    written = f"{emitted:,} expiries in {args.out}" if emitted else f"no expiry in {args.out}"
    if stopped is None:
        # No micro-batch ran: the source had no new file.
        console.print(f"[green]✓[/] stream stopped: no new events under {args.source}; {written}")
    else:
        console.print(f"[green]✓[/] stream stopped at watermark {stopped:.3f} s; {written}")
    return 0
