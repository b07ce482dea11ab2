"""The distributed idle-expiry service: a Structured Streaming job with state and timers.

This module owns :func:`stream`, which emits, from a directory of event files that keeps
growing, the same expiries as :func:`aiowheel.spark.replay` for the same events. Keys are
hashed into shards (:mod:`aiowheel.spark._shard`); each shard is one group of
``transformWithStateInPandas`` (:class:`_IdleExpiryPandasProcessor`, the default) or of
``transformWithState`` (:class:`_IdleExpiryProcessor`), with its keys in pages of a map state, one
event-time timer, its state in the RocksDB state store, and the query checkpointed: a stop and
a restart lose no expiry and emit none twice (the Parquet sink commits each micro-batch exactly
once with the checkpoint).

Event time and the watermark. Events may arrive out of order; the watermark (the largest
``ts`` seen, minus ``delay``) says how far the log is complete. The processor buffers each
key's events and applies them only once the watermark has passed them, in ``(ts, kind)`` order,
so arrival order never matters; an expiry at ``E`` is emitted once the watermark reaches ``E``
(no event before ``E`` can still come). Hence the guarantee: when the watermark stands at
``W``, the expiries emitted so far are exactly ``replay(events, horizon=W)`` — provided no event
arrives later than ``delay`` after the log's largest ``ts`` at that time (Spark drops such late
events) and copies of one ``event_id`` lie within ``delay`` of each other in ``ts``. The
expiries between ``W`` and the log's end come out as time (the watermark) moves on.

Spark's event time is ``ts`` moved :data:`EVENT_TIME_SHIFT` seconds later. Spark starts every
query's watermark at the epoch and drops each event at or before the watermark, so an event at
``ts <= 0`` (a generated log starts at 0) would be lost in the first micro-batch, though
``replay`` counts it; shifted, ``ts`` may be anything after 1843 (``-EVENT_TIME_SHIFT``). The
processors take the watermark and the timers back by the same amount: the state, the expiries
and :func:`watermark` are in ``ts`` seconds, as before.
"""

from __future__ import annotations

import gc
import json
from collections import defaultdict
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal, NamedTuple

import pandas as pd  # type: ignore[import-untyped]
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, GroupedData, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import (
    BinaryType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from aiowheel import _impl
from aiowheel._checks import check_count, check_length
from aiowheel.spark import _shard
from aiowheel.spark._keystate import Event
from aiowheel.spark._shard import ExpiryRow
from aiowheel.spark.events import (
    EVENT_COLUMNS,
    EVENT_SCHEMA,
    EventFormat,
    _kind_rank,
    normalize_events,
)
from aiowheel.spark.replay import _check_tick, _check_timeouts

__all__ = [
    "EVENT_TIME_SHIFT",
    "EXPIRY_SCHEMA",
    "SHARDS_PER_PARTITION",
    "Api",
    "check_checkpoint",
    "expiry_stream",
    "stream",
    "watermark",
    "write_stream_files",
]

EXPIRY_SCHEMA = "key string, timeout double, expired_at double, last_seen double"
_EXPIRY_TYPE = StructType(
    [
        StructField("key", StringType()),
        StructField("timeout", DoubleType()),
        StructField("expired_at", DoubleType()),
        StructField("last_seen", DoubleType()),
    ]
)

# Spark's event time is ts moved this many seconds later (see the module documentation), and
# so its watermark and the timers the processors register; a whole number of milliseconds.
EVENT_TIME_SHIFT: Final = 4_000_000_000
_SHIFT_MS: Final = EVENT_TIME_SHIFT * 1000
_SHIFT_US: Final = EVENT_TIME_SHIFT * 1_000_000

# A shard's index in the state store (aiowheel.spark._shard.INDEX_FIELDS): one value state.
INDEX_TYPE = StructType(
    [
        StructField("wakes", BinaryType(), nullable=False),
        StructField("upto", LongType(), nullable=False),
        StructField("timer", LongType()),
        StructField("shards", IntegerType(), nullable=False),
    ]
)
# A shard's pages: one map state, page -> its keys (aiowheel.spark._shard.PAGE_FIELDS).
PAGE_KEY_TYPE = StructType([StructField("page", LongType(), nullable=False)])
PAGE_TYPE = StructType([StructField("keys", BinaryType(), nullable=False)])
# The shard's index, by the name of its state variable.
INDEX_STATE = "shard_index"
# The former layouts, by a state variable only they have: a checkpoint holding one is refused
# (see _refuse_other_layout). "shard": one pickled value per shard, before pages; "index": the
# index's name while Spark's event time was ts itself, before EVENT_TIME_SHIFT (its timers and
# watermark would read 4e9 s early).
_FORMER_LAYOUTS: Final = {
    "shard": "one pickled value per shard",
    "index": "pages, with Spark's event time not shifted",
}

Api = Literal["row", "pandas"]

# Each operator by its user-facing name, and the name of the physical operator that Spark
# records for it in the checkpoint's state metadata (which Spark's "state-metadata" source
# reads back). Spark refuses a restart with the other operator; stream() says so first.
_OPERATORS: dict[str, tuple[str, str]] = {
    "row": ("transformWithState", "transformWithStateInPySparkExec"),
    "pandas": ("transformWithStateInPandas", "transformWithStateInPandasExec"),
}

# Shards per shuffle partition when not given: enough that hashing spreads them evenly over
# the partitions, few enough that each holds many keys (see docs/spark.md for sizing).
SHARDS_PER_PARTITION = 8


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block, then back as it was.

    A visit decodes, builds and encodes tens of thousands of small tuples, lists and dicts,
    none of them in a reference cycle: reference counting frees every one. Each allocation
    still counts towards the collector's next pass, which walks every tracked object of the
    Python worker (PySpark's, pandas' and the pages just decoded): left on, the collector took
    about 30 % of a visit in the benchmark's replay of a shard (docs/spark.md). The handlers
    return their output eagerly, and free the events they grouped before the block ends: the
    objects a block leaves alive count towards the collector's next pass, which the first
    allocation after it then starts, and which would walk every event of the visit (one
    tuple each) just before they go.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class _ShardVisits(StatefulProcessor):
    """What both processors share: each group is a shard (:mod:`aiowheel.spark._shard`), with
    an index (one value state, which also holds the small pages), its other pages (one map
    state) and at most one timer. A visit costs one read and one write (or clear) of the index,
    a read and a write (or removal) of each page it touches in the map state, and a timer move
    only when the shard's timer must move.

    The rule and the shard's visit are the ``rule`` and ``visit`` twins of
    :data:`aiowheel._impl.EDGE_TWINS`, chosen by each Python worker in :meth:`init`: the
    compiled ones where they are built, else the pure ones (same results).
    A driver that runs pure Python (``AIOWHEEL_NO_EXTENSIONS``, or no compiled core) has its
    workers run the pure twins too: Spark ships the processor pickled, with that choice. A driver
    with the compiled core leaves the choice to each worker, whose aiowheel may be a wheel
    shipped as a zip (``--py-files``), which cannot load a compiled part (docs/spark.md).
    """

    def __init__(self, timeouts: Sequence[float], tick: float, delay: float, shards: int) -> None:
        self.timeouts = tuple(timeouts)
        self.tick = tick
        self.delay = delay
        # None: the worker's own choice; "pure": the driver's (see the class documentation).
        self.implementation = "pure" if _impl.implementation_named(None) is _impl.PURE else None
        self.width = _shard.slot_width(self.timeouts)
        self.shards = shards

    def init(self, handle: StatefulProcessorHandle) -> None:
        twin = _impl.edge_twin("rule", self.implementation)
        self.rule = twin.IdleRule(self.timeouts, self.tick, self.delay)
        # add_events and visit: aiowheel.spark._visit or its compiled twin.
        self.shard_visit = _impl.edge_twin("visit", self.implementation)
        self.handle = handle
        self.index = handle.getValueState(INDEX_STATE, INDEX_TYPE)
        self.pages = handle.getMapState("pages", PAGE_KEY_TYPE, PAGE_TYPE)

    def close(self) -> None:
        """Nothing to release: all state lives in the state store."""

    def _visit(
        self, arrived: dict[str, list[Event]], spark_watermark: int, spark_firing: int | None
    ) -> list[ExpiryRow]:
        """Visit the shard at Spark's watermark, for the timer that fired (or None): both in
        Spark's event time (ms), :data:`EVENT_TIME_SHIFT` after ``ts``."""
        watermark = spark_watermark - _SHIFT_MS
        firing = None if spark_firing is None else spark_firing - _SHIFT_MS
        row = self.index.get()  # None when the shard has no state: no separate exists() call
        before = _shard.load(row, self.shards)
        outcome: _shard.ShardVisit = self.shard_visit.visit(
            self.rule, before, arrived, watermark, self._read, width=self.width, firing=firing
        )
        for page, value in outcome.pages.items():
            if value is None:
                self.pages.removeKey((page,))
            else:
                self.pages.updateValue((page,), value)
        after = outcome.shard
        # Spark deletes the timer that fired once the handler returns.
        old = None if before is None or before.timer == firing else before.timer
        new = None if after is None else after.timer
        if old != new:
            if old is not None:
                self.handle.deleteTimer(old + _SHIFT_MS)
            if new is not None:
                self.handle.registerTimer(new + _SHIFT_MS)
        if after is not None:
            self.index.update(_shard.dump(after, self.shards))
        elif before is not None:
            self.index.clear()
        return outcome.expiries

    def _read(self, pages: Collection[int] | None) -> dict[int, _shard.PageRow]:
        """The stored pages among ``pages`` (all for None), as stored: one state call each,
        or, for all of them, one pass of the map's iterator (which fetches its entries in
        batches)."""
        if pages is None:
            return {page: value for (page,), value in self.pages.iterator()}
        found = {}
        for page in pages:
            value = self.pages.getValue((page,))
            if value is not None:
                found[page] = value
        return found


class _IdleExpiryProcessor(_ShardVisits):
    """The idle-expiry rule per shard for ``transformWithState`` (rows in, rows out)."""

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        """Add the keys' new events; apply and emit what the watermark has passed."""
        with _collector_paused():
            arrived: dict[str, list[Event]] = defaultdict(list)
            # By position, unpacked as a tuple (a Row's own indexing is Python code).
            for name, ts, rank, event_id, _event_time, _group in rows:
                arrived[name].append((ts, rank, event_id))
            expiries = self._visit(arrived, timerValues.getCurrentWatermarkInMs(), None)
            del arrived  # freed with the collector off: see _collector_paused
            return _rows(expiries)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[Row]:
        """Apply and emit what the watermark has passed; set the next timer."""
        with _collector_paused():
            expiries = self._visit(
                {}, timerValues.getCurrentWatermarkInMs(), expiredTimerInfo.getExpiryTimeInMs()
            )
            return _rows(expiries)


class _IdleExpiryPandasProcessor(_ShardVisits):
    """The same rule for ``transformWithStateInPandas`` (pandas DataFrames in and out)."""

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        """Add the keys' new events; apply and emit what the watermark has passed."""
        with _collector_paused():
            arrived: dict[str, list[Event]] = {}
            for frame in rows:
                self.shard_visit.add_events(
                    arrived,
                    frame["key"].tolist(),
                    frame["ts"].tolist(),
                    frame["rank"].tolist(),
                    frame["event_id"].tolist(),
                )
            expiries = self._visit(arrived, timerValues.getCurrentWatermarkInMs(), None)
            del arrived  # freed with the collector off: see _collector_paused
            return _frames(expiries)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        """Apply and emit what the watermark has passed; set the next timer."""
        with _collector_paused():
            expiries = self._visit(
                {}, timerValues.getCurrentWatermarkInMs(), expiredTimerInfo.getExpiryTimeInMs()
            )
            return _frames(expiries)


def _rows(expiries: list[ExpiryRow]) -> Iterator[Row]:
    return iter(
        [
            Row(key=key, timeout=timeout, expired_at=expired_at, last_seen=last_seen)
            for key, timeout, expired_at, last_seen in expiries
        ]
    )


def _frames(expiries: list[ExpiryRow]) -> Iterator[pd.DataFrame]:
    if not expiries:
        return iter([])
    return iter([pd.DataFrame(expiries, columns=list(_EXPIRY_TYPE.names))])


def expiry_stream(
    events: DataFrame,
    *,
    timeouts: Sequence[float],
    tick: float,
    delay: float = 10.0,
    shards: int | None = None,
    api: Api = "pandas",
) -> DataFrame:
    """The streaming expiries of a streaming DataFrame of events: the job without its ends.

    ``events`` is any streaming DataFrame in the event log format (a file source, Kafka, ...);
    the result has the columns of :data:`EXPIRY_SCHEMA`, in append mode. ``delay`` is the
    watermark delay in seconds: how late, in event time, an event may still arrive. ``api``
    picks the operator: ``"pandas"`` (the default) is ``transformWithStateInPandas``,
    ``"row"`` is ``transformWithState`` (slower per micro-batch in the benchmark, see
    docs/spark.md); both run the same rule on the same state, but a checkpoint stays with the
    operator that wrote it (Spark fails a restart with the other). ``shards`` is the number of
    groups keys are hashed into (default: 8 per shuffle partition); a restart from a checkpoint
    must keep it.
    """
    timeouts = _check_timeouts(timeouts)
    tick = _check_tick(tick)
    delay = float(check_length(delay, "delay", zero_ok=True))
    _check_api(api)
    if shards is None:
        partitions = events.sparkSession.conf.get("spark.sql.shuffle.partitions") or "200"
        shards = SHARDS_PER_PARTITION * int(partitions)
    else:
        shards = check_count(shards, "shards", 1, 2**31 - 1, optional=True)
    grouped = _by_shard(events, delay, shards)
    if api == "row":
        return grouped.transformWithState(
            statefulProcessor=_IdleExpiryProcessor(timeouts, tick, delay, shards),
            outputStructType=_EXPIRY_TYPE,
            outputMode="Append",
            timeMode="EventTime",
        )
    return grouped.transformWithStateInPandas(
        statefulProcessor=_IdleExpiryPandasProcessor(timeouts, tick, delay, shards),
        outputStructType=_EXPIRY_TYPE,
        outputMode="Append",
        timeMode="EventTime",
    )


def _by_shard(events: DataFrame, delay: float, shards: int) -> GroupedData:
    """``events`` as :func:`_keyed` gives them, grouped by shard. The benchmark's floor query
    groups the same way."""
    return _keyed(events, delay, shards).groupBy("shard")


def _keyed(events: DataFrame, delay: float, shards: int) -> DataFrame:
    """``events`` with the columns the processors read, watermarked.

    The processors read rows by position: key, ts, rank, event_id, event_time, shard
    (event_time carries the watermark, by which Spark drops late events before they reach a
    processor: ``ts`` moved :data:`EVENT_TIME_SHIFT` seconds later). Every column costs the
    row operator a conversion per row: keep them few.
    """
    return (
        normalize_events(events)
        .select(
            "key",
            "ts",
            _kind_rank(F.col("kind")).alias("rank"),
            "event_id",
            F.timestamp_micros(F.floor(F.col("ts") * F.lit(1_000_000.0)) + F.lit(_SHIFT_US)).alias(
                "event_time"
            ),
            F.pmod(F.xxhash64("key"), F.lit(shards)).cast("int").alias("shard"),
        )
        .withWatermark("event_time", f"{round(delay * 1000)} milliseconds")
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
    shards: int | None = None,
    api: Api = "pandas",
) -> StreamingQuery:
    """Start the streaming idle-expiry job from a directory of event files; returns the query.

    Args:
        source: a directory the event files land in (Parquet, JSON lines or CSV with a
            header, see ``format``); subdirectories are read too.
        output: directory of the Parquet sink (columns of :data:`EXPIRY_SCHEMA`).
        checkpoint: the query's checkpoint directory; restart with the same one to continue.
        timeouts, tick: as for :func:`aiowheel.spark.replay`.
        delay: the watermark delay in seconds: how late (in event time) an event may arrive.
        schema: of the source files; by default, for Parquet, the types of the files already
            in ``source`` (a ``ts`` of double seconds or a TIMESTAMP; one type per source), or
            :data:`aiowheel.spark.events.EVENT_SCHEMA` while it is empty; for JSON lines and
            CSV, text, as :func:`aiowheel.spark.read_events` reads them.
        processing_time: ``None`` processes what is there and stops (trigger ``availableNow``);
            an interval such as ``"10 seconds"`` keeps running, one micro-batch per interval.
        max_files_per_trigger: cap on new files per micro-batch (a whole number >= 1), or None
            for every file that has landed.
        shards: see :func:`expiry_stream`; by default 8 per shuffle partition, and for a
            checkpoint with state 8 per partition it was started with (Spark keeps those).
        api: the operator (see :func:`expiry_stream`). A checkpoint stays with the operator it
            was started with: a restart with the other one raises ValueError naming both.

    The query needs ``spark.sql.streaming.stateStore.providerClass`` set to RocksDB before it
    first starts (:func:`aiowheel.spark.spark_session` does this).
    """
    if format not in ("parquet", "json", "csv"):
        raise ValueError(f"format must be 'parquet', 'json' or 'csv', got {format!r}")
    _check_api(api)
    if max_files_per_trigger is not None:
        max_files_per_trigger = check_count(
            max_files_per_trigger, "max_files_per_trigger", 1, 2**31 - 1, optional=True
        )
    stored = _stored_state(spark, checkpoint)
    _refuse_other_layout(stored)
    _refuse_other_operator(stored, api)
    if shards is None and stored:
        # Spark keeps the shuffle partitions a checkpoint was started with, whatever the
        # session's setting now: so do the shards that default to them.
        shards = SHARDS_PER_PARTITION * stored[0].partitions
    if schema is None:
        schema = _source_schema(spark, source, format)
    reader = spark.readStream.schema(schema).option("recursiveFileLookup", "true")
    if max_files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", str(max_files_per_trigger))
    if format == "csv":
        reader = reader.option("header", "true")
    expiries = expiry_stream(
        reader.format(format).load(source),
        timeouts=timeouts,
        tick=tick,
        delay=delay,
        shards=shards,
        api=api,
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


# JSON lines and CSV read as text, as read_events reads them: a ts written as a number or as
# a date then reads alike, and normalize_events turns it into seconds.
_TEXT_SCHEMA = StructType([StructField(name, StringType()) for name in EVENT_COLUMNS])


def _source_schema(spark: SparkSession, source: str, format: EventFormat) -> StructType:
    """The schema to stream ``source`` with, when the caller gives none.

    Parquet files carry their types: the event columns are taken from the files already in
    ``source`` (so a ``ts`` stored as a TIMESTAMP reads as one), or from
    :data:`~aiowheel.spark.events.EVENT_SCHEMA` while there is none. JSON lines and CSV are
    read as text, as :func:`~aiowheel.spark.events.read_events` reads them.
    """
    if format != "parquet":
        return _TEXT_SCHEMA
    try:
        found = spark.read.option("recursiveFileLookup", "true").parquet(source).schema
    except AnalysisException:  # no file yet (or no folder): Spark cannot infer a schema
        return EVENT_SCHEMA
    names = set(found.fieldNames())
    return StructType(
        [found[name] if name in names else EVENT_SCHEMA[name] for name in EVENT_COLUMNS]
    )


def _check_api(api: str) -> None:
    if api not in _OPERATORS:
        raise ValueError(f"api must be 'row' or 'pandas', got {api!r}")


def _operator(api: str) -> str:
    return f"api={api!r} ({_OPERATORS[api][0]})"


def check_checkpoint(spark: SparkSession, checkpoint: str, api: Api) -> None:
    """Refuse to go on from ``checkpoint`` if this stream cannot: raise ValueError saying what
    to do, before any query starts.

    Both operators keep the same state, but Spark records which physical operator wrote it and
    fails a restart with the other one in its first micro-batch: that is refused naming both.
    So is a checkpoint whose state is in the former layout (one pickled value per shard). This
    reads the checkpoint's state metadata (nothing, for a new checkpoint or one without state
    yet).
    """
    stored = _stored_state(spark, checkpoint)
    _refuse_other_layout(stored)
    _refuse_other_operator(stored, api)


class _StoredOperator(NamedTuple):
    """A stateful operator of a checkpoint, as Spark's "state-metadata" source records it."""

    physical: str
    partitions: int
    # The names of its state variables (for transformWithState: the processor's).
    variables: frozenset[str]


def _stored_state(spark: SparkSession, checkpoint: str) -> list[_StoredOperator]:
    """The stateful operators of ``checkpoint``: Spark's own record of them, read with its
    "state-metadata" source (none for a new checkpoint)."""
    metadata = spark.read.format("state-metadata").load(checkpoint)
    rows = metadata.select("operatorName", "numPartitions", "operatorProperties").collect()
    return [
        _StoredOperator(physical, partitions, _state_variables(properties))
        for physical, partitions, properties in rows
    ]


def _state_variables(properties: str | None) -> frozenset[str]:
    if not properties:
        return frozenset()
    variables = json.loads(properties).get("stateVariables", [])
    return frozenset(variable["stateName"] for variable in variables)


def _refuse_other_layout(stored: list[_StoredOperator]) -> None:
    """Refuse a checkpoint whose state is in a former layout (:data:`_FORMER_LAYOUTS`), which
    this version neither reads nor converts."""
    for operator in stored:
        for variable, layout in _FORMER_LAYOUTS.items():
            if variable in operator.variables:
                raise ValueError(
                    f"this checkpoint's state is in a former layout ({layout}, state "
                    f"{variable!r}), which this aiowheel does not read: finish it with the "
                    "aiowheel that started it, or start a new checkpoint"
                )


def _refuse_other_operator(stored: list[_StoredOperator], api: Api) -> None:
    written = {operator.physical for operator in stored}
    for stored_api, (_name, physical) in _OPERATORS.items():
        if physical in written and stored_api != api:
            raise ValueError(
                f"this checkpoint's state was written by {_operator(stored_api)}, not "
                f"{_operator(api)}: restart with api={stored_api!r}, or start a new checkpoint"
            )


def watermark(query: StreamingQuery) -> float | None:
    """The query's event-time watermark in ``ts`` seconds after its last micro-batch, or None
    before any micro-batch and while no event has set one.

    Compare the sink's content with ``replay(events, horizon=watermark(query))``.
    """
    progress = query.lastProgress
    if not progress:
        return None
    stamp = progress.get("eventTime", {}).get("watermark")
    if stamp is None:
        return None
    moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    # In whole milliseconds, as Spark keeps it: seconds as a float this far from the epoch
    # would be off by a fraction of a microsecond, and replay's horizon must be exact.
    spark_ms = (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
    if spark_ms <= 0:  # Spark's start: no event has set the watermark yet
        return None
    return (spark_ms - _SHIFT_MS) / 1000


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
