"""The distributed idle-expiry service: a Structured Streaming job with per-key state and timers.

This module owns :func:`stream`, which emits, from a directory of event files that keeps
growing, the same expiries as :func:`aiowheel.spark.replay` for the same events. Each
``(key, timeout)`` group is handled by :class:`IdleExpiryProcessor` through
``transformWithStateInPandas`` (Spark >= 4.0) with event-time timers, its state in the RocksDB
state store, and the query checkpointed: a stop and a restart lose no expiry and emit none
twice (the Parquet sink commits each micro-batch exactly once with the checkpoint).

Event time and the watermark. Events may arrive out of order; the watermark (the largest
``ts`` seen, minus ``delay``) says how far the log is complete. The processor buffers each
key's events and applies them only once the watermark has passed them, in ``(ts, kind)`` order,
so arrival order never matters; an expiry at ``E`` is emitted once the watermark reaches ``E``
(no event before ``E`` can still come). Hence the guarantee: when the watermark stands at
``W``, the expiries emitted so far are exactly ``replay(events, horizon=W)`` — provided no event
arrives later than ``delay`` after the log's largest ``ts`` at that time (Spark drops such late
events) and copies of one ``event_id`` lie within ``delay`` of each other in ``ts``. The
expiries between ``W`` and the log's end come out as time (the watermark) moves on.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pandas as pd  # type: ignore[import-untyped]
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import StructType

from aiowheel.spark.events import CLOSE_RANK, EVENT_SCHEMA, EventFormat, kind_rank, normalize_events
from aiowheel.spark.replay import check_tick, check_timeouts, deadline

__all__ = [
    "EXPIRY_SCHEMA",
    "IdleExpiryProcessor",
    "expiry_stream",
    "stream",
    "watermark",
    "write_stream_files",
]

EXPIRY_SCHEMA = "key string, timeout double, expired_at double, last_seen double"

# A buffered event: (ts, kind rank, event_id).
_Event = tuple[float, int, "str | None"]


def _wake_ms(t: float) -> int:
    """The first whole millisecond ``m`` with ``m / 1000 >= t``: when a timer for ``t`` fires."""
    m = math.ceil(t * 1000.0)
    if m / 1000.0 < t:
        m += 1
    elif (m - 1) / 1000.0 >= t:
        m -= 1
    return m


def _rule_order(event: _Event) -> tuple[float, int]:
    return event[0], event[1]


class IdleExpiryProcessor(StatefulProcessor):
    """The idle-expiry rule for one ``(key, timeout)`` group, driven by the watermark.

    State per group (all cleared once the key is idle and nothing is buffered):

    * ``clock`` — ``last_seen``, ``expires`` (both null while the key is untracked) and
      ``wake``, the one event-time timer registered for the group (ms), or null;
    * ``buffer`` — events that arrived but are still ahead of the watermark;
    * ``seen`` — ``event_id`` and ``ts`` of applied events, kept until the watermark is
      ``delay`` past them, so that later copies are dropped.
    """

    def __init__(self, tick: float, delay: float) -> None:
        self.tick = tick
        self.delay = delay

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.clock = handle.getValueState("clock", "last_seen double, expires double, wake bigint")
        self.buffer = handle.getListState("buffer", "ts double, rank int, event_id string")
        self.seen = handle.getListState("seen", "event_id string, ts double")

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        """Buffer the new events and make sure a timer fires once the earliest is complete."""
        arrived: list[_Event] = []
        for frame in rows:
            arrived.extend(
                (float(ts), int(rank), None if pd.isna(event_id) else str(event_id))
                for ts, rank, event_id in zip(
                    frame["ts"], frame["rank"], frame["event_id"], strict=True
                )
            )
        if arrived:
            self.buffer.appendList(arrived)
            last_seen, expires, wake = self._clock()
            earliest = _wake_ms(min(event[0] for event in arrived))
            if wake is None or earliest < wake:
                self._set_clock(last_seen, expires, wake, earliest)
        yield from ()

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        """Apply every buffered event the watermark has passed, then any expiry it has passed."""
        name, timeout = str(key[0]), float(key[1])
        watermark_ms = timerValues.getCurrentWatermarkInMs()
        now = watermark_ms / 1000.0
        buffered = list(self._buffered())
        # Rule order; copies tied on (ts, rank) have the same effect, whichever is kept.
        ready = sorted((event for event in buffered if event[0] <= now), key=_rule_order)
        ahead = [event for event in buffered if event[0] > now]
        seen = {str(row[0]): float(row[1]) for row in self.seen.get()}
        remembered = len(seen)
        last_seen, expires, wake = self._clock()
        expired: list[tuple[float, float]] = []
        for ts, rank, event_id in ready:
            if event_id is not None:
                if event_id in seen:
                    continue
                seen[event_id] = ts
            if expires is not None and last_seen is not None and ts >= expires:
                expired.append((expires, last_seen))
                last_seen = expires = None
            if rank == CLOSE_RANK:
                last_seen = expires = None
            else:
                last_seen, expires = ts, deadline(ts, timeout, self.tick)
        if expires is not None and last_seen is not None and expires <= now:
            expired.append((expires, last_seen))
            last_seen = expires = None
        if ready:
            self._replace(self.buffer, ahead)
        kept = [(eid, ts) for eid, ts in seen.items() if ts + self.delay > now]
        if len(kept) != remembered or ready:
            self._replace(self.seen, kept)
        # The timer that fired is deleted by Spark after this handler returns.
        if wake is not None and wake <= watermark_ms:
            wake = None
        wakes = [_wake_ms(event[0]) for event in ahead]
        if expires is not None:
            wakes.append(_wake_ms(expires))
        if kept:
            # Wake up to forget the remembered ids once no copy of them can come any more.
            wakes.append(_wake_ms(min(ts for _eid, ts in kept) + self.delay))
        next_wake = min(wakes) if wakes else None
        if next_wake is None:
            # Untracked, nothing buffered, nothing remembered: the group leaves no state.
            self.clock.clear()
            if wake is not None:
                self.handle.deleteTimer(wake)
        else:
            self._set_clock(last_seen, expires, wake, next_wake)
        if expired:
            yield pd.DataFrame(
                {
                    "key": [name] * len(expired),
                    "timeout": [timeout] * len(expired),
                    "expired_at": [e for e, _ in expired],
                    "last_seen": [t for _, t in expired],
                }
            )

    def close(self) -> None:
        """Nothing to release: all state lives in the state store."""

    def _buffered(self) -> Iterator[_Event]:
        for ts, rank, event_id in self.buffer.get():
            yield float(ts), int(rank), None if event_id is None else str(event_id)

    def _clock(self) -> tuple[float | None, float | None, int | None]:
        if not self.clock.exists():
            return None, None, None
        row = self.clock.get()
        if row is None:
            return None, None, None
        last_seen, expires, wake = row
        return (
            None if last_seen is None else float(last_seen),
            None if expires is None else float(expires),
            None if wake is None else int(wake),
        )

    def _set_clock(
        self,
        last_seen: float | None,
        expires: float | None,
        wake: int | None,
        next_wake: int | None,
    ) -> None:
        """Store the clock, moving the group's one timer from ``wake`` to ``next_wake``."""
        if next_wake != wake:
            if wake is not None:
                self.handle.deleteTimer(wake)
            if next_wake is not None:
                self.handle.registerTimer(next_wake)
        self.clock.update((last_seen, expires, next_wake))

    @staticmethod
    def _replace(state: Any, values: list[Any]) -> None:
        if values:
            state.put(values)
        else:
            state.clear()


def expiry_stream(
    events: DataFrame,
    *,
    timeouts: Sequence[float],
    tick: float,
    delay: float = 10.0,
) -> DataFrame:
    """The streaming expiries of a streaming DataFrame of events: the job without its ends.

    ``events`` is any streaming DataFrame in the event log format (a file source, Kafka, ...);
    the result has the columns of :data:`EXPIRY_SCHEMA`, in append mode. ``delay`` is the
    watermark delay in seconds: how late, in event time, an event may still arrive.
    """
    timeouts = check_timeouts(timeouts)
    tick = check_tick(tick)
    if isinstance(delay, bool) or not isinstance(delay, (int, float)):
        raise TypeError(f"delay must be an int or a float, got {delay!r}")
    if not (math.isfinite(delay) and delay >= 0):
        raise ValueError(f"delay must be finite and >= 0 seconds, got {delay!r}")
    keyed = (
        normalize_events(events)
        .select(
            "key",
            F.explode(F.array(*[F.lit(t) for t in timeouts])).alias("timeout"),
            "ts",
            kind_rank(F.col("kind")).alias("rank"),
            "event_id",
            F.timestamp_micros(F.floor(F.col("ts") * F.lit(1_000_000.0))).alias("event_time"),
        )
        .withWatermark("event_time", f"{round(delay * 1000)} milliseconds")
    )
    return keyed.groupBy("key", "timeout").transformWithStateInPandas(
        statefulProcessor=IdleExpiryProcessor(tick, float(delay)),
        outputStructType=EXPIRY_SCHEMA,
        outputMode="Append",
        timeMode="EventTime",
    )


def stream(
    spark: SparkSession,
    source: str,
    *,
    output: str,
    checkpoint: str,
    timeouts: Sequence[float],
    tick: float,
    delay: float = 10.0,
    format: EventFormat = "parquet",
    schema: StructType | str | None = None,
    processing_time: str | None = None,
    max_files_per_trigger: int | None = None,
    query_name: str | None = None,
) -> StreamingQuery:
    """Start the streaming idle-expiry job from a directory of event files; returns the query.

    Args:
        source: a directory the event files land in (Parquet, JSON lines or CSV with a
            header, see ``format``); subdirectories are read too.
        output: directory of the Parquet sink (columns of :data:`EXPIRY_SCHEMA`).
        checkpoint: the query's checkpoint directory; restart with the same one to continue.
        timeouts, tick: as for :func:`aiowheel.spark.replay`.
        delay: the watermark delay in seconds: how late (in event time) an event may arrive.
        schema: of the source files; default :data:`aiowheel.spark.events.EVENT_SCHEMA` (give
            ``ts`` as TIMESTAMP here if the files hold timestamps).
        processing_time: ``None`` processes what is there and stops (trigger ``availableNow``);
            an interval such as ``"10 seconds"`` keeps running, one micro-batch per interval.
        max_files_per_trigger: cap on new files per micro-batch.

    The query needs ``spark.sql.streaming.stateStore.providerClass`` set to RocksDB before it
    first starts (:func:`aiowheel.spark.spark_session` does this).
    """
    if format not in ("parquet", "json", "csv"):
        raise ValueError(f"format must be 'parquet', 'json' or 'csv', got {format!r}")
    reader = spark.readStream.schema(schema if schema is not None else EVENT_SCHEMA).option(
        "recursiveFileLookup", "true"
    )
    if max_files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", str(max_files_per_trigger))
    if format == "csv":
        reader = reader.option("header", "true")
    expiries = expiry_stream(
        reader.format(format).load(source), timeouts=timeouts, tick=tick, delay=delay
    )
    writer = (
        expiries.writeStream.format("parquet")
        .option("path", output)
        .option("checkpointLocation", checkpoint)
        .outputMode("append")
    )
    if query_name is not None:
        writer = writer.queryName(query_name)
    if processing_time is None:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=processing_time)
    return writer.start()


def watermark(query: StreamingQuery) -> float | None:
    """The query's event-time watermark in seconds after its last micro-batch, or None.

    Compare the sink's content with ``replay(events, horizon=watermark(query))``.
    """
    progress = query.lastProgress
    if not progress:
        return None
    stamp = progress.get("eventTime", {}).get("watermark")
    if stamp is None:
        return None
    moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds()


def write_stream_files(
    events: DataFrame, directory: str, *, files: int, format: EventFormat = "parquet"
) -> list[str]:
    """Split ``events`` by arrival into ``files`` consecutive slices, one folder each.

    Slice ``i`` holds the events whose ``arrival`` (or ``ts``, if there is no arrival column)
    falls in the ``i``-th equal part of the log's arrival span, and is written to
    ``directory/slice-00000i``; returns those folders in order. Handing them to
    :func:`stream`'s source one by one replays how a collector would have written the log.
    """
    if files < 1:
        raise ValueError(f"files must be >= 1, got {files!r}")
    arrival = F.col("arrival") if "arrival" in events.columns else F.col("ts")
    bounds = events.agg(F.min(arrival), F.max(arrival)).first()
    if bounds is None or bounds[0] is None:
        raise ValueError("cannot split an empty event log")
    low, high = float(bounds[0]), float(bounds[1])
    width = (high - low) / files or 1.0
    sliced = events.withColumn(
        "slice", F.least(F.floor((arrival - F.lit(low)) / F.lit(width)), F.lit(files - 1))
    )
    folders = []
    for index in range(files):
        folder = f"{directory.rstrip('/')}/slice-{index:06d}"
        part = sliced.filter(F.col("slice") == index).drop("slice").coalesce(1)
        writer = part.write.mode("overwrite")
        if format == "csv":
            writer = writer.option("header", "true")
        writer.format(format).save(folder)
        folders.append(folder)
    return folders
