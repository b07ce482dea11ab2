"""The streaming service next to Spark's own floor, in one SparkSession, interleaved.

The *floor* is the cheapest stateful Python query Spark allows on the same input: a trivial
``transformWithStateInPandas`` processor (:class:`FloorProcessor`: one state read and at most one
timer per group visited, nothing emitted) on the same source, the same columns and the same
grouping by shard as the stream (``aiowheel.spark.stream``, the ``pandas`` operator). Whatever
the floor costs is Spark's: the per-task state store load and commit, the state server's round
trips, the Arrow -> pandas feeding. The benchmark reports each figure of the stream as a ratio of
the floor's, measured in the same JVM, in rounds that alternate which query goes first, as the
median over rounds with the range -- on a machine shared with other work, the ratios are the
figures that hold still, not the milliseconds.

Per round and query, on a log of the seed scenario (``--events``, 3M by default: 100k
connections) split by arrival:

* a *large* stream: one warm-up micro-batch (a slice of ``--large`` rows, which also builds the
  state: every connection), then three data micro-batches of ``--large`` rows, then the
  micro-batch without input that ``availableNow`` runs at the end (it only fires timers);
* a *small* stream: the same warm-up slice, then three micro-batches of ``--small`` rows.

Figures: the **no-data micro-batch** (the large stream's last); the **fixed cost per
micro-batch** and the **cost per row**, from the line through the median small and large
micro-batches; **events/s** of the large micro-batches, and that over ``replay``'s events/s on
the whole log (timed once per round in the same session). Beside them, the **state store
traffic** of each kind of micro-batch (small and large with input, no-data), as Spark reports
it (RocksDB gets, puts, bytes read and written): figures that do not depend on the machine's
load.

With ``--calls`` (the default), a third query runs in each round: the stream's state calls
alone, without its Python work (:func:`_calls_processor`): its fixed cost and cost per row over
the floor's say how much of the stream's extra is the state layout's traffic through Spark's
state server, the rest being the processor's Python work (timed part by part, outside Spark, by
``bench_spark_shard.py``).

``--held 100000,1000000`` adds the keys-held case: a log of that many connections opened at
100-110 s plus ``--due`` (1,000) opened at 0-10 s, and a marker at 630 s, with a 600 s
timeout: the micro-batch without input at the end has the ``--due`` keys due and the others
held. Its time (stream and floor, interleaved) shows whether it grows with the keys held.

``--files-log 100000`` (the default; 0 leaves it out) streams ``generate``'s log of that many
connections (1.1M events) split by ``write_stream_files`` into three files, one per
micro-batch, and reports the stream's median events/s per micro-batch over ``replay``'s on the
same log, in ``--rounds`` rounds alternating which runs first.

``--partitions 2,4`` repeats the figures per ``spark.sql.shuffle.partitions`` (shards: 8 per
partition, for both queries; the keys-held case runs at the first). Prints the tables with the
machine's load, and writes ``spark_stream.json``, ``.md`` and ``.png`` to ``--out`` (default:
benchmarks/results). Numbers only: this never fails on speed. Each stream's output is checked
against replay's.

The figures are those of the aiowheel this process imports, and Spark's Python workers must
import the same: a worker's path starts with its working directory (the driver's, on a local
master), so on a local master the benchmark stops at once, naming both, when they differ (on a
cluster it names both in its report). To measure another checkout (an earlier commit in a ``git
worktree``), run it from there, with that checkout on ``PYTHONPATH``.

    python benchmarks/bench_spark_stream.py                      # 3M events, local[2]
    python benchmarks/bench_spark_stream.py --quick              # 300k events, small sizes
    python benchmarks/bench_spark_stream.py --partitions 2,4 --held 100000,1000000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# The benchmarks folder is not a package: the replay benchmark is a sibling module.
from bench_spark_replay import connections_for, load

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.stateful_processor import (
        ExpiredTimerInfo,
        StatefulProcessorHandle,
        TimerValues,
    )

RESULTS = Path(__file__).resolve().parent / "results"
TIMEOUTS = [30.0]
TICK = 0.001
DELAY = 10.0
DURATION = 300.0
# State operator metrics kept for each no-data micro-batch (Spark's names).
STATE_METRICS = ("numRowsTotal", "allUpdatesTimeMs", "commitTimeMs")
CUSTOM_METRICS = (
    "rocksdbGetCount",
    "rocksdbPutCount",
    "rocksdbTotalBytesRead",
    "rocksdbTotalBytesWritten",
    "numRegisteredTimers",
    "numDeletedTimers",
)
QUERIES = ("floor", "stream")
# The log in files (--files-log): generate's default log of this many connections, split by
# arrival into this many files, streamed one file per micro-batch.
FILES_LOG_CONNECTIONS = 100_000
FILES_LOG_FILES = 3
# The third query of a round with --calls: the stream's state calls alone (_calls_processor).
CALLS = "calls"
# The keys-held case's timeout: the held keys (opened at 100-110 s) are not due when the
# watermark reaches 620 s, the others (0-10 s) are.
HELD_TIMEOUTS = [600.0]
WORKER_FAILED_TO_START = "Python worker failed to connect back"
WORKER_START_RETRIES = 3
# The state store traffic of a micro-batch, per kind of micro-batch (see traffic()).
TRAFFIC = (
    "rocksdbGetCount",
    "rocksdbPutCount",
    "rocksdbTotalBytesRead",
    "rocksdbTotalBytesWritten",
)
# The figures, each reported as the stream's over the floor's, with the targets.
FIGURES = {
    "no_data_ms": ("no-data micro-batch", "<= 1.25"),
    "fixed_ms": ("fixed cost per micro-batch", "<= 1.25"),
    "row_us": ("cost per row", "<= 1.2"),
}


def _floor_processor() -> Any:
    """The floor's processor class (made here, so importing this module needs no pyspark)."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class FloorProcessor(StatefulProcessor):
        """One state read and at most one timer per group visited; nothing emitted."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.handle = handle
            self.state = handle.getValueState("timer", "timer long")

        def handleInputRows(
            self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
        ) -> Iterator[pd.DataFrame]:
            for _frame in rows:
                pass
            watermark = timerValues.getCurrentWatermarkInMs()
            stored = self.state.get()
            if stored is None or stored[0] <= watermark:
                # Fires in the next micro-batch that moves the watermark, as the stream's do.
                self.handle.registerTimer(watermark + 1)
                self.state.update((watermark + 1,))
            return iter([])

        def handleExpiredTimer(
            self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
        ) -> Iterator[pd.DataFrame]:
            self.state.get()
            return iter([])

        def close(self) -> None:
            """Nothing to release."""

    return FloorProcessor()


def _calls_processor(shards: int) -> Any:
    """The *calls* query's processor: the stream's state calls without its Python work.

    Its first visit of a shard is the stream's own (it builds the shard's index and pages);
    every later visit with input makes only the state calls of the stream's: the index read,
    every page read (one pass of the map's iterator) and written back as it was, the index
    written; a timer that fires reads the index, as the floor's do. Its pages stay as its first
    visits left them, so its traffic is close to the stream's, not equal (the state store
    traffic table shows both). Between the floor and the stream, it splits the stream's extra
    into the state layout's traffic through Spark's state server and the processor's Python
    work (what ``bench_spark_shard.py`` times part by part).
    """
    from aiowheel.spark.stream import _IdleExpiryPandasProcessor

    class CallsProcessor(_IdleExpiryPandasProcessor):  # type: ignore[misc]
        def handleInputRows(
            self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
        ) -> Iterator[pd.DataFrame]:
            index = self.index.get()
            if index is None:
                # The stream's visit, building the state; its expiries are not this query's.
                for _expiries in super().handleInputRows(key, rows, timerValues):
                    pass
                return iter([])
            for _frame in rows:
                pass
            for page, value in self._read(None).items():
                self.pages.updateValue((page,), value)
            self.index.update(index)
            return iter([])

        def handleExpiredTimer(
            self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
        ) -> Iterator[pd.DataFrame]:
            self.index.get()
            return iter([])

    return CallsProcessor(TIMEOUTS, TICK, DELAY, shards)


def start(
    spark: SparkSession,
    query: str,
    source: str,
    work: str,
    timeouts: Sequence[float] = TIMEOUTS,
) -> dict[str, Any]:
    """Run ``query`` (floor or stream) over ``source``, one file per micro-batch, to its end
    (``availableNow``) in a fresh checkpoint under ``work``; return its micro-batches."""
    from pyspark.errors import StreamingQueryException

    from aiowheel.spark.stream import SHARDS_PER_PARTITION

    output, checkpoint = os.path.join(work, "out"), os.path.join(work, "ckpt")
    shutil.rmtree(work, ignore_errors=True)
    shards = SHARDS_PER_PARTITION * int(spark.conf.get("spark.sql.shuffle.partitions") or 200)
    for attempt in range(WORKER_START_RETRIES + 1):
        running = (
            _start_stream(spark, source, output, checkpoint, shards, timeouts=timeouts)
            if query == "stream"
            else _start_floor(
                spark,
                source,
                output,
                checkpoint,
                shards=shards,
                processor=_calls_processor(shards) if query == CALLS else _floor_processor(),
            )
        )
        try:
            running.awaitTermination()
        except StreamingQueryException as exc:
            # Spark gives the Python process it starts on the driver for transformWithState
            # ten seconds to connect back, a constant no setting changes; a loaded machine can
            # miss it at a query's start, before any micro-batch: start again (the checkpoint
            # holds nothing yet).
            if WORKER_FAILED_TO_START not in str(exc) or attempt == WORKER_START_RETRIES:
                raise
            shutil.rmtree(work, ignore_errors=True)
            continue
        break
    batches = []
    for progress in running.recentProgress:
        state = progress["stateOperators"][0] if progress["stateOperators"] else {}
        custom = state.get("customMetrics", {})
        batches.append(
            {
                "rows": int(progress["numInputRows"]),
                "ms": int(progress["durationMs"].get("triggerExecution", 0)),
                **{name: state.get(name) for name in STATE_METRICS},
                **{name: custom.get(name) for name in CUSTOM_METRICS},
            }
        )
    return {"batches": batches, "output": output, "watermark": _watermark_of(running)}


def _start_stream(
    spark: SparkSession,
    source: str,
    output: str,
    checkpoint: str,
    shards: int,
    *,
    timeouts: Sequence[float],
) -> StreamingQuery:
    from aiowheel.spark import stream

    return stream(
        spark,
        source,
        output=output,
        checkpoint=checkpoint,
        timeouts=timeouts,
        tick=TICK,
        delay=DELAY,
        max_files_per_trigger=1,
        shards=shards,
    )


def _start_floor(
    spark: SparkSession, source: str, output: str, checkpoint: str, *, shards: int, processor: Any
) -> StreamingQuery:
    """The floor (or the calls query, see _calls_processor) over ``source``: the stream's
    source, columns and grouping, ``processor``'s visits, nothing emitted."""
    from aiowheel.spark.events import EVENT_SCHEMA
    from aiowheel.spark.stream import _by_shard

    events = (
        spark.readStream.schema(EVENT_SCHEMA)
        .option("recursiveFileLookup", "true")
        .option("maxFilesPerTrigger", "1")
        .parquet(source)
    )
    return (
        _by_shard(events, DELAY, shards)
        .transformWithStateInPandas(
            statefulProcessor=processor,
            outputStructType="key string",
            outputMode="Append",
            timeMode="EventTime",
        )
        .writeStream.format("parquet")
        .option("path", output)
        .option("checkpointLocation", checkpoint)
        .outputMode("append")
        .trigger(availableNow=True)
        .start()
    )


def _watermark_of(query: Any) -> float | None:
    from aiowheel.spark import watermark

    return watermark(query)


def emitted(spark: SparkSession, run: dict[str, Any]) -> int:
    """The rows a query's sink holds: Spark's file sink reports no row count of its own. Read
    with the schema given, as the command line counts its sink: the floor emits nothing, and a
    sink without a file has no schema to infer."""
    from aiowheel.spark.stream import EXPIRY_SCHEMA

    return spark.read.schema(EXPIRY_SCHEMA).parquet(run["output"]).count()


def agrees(spark: SparkSession, log: DataFrame, run: dict[str, Any]) -> bool:
    """Whether a stream's output is exactly replay's up to its watermark."""
    from aiowheel.spark import collect_expiries, replay

    emitted = spark.read.parquet(run["output"])
    got = collect_expiries(emitted)
    expected = collect_expiries(
        replay(spark, log, timeouts=TIMEOUTS, tick=TICK, horizon=run["watermark"])
    )
    return got == expected and emitted.count() == len(got)


def figures(small: dict[str, Any], large: dict[str, Any]) -> dict[str, float]:
    """A query's figures from its small and large streams (see the module documentation)."""
    small_batches = [batch for batch in small["batches"] if batch["rows"]][1:]
    large_batches = [batch for batch in large["batches"] if batch["rows"]][1:]
    no_data = [batch for batch in large["batches"] if not batch["rows"]]
    small_ms = statistics.median(batch["ms"] for batch in small_batches)
    large_ms = statistics.median(batch["ms"] for batch in large_batches)
    small_rows = statistics.median(batch["rows"] for batch in small_batches)
    large_rows = statistics.median(batch["rows"] for batch in large_batches)
    per_row = (large_ms - small_ms) / (large_rows - small_rows)
    return {
        "no_data_ms": no_data[-1]["ms"] if no_data else float("nan"),
        "fixed_ms": small_ms - per_row * small_rows,
        "row_us": per_row * 1000.0,
        "small_ms": small_ms,
        "large_ms": large_ms,
        "small_rows": small_rows,
        "large_rows": large_rows,
        "events_per_s": large_rows / large_ms * 1000.0,
    }


def traffic(small: dict[str, Any], large: dict[str, Any]) -> dict[str, dict[str, float]]:
    """A query's state store traffic (:data:`TRAFFIC`) per kind of micro-batch: the median of
    the small and of the large micro-batches with input (after the warm-up), and the no-data
    micro-batch."""
    kinds = {
        "small": [batch for batch in small["batches"] if batch["rows"]][1:],
        "large": [batch for batch in large["batches"] if batch["rows"]][1:],
        "no-data": [batch for batch in large["batches"] if not batch["rows"]][-1:],
    }
    return {
        kind: {
            name: statistics.median(float(batch[name] or 0) for batch in batches)
            for name in TRAFFIC
        }
        for kind, batches in kinds.items()
        if batches
    }


def split(spark: SparkSession, log: DataFrame, directory: str, rows: int, count: int) -> list[str]:
    """The first ``count`` slices of ``rows`` rows of ``log`` by arrival, one folder each."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ordered = log.withColumn("n", F.row_number().over(Window.orderBy("arrival", "key")) - 1)
    ordered = ordered.filter(F.col("n") < count * rows).persist()
    folders = []
    for index in range(count):
        folder = os.path.join(directory, f"slice-{index:06d}")
        part = ordered.filter((F.col("n") >= index * rows) & (F.col("n") < (index + 1) * rows))
        part.drop("n").coalesce(1).write.parquet(folder)
        folders.append(folder)
        time.sleep(0.01)  # distinct modification times: the file source takes them in order
    ordered.unpersist()
    return folders


def sources(
    spark: SparkSession, log: DataFrame, tmp: str, small: int, large: int
) -> dict[str, str]:
    """The large and the small stream's source folders (see the module documentation)."""
    from pyspark.sql import functions as F

    slices = split(spark, log, os.path.join(tmp, "large-slices"), large, 4)
    # The small micro-batches continue where the warm-up slice ends.
    (bound,) = spark.read.parquet(slices[0]).agg(F.max("arrival")).collect()[0]
    rest = log.filter(F.col("arrival") > bound)
    pieces = split(spark, rest, os.path.join(tmp, "small-slices"), small, 3)
    folders = {"large": os.path.join(tmp, "large"), "small": os.path.join(tmp, "small")}
    for name, parts in (("large", slices), ("small", [slices[0], *pieces])):
        os.makedirs(folders[name])
        for index, part in enumerate(parts):
            shutil.copytree(part, os.path.join(folders[name], f"slice-{index:06d}"))
    return folders


def held_log(spark: SparkSession, path: str, held: int, due: int) -> None:
    """``held`` keys opened at 100-110 s, ``due`` keys at 0-10 s, a marker at 630 s: with a
    600 s timeout, the micro-batch after the marker's has the ``due`` keys due only."""
    from pyspark.sql import functions as F

    first = spark.range(held + due).select(
        F.concat(F.lit("h"), F.col("id").cast("string")).alias("key"),
        F.when(F.col("id") < due, (F.col("id") % 10000) / 1000.0)
        .otherwise(100.0 + (F.col("id") % 10000) / 1000.0)
        .alias("ts"),
        F.lit("open").alias("kind"),
        F.lit(None).cast("string").alias("event_id"),
    )
    first.coalesce(1).write.parquet(os.path.join(path, "slice-000000"))
    time.sleep(0.01)
    marker = spark.createDataFrame([("marker", 630.0, "open", None)], first.schema)
    marker.coalesce(1).write.parquet(os.path.join(path, "slice-000001"))


def files_log(spark: SparkSession, tmp: str, connections: int, rounds: int) -> dict[str, Any]:
    """The stream's events/s per micro-batch over ``replay``'s on ``generate``'s log of
    ``connections`` split by :func:`~aiowheel.spark.write_stream_files` into
    :data:`FILES_LOG_FILES` files, one per micro-batch, in rounds alternating which goes first;
    the first round also checks the stream's output against ``replay``'s."""
    from aiowheel.spark import generate, replay, write_stream_files

    path = os.path.join(tmp, "files-log.parquet")
    log = generate(spark, connections=connections, path=path)
    events = log.count()
    source = os.path.join(tmp, "files-log")
    write_stream_files(log, source, files=FILES_LOG_FILES)
    measured: dict[str, Any] = {"events": events, "rounds": []}
    for index in range(rounds):
        timed: dict[str, Any] = {}
        for which in ("stream", "replay") if index % 2 == 0 else ("replay", "stream"):
            if which == "stream":
                run = start(spark, "stream", source, os.path.join(tmp, "work-files"))
                batches = [batch for batch in run["batches"] if batch["rows"]]
                timed["rows"] = [batch["rows"] for batch in batches]
                timed["stream"] = statistics.median(
                    batch["rows"] / batch["ms"] * 1000.0 for batch in batches
                )
                if index == 0:
                    measured["agrees"] = agrees(spark, log, run)
            else:
                began = time.perf_counter()
                replay(spark, log, timeouts=TIMEOUTS, tick=TICK).write.mode("overwrite").parquet(
                    os.path.join(tmp, "files-replayed")
                )
                timed["replay"] = events / (time.perf_counter() - began)
        timed["load"] = load()
        measured["rounds"].append(timed)
        print(
            f"log in {FILES_LOG_FILES} files, round {index + 1}: stream/replay "
            f"{timed['stream'] / timed['replay']:.3f} ({timed['load']})",
            flush=True,
        )
    return measured


def files_log_table(measured: dict[str, Any]) -> str:
    """The stream's events/s per micro-batch over replay's on the log in files."""
    rounds = measured["rounds"]
    streamed = [r["stream"] for r in rounds]
    replayed = [r["replay"] for r in rounds]
    rows = [f"{count:,}" for count in rounds[0]["rows"]]
    return "\n".join(
        [
            "| events | rows per micro-batch | stream events/s | replay events/s "
            "| stream / replay (median, range) | target | output equal to replay's |",
            "| ---: | --- | ---: | ---: | ---: | --- | --- |",
            f"| {measured['events']:,} | {', '.join(rows)} | {statistics.median(streamed):,.0f} "
            f"| {statistics.median(replayed):,.0f} "
            f"| {median_range([s / r for s, r in zip(streamed, replayed, strict=True)])} "
            f"| >= 0.25 | {'yes' if measured['agrees'] else 'NO'} |",
        ]
    )


def median_range(values: Sequence[float]) -> str:
    """``median (min-max)`` of ratios."""
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def summary(results: dict[str, Any]) -> str:
    """The ratios per partition count, medians over rounds with their range."""
    lines = [
        "| partitions | figure | floor (median) | stream (median) | stream / floor "
        "(median, range) | target |",
        "| ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for partitions, rounds in results["partitions"].items():
        if not rounds:
            continue
        figures = [(name, "stream", label, target) for name, (label, target) in FIGURES.items()]
        if CALLS in rounds[0]:
            # Where the stream's extra goes: its state calls alone (see _calls_processor).
            figures += [
                (name, CALLS, f"{FIGURES[name][0]}: the stream's state calls alone", "-")
                for name in ("fixed_ms", "row_us")
            ]
        for name, query, label, target in figures:
            floor = [r["floor"][name] for r in rounds]
            ours = [r[query][name] for r in rounds]
            unit = "µs" if name == "row_us" else "ms"
            lines.append(
                f"| {partitions} | {label} | {statistics.median(floor):,.1f} {unit} "
                f"| {statistics.median(ours):,.1f} {unit} "
                f"| {median_range([o / f for o, f in zip(ours, floor, strict=True)])} "
                f"| {target} |"
            )
        replayed = [r["replay_events_per_s"] for r in rounds]
        ours = [r["stream"]["events_per_s"] for r in rounds]
        floor = [r["floor"]["events_per_s"] for r in rounds]
        lines.append(
            f"| {partitions} | events/s at {rounds[0]['stream']['large_rows']:,.0f} rows "
            f"| {statistics.median(floor):,.0f} | {statistics.median(ours):,.0f} "
            f"| {median_range([o / f for o, f in zip(ours, floor, strict=True)])} | - |"
        )
        lines.append(
            f"| {partitions} | stream / replay events/s (replay "
            f"{statistics.median(replayed):,.0f}) | - | - "
            f"| {median_range([o / r for o, r in zip(ours, replayed, strict=True)])} "
            f"| >= 0.25 |"
        )
    return "\n".join(lines)


def traffic_table(results: dict[str, Any]) -> str:
    """The state store traffic per kind of micro-batch, first round of each partition count."""
    lines = [
        "| partitions | micro-batch | query | RocksDB gets | puts | bytes read | bytes written |",
        "| ---: | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for partitions, rounds in results["partitions"].items():
        if not rounds:
            continue
        measured = rounds[0]["traffic"]
        for kind in measured["stream"]:
            for query in (query for query in (*QUERIES, CALLS) if query in measured):
                row = measured[query].get(kind)
                if row is None:
                    continue
                lines.append(
                    f"| {partitions} | {kind} | {query} | "
                    + " | ".join(f"{row[name]:,.0f}" for name in TRAFFIC)
                    + " |"
                )
    return "\n".join(lines)


def held_table(results: dict[str, Any]) -> str:
    """The no-data micro-batch against the keys held, with the due ones fixed."""
    lines = [
        "| partitions | keys held | keys due | floor no-data ms | stream no-data ms "
        "| stream / floor | stream expiries | stream RocksDB gets / puts |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for partitions, by_size in results["held"].items():
        for held, rounds in by_size.items():
            floor = [r["floor"]["ms"] for r in rounds]
            ours = [r["stream"]["ms"] for r in rounds]
            last = rounds[-1]["stream"]
            lines.append(
                f"| {partitions} | {int(held):,} | {results['due']:,} "
                f"| {statistics.median(floor):,.0f} | {statistics.median(ours):,.0f} "
                f"| {median_range([o / f for o, f in zip(ours, floor, strict=True)])} "
                f"| {last['expiries']:,} "
                f"| {last['rocksdbGetCount']} / {last['rocksdbPutCount']} |"
            )
    return "\n".join(lines)


def aiowheel_here() -> str:
    """Where this process imports aiowheel from, and which twin of the shard's visit it runs."""
    import aiowheel
    from aiowheel import _impl

    compiled = _impl.edge_twin("visit").__name__.endswith("_cvisit")
    folder = os.path.dirname(os.path.dirname(os.path.abspath(aiowheel.__file__)))
    return f"{folder} ({'compiled' if compiled else 'pure'} visit)"


def workers_aiowheel(spark: SparkSession) -> str:
    """:func:`aiowheel_here` in one of Spark's Python workers.

    A worker's path starts with its working directory (the driver's, on a local master), then
    ``PYTHONPATH``: run from another checkout, the workers would import that checkout's aiowheel,
    not the one this process measures."""
    if __name__ != "__main__":  # imported: the workers cannot import this module by name
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
    found: str = spark.sparkContext.parallelize([0], 1).map(lambda _: aiowheel_here()).first()
    return found


def _aiowheel_line(here: str, there: str | None) -> str:
    """Which aiowheel the figures are of: this process's, and Spark's workers' if another."""
    if there is None or there == here:
        return f"{here}, in this process and Spark's workers"
    return f"{here} in this process, {there} in Spark's workers"


def markdown(results: dict[str, Any]) -> str:
    parts = [
        f"# The stream next to Spark's floor: {results['events']:,} events, {results['master']}",
        "",
        f"Micro-batches of {results['small']:,} and {results['large']:,} rows; "
        f"{results['rounds']} interleaved round(s) per partition count; "
        f"{results['load_before']} before, {results['load_after']} after. "
        f"Stream output equal to replay's in every run checked: "
        f"{'not checked' if not results['events'] else 'yes' if results['agrees'] else 'NO'}."
        + (
            f" aiowheel: {_aiowheel_line(results['aiowheel'], results.get('workers_aiowheel'))}."
            if results.get("aiowheel")
            else ""
        ),
        "",
        summary(results),
    ]
    if any(results["partitions"].values()):
        parts += [
            "",
            "## State store traffic per micro-batch (medians, first round)",
            "",
            traffic_table(results),
        ]
    if results["held"]:
        parts += ["", "## Keys held, keys due", "", held_table(results)]
    if results["files_log"]:
        parts += [
            "",
            f"## A log in {FILES_LOG_FILES} files, one per micro-batch",
            "",
            files_log_table(results["files_log"]),
        ]
    return "\n".join(parts) + "\n"


def plot(results: dict[str, Any], path: str) -> None:
    """The stream / floor ratios (median and range) per figure and partition count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4))
    labels, medians, lows, highs = [], [], [], []
    for partitions, rounds in results["partitions"].items():
        if not rounds:
            continue
        for name, (label, _target) in FIGURES.items():
            ratios = [r["stream"][name] / r["floor"][name] for r in rounds]
            labels.append(f"{label}\np{partitions}")
            middle = statistics.median(ratios)
            medians.append(middle)
            lows.append(middle - min(ratios))
            highs.append(max(ratios) - middle)
    axes.bar(range(len(medians)), medians, yerr=[lows, highs], color="tab:blue", capsize=4)
    axes.axhline(1.0, color="gray", linewidth=1)
    axes.axhline(1.25, color="tab:red", linestyle="--", linewidth=1, label="target 1.25")
    axes.set_xticks(range(len(labels)), labels, fontsize=7)
    axes.set_ylabel("stream / floor (same run)")
    axes.set_title(f"{results['events']:,} events, {results['master']}")
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_results(results: dict[str, Any], out: str) -> list[str]:
    """Write spark_stream.json, .md and .png to ``out``; return their paths."""
    os.makedirs(out, exist_ok=True)
    files = [os.path.join(out, f"spark_stream.{suffix}") for suffix in ("json", "md", "png")]
    with open(files[0], "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=1)
    with open(files[1], "w", encoding="utf-8") as handle:
        handle.write(markdown(results))
    plot(results, files[2])
    return files


def _sizes(text: str) -> list[int]:
    return [int(size) for size in text.split(",") if size]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=3_000_000, help="log size (3M)")
    parser.add_argument("--small", type=int, default=10_000, help="rows per small batch")
    parser.add_argument("--large", type=int, default=300_000, help="rows per large batch")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--partitions", type=_sizes, default=[2, 4], metavar="N,...")
    parser.add_argument("--held", type=_sizes, default=[], metavar="KEYS,...")
    parser.add_argument("--due", type=int, default=1_000, help="keys due in --held (1000)")
    parser.add_argument(
        "--quick", action="store_true", help="300k events, 1k/30k rows, a log in files of 10k"
    )
    parser.add_argument(
        "--figures",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the rounds against the floor (--no-figures: the keys-held case only)",
    )
    parser.add_argument(
        "--calls",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a third query per round: the stream's state calls alone (--no-calls: not run)",
    )
    parser.add_argument(
        "--files-log",
        type=int,
        default=FILES_LOG_CONNECTIONS,
        metavar="CONNECTIONS",
        help=f"connections of the log in {FILES_LOG_FILES} files "
        f"({FILES_LOG_CONNECTIONS:,}, generate's default; 0: not run)",
    )
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    if args.quick:
        args.events, args.small, args.large = 300_000, 1_000, 30_000
        args.files_log = min(args.files_log, 10_000)
    from aiowheel.spark import generate, replay, spark_session

    spark = spark_session(args.master, shuffle_partitions=args.partitions[0])
    here, there = aiowheel_here(), workers_aiowheel(spark)
    if here != there:
        mismatch = f"Spark's Python workers import aiowheel from {there}, this process from {here}"
        if args.master.startswith("local"):
            spark.stop()
            raise SystemExit(
                f"{mismatch}: the figures would not be this process's code. A worker's path "
                "starts with its working directory: run the benchmark from the checkout it "
                "measures."
            )
        # A cluster's executors have their own copy, in their own folders.
        print(f"{mismatch} (a cluster's own copy).", flush=True)
    results: dict[str, Any] = {
        "master": args.master,
        "small": args.small,
        "large": args.large,
        "rounds": args.rounds,
        "due": args.due,
        "load_before": load(),
        "partitions": {},
        "held": {},
        "files_log": None,
        "agrees": True,
        "aiowheel": here,
        "workers_aiowheel": there,
    }
    with tempfile.TemporaryDirectory(prefix="aiowheel-bench-stream-") as tmp:
        results["events"] = events = 0
        if args.figures:
            log_path = os.path.join(tmp, "events.parquet")
            connections = connections_for(args.events)
            generate(spark, connections=connections, duration=DURATION, seed=0, path=log_path)
            log = spark.read.parquet(log_path)
            results["events"] = events = log.count()
            folders = sources(spark, log, tmp, args.small, args.large)
            print(f"{events:,} events ({connections:,} connections); {load()}", flush=True)
        for partitions in args.partitions:
            spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
            rounds = results["partitions"].setdefault(str(partitions), [])
            queries = (*QUERIES, CALLS) if args.calls else QUERIES
            for index in range(args.rounds if args.figures else 0):
                order = queries if index % 2 == 0 else queries[::-1]
                measured: dict[str, Any] = {}
                for query in order:
                    runs = {
                        # A folder per size: the large stream's output is checked below,
                        # after the small one ran (which, sharing a folder, wrote over it).
                        size: start(spark, query, folders[size], os.path.join(tmp, f"work-{size}"))
                        for size in ("large", "small")
                    }
                    if query == "stream" and index == 0:
                        results["agrees"] &= agrees(spark, log, runs["large"])
                    measured[query] = figures(runs["small"], runs["large"])
                    measured.setdefault("traffic", {})[query] = traffic(
                        runs["small"], runs["large"]
                    )
                began = time.perf_counter()
                replay(spark, log, timeouts=TIMEOUTS, tick=TICK).write.mode("overwrite").parquet(
                    os.path.join(tmp, "replayed")
                )
                measured["replay_events_per_s"] = events / (time.perf_counter() - began)
                measured["load"] = load()
                rounds.append(measured)
                print(
                    f"p{partitions} round {index + 1}: "
                    + ", ".join(
                        f"{name} {measured['stream'][name] / measured['floor'][name]:.2f}x"
                        for name in FIGURES
                    )
                    + "".join(
                        f", {CALLS} {name} {measured[CALLS][name] / measured['floor'][name]:.2f}x"
                        for name in ("fixed_ms", "row_us")
                        if CALLS in measured
                    )
                    + f", stream/replay "
                    f"{measured['stream']['events_per_s'] / measured['replay_events_per_s']:.3f}"
                    f" ({measured['load']})",
                    flush=True,
                )
            for held in args.held if partitions == args.partitions[0] else []:
                source = os.path.join(tmp, f"held-{held}")
                if not os.path.exists(source):
                    held_log(spark, source, held, args.due)
                by_size = results["held"].setdefault(str(partitions), {})
                for index in range(args.rounds):
                    order = QUERIES if index % 2 == 0 else QUERIES[::-1]
                    measured = {}
                    for query in order:
                        run = start(spark, query, source, os.path.join(tmp, "work"), HELD_TIMEOUTS)
                        no_data = [batch for batch in run["batches"] if not batch["rows"]]
                        measured[query] = {**no_data[-1], "expiries": emitted(spark, run)}
                    measured["load"] = load()
                    by_size.setdefault(str(held), []).append(measured)
                    print(
                        f"p{partitions} held {held:,}: no-data stream "
                        f"{measured['stream']['ms']:,} ms, floor {measured['floor']['ms']:,} ms "
                        f"({measured['load']})",
                        flush=True,
                    )
        if args.files_log:
            spark.conf.set("spark.sql.shuffle.partitions", str(args.partitions[0]))
            results["files_log"] = files_log(spark, tmp, args.files_log, args.rounds)
            results["agrees"] &= results["files_log"]["agrees"]
    spark.stop()
    results["load_after"] = load()
    print()
    print(markdown(results))
    for path in write_results(results, args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
