"""The connection-event log: its schema, readers and writers, and normalisation.

This module owns the log format every other part of the pipeline reads:

=========  ======================  ==================================================
column     type                    meaning
=========  ======================  ==================================================
key        string, not null        connection or user id
ts         double seconds, or a    when the event happened, in the timer's clock
           timestamp, not null
kind       string, not null        ``open`` or ``data`` (a touch) or ``close``
event_id   string, may be null     delivery id; copies with the same id count once
=========  ======================  ==================================================

Extra columns (such as the generator's ``arrival``) are ignored. :func:`normalize_events` turns
any accepted input into exactly these four columns with ``ts`` as double seconds, and fails the
Spark job with a message naming the bad value for a null key or time, a NaN or infinite time, or
an unknown kind. It also orders ``kind`` for ties: events of one key at the same ``ts`` are
applied as ``open``, then ``data``, then ``close`` (:data:`KIND_RANK`).
"""

from __future__ import annotations

import os
import weakref
from typing import Literal

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DataType,
    DoubleType,
    NumericType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

__all__ = [
    "EVENT_COLUMNS",
    "EVENT_SCHEMA",
    "KINDS",
    "KIND_RANK",
    "EventFormat",
    "normalize_events",
    "read_events",
    "write_events",
]

EventFormat = Literal["parquet", "json", "csv"]

KINDS = ("open", "data", "close")
# Tie-break between events of one key at the same ts: opens first, closes last.
KIND_RANK = {"open": 0, "data": 1, "close": 2}
_CLOSE_RANK = KIND_RANK["close"]

EVENT_COLUMNS = ("key", "ts", "kind", "event_id")
EVENT_SCHEMA = StructType(
    [
        StructField("key", StringType(), nullable=False),
        StructField("ts", DoubleType(), nullable=False),
        StructField("kind", StringType(), nullable=False),
        StructField("event_id", StringType(), nullable=True),
    ]
)

_SUFFIXES: dict[str, EventFormat] = {
    ".parquet": "parquet",
    ".jsonl": "json",
    ".ndjson": "json",
    ".json": "json",
    ".csv": "csv",
}


def _kind_rank(kind: Column) -> Column:
    """The tie-break rank of a (normalised) ``kind`` column: 0 open, 1 data, 2 close."""
    return (
        F.when(kind == "open", F.lit(0))
        .when(kind == "data", F.lit(1))
        .when(kind == "close", F.lit(2))
    )


def normalize_events(events: DataFrame) -> DataFrame:
    """Return ``events`` as exactly ``key, ts, kind, event_id`` with ``ts`` in double seconds.

    ``ts`` may be numeric, a TIMESTAMP (seconds since the epoch are taken), or a string holding
    either (as CSV and JSON read it). ``kind`` is trimmed and lower-cased. A missing
    ``event_id`` column reads as all null. Raises ValueError at once for a missing column or a
    ``ts`` of an unsupported type; bad values fail the Spark job that reads them.

    A DataFrame this function returned is returned as it is (:func:`read_events` then
    :func:`aiowheel.spark.replay` normalise once); any DataFrame derived from it is checked
    again, which costs little for values already in normal form.
    """
    if events in _NORMALISED:
        return events
    missing = [name for name in ("key", "ts", "kind") if name not in events.columns]
    if missing:
        raise ValueError(
            f"event log lacks column(s) {missing}; expected {list(EVENT_COLUMNS)} "
            f"(event_id optional), got {events.columns}"
        )
    ts = _seconds(F.col("ts"), events.schema["ts"].dataType)
    given = F.col("kind").cast("string")
    kind = F.lower(F.trim(given))
    event_id = (
        F.col("event_id").cast("string")
        if "event_id" in events.columns
        else F.lit(None).cast("string")
    )
    key = F.col("key").cast("string")
    normalised = events.select(
        F.when(key.isNull(), F.raise_error(F.lit("event log: null key")))
        .otherwise(key)
        .alias("key"),
        F.when(
            ts.isNull() | F.isnan(ts) | (F.abs(ts) == F.lit(float("inf"))),
            F.raise_error(
                F.concat(
                    F.lit("event log: ts must be a finite number of seconds or a timestamp, got "),
                    F.coalesce(F.col("ts").cast("string"), F.lit("null")),
                    F.lit(" for key "),
                    key,
                )
            ),
        )
        .otherwise(ts)
        .alias("ts"),
        # Already in normal form (the common case) costs one comparison, not a trim and a copy.
        F.when(given.isin(*KINDS), given)
        .when(kind.isin(*KINDS), kind)
        .otherwise(
            F.raise_error(
                F.concat(
                    F.lit(f"event log: kind must be one of {', '.join(KINDS)}, got "),
                    F.coalesce(kind, F.lit("null")),
                    F.lit(" for key "),
                    key,
                )
            )
        )
        .alias("kind"),
        event_id.alias("event_id"),
    )
    _NORMALISED.add(normalised)
    return normalised


# DataFrames normalize_events returned: by identity, so a DataFrame derived from one (a union
# with raw rows, say) is never taken for normalised.
_NORMALISED: weakref.WeakSet[DataFrame] = weakref.WeakSet()


def _seconds(ts: Column, dtype: DataType) -> Column:
    """``ts`` as double seconds since the epoch, from a number, a timestamp or a string."""
    if isinstance(dtype, NumericType):
        return ts.cast("double")
    if isinstance(dtype, TimestampType):
        return F.unix_micros(ts) / F.lit(1_000_000.0)
    if isinstance(dtype, TimestampNTZType):
        # A timestamp without time zone is read as UTC, whatever the session's zone.
        return F.unix_micros(F.to_utc_timestamp(ts.cast("timestamp"), F.current_timezone())) / (
            F.lit(1_000_000.0)
        )
    if isinstance(dtype, StringType):
        as_time = F.unix_micros(F.try_to_timestamp(ts)) / F.lit(1_000_000.0)
        return F.coalesce(ts.try_cast("double"), as_time)
    raise ValueError(f"event log: ts must be numeric, a timestamp or a string, got {dtype}")


def read_events(spark: SparkSession, path: str, *, format: EventFormat | None = None) -> DataFrame:
    """Read an event log (a file or a directory) and return it normalised.

    ``format`` is ``parquet``, ``json`` (JSON lines) or ``csv`` (with a header line); by
    default it follows the suffix of ``path`` or, for a local directory, of the files in it,
    and falls back to Parquet.
    """
    fmt = format or _guess_format(path)
    if fmt == "parquet":
        raw = spark.read.parquet(path)
    elif fmt == "json":
        # Every field as a string, so a ts written as a number or as a date reads alike.
        raw = spark.read.option("primitivesAsString", "true").json(path)
    elif fmt == "csv":
        raw = spark.read.option("header", "true").csv(path)
    else:
        raise ValueError(f"format must be 'parquet', 'json' or 'csv', got {fmt!r}")
    return normalize_events(raw)


def write_events(
    events: DataFrame, path: str, *, format: EventFormat = "parquet", mode: str = "overwrite"
) -> None:
    """Write ``events`` (any columns) to ``path`` as Parquet, JSON lines or CSV with a header."""
    writer = events.write.mode(mode)
    if format == "parquet":
        writer.parquet(path)
    elif format == "json":
        writer.json(path)
    elif format == "csv":
        writer.option("header", "true").csv(path)
    else:
        raise ValueError(f"format must be 'parquet', 'json' or 'csv', got {format!r}")


def _guess_format(path: str) -> EventFormat:
    suffix = os.path.splitext(path.rstrip("/"))[1].lower()
    if suffix in _SUFFIXES:
        return _SUFFIXES[suffix]
    if os.path.isdir(path):
        for _root, _dirs, files in os.walk(path):
            for name in files:
                if name.startswith(("_", ".")):
                    continue
                found = _SUFFIXES.get(os.path.splitext(name)[1].lower())
                if found is not None:
                    return found
    return "parquet"
