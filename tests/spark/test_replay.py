"""replay on small hand-written logs: every edge of the idle-expiry rule, against the reference."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from idle_reference import Event, reference_expiries
from pyspark.sql import SparkSession

from aiowheel.spark import EVENT_SCHEMA, collect_expiries, replay
from aiowheel.spark.replay import deadline

pytestmark = pytest.mark.spark


def expiries(
    spark: SparkSession,
    rows: Sequence[Event],
    *,
    timeouts: Sequence[float] = (30.0,),
    tick: float = 1.0,
    horizon: float | None = None,
) -> set[tuple[str, float, float, float]]:
    """replay's expiries as plain tuples, after checking they equal the reference's."""
    events = spark.createDataFrame(list(rows), EVENT_SCHEMA)
    got = collect_expiries(replay(spark, events, timeouts=timeouts, tick=tick, horizon=horizon))
    # Expiry is a NamedTuple: it equals the plain tuple with the same fields.
    expected = reference_expiries(rows, timeouts=timeouts, tick=tick, horizon=horizon)
    assert got == expected
    return expected


def test_basic_expiry(spark: SparkSession) -> None:
    rows = [("a", 0.0, "open", None), ("a", 10.0, "data", None), ("a", 100.0, "data", None)]
    assert expiries(spark, rows) == {("a", 30.0, 40.0, 10.0)}


def test_touch_before_deadline_keeps_key(spark: SparkSession) -> None:
    rows = [("a", 0.0, "open", None), ("a", 29.0, "data", None), ("a", 58.0, "data", None)]
    assert expiries(spark, rows) == set()


def test_touch_exactly_at_deadline_is_too_late_and_starts_a_new_period(
    spark: SparkSession,
) -> None:
    rows = [("a", 0.0, "open", None), ("a", 30.0, "data", None), ("b", 90.0, "data", None)]
    assert expiries(spark, rows) == {("a", 30.0, 30.0, 0.0), ("a", 30.0, 60.0, 30.0)}


def test_close_before_deadline_stops_tracking(spark: SparkSession) -> None:
    rows = [("a", 0.0, "open", None), ("a", 29.0, "close", None), ("b", 100.0, "data", None)]
    assert expiries(spark, rows) == set()


def test_close_exactly_at_deadline_comes_too_late(spark: SparkSession) -> None:
    rows = [("a", 0.0, "open", None), ("a", 30.0, "close", None), ("b", 100.0, "data", None)]
    assert expiries(spark, rows) == {("a", 30.0, 30.0, 0.0)}


def test_touch_after_close_starts_tracking_again(spark: SparkSession) -> None:
    rows = [
        ("a", 0.0, "open", None),
        ("a", 5.0, "close", None),
        ("a", 50.0, "data", None),
        ("b", 100.0, "data", None),
    ]
    assert expiries(spark, rows) == {("a", 30.0, 80.0, 50.0)}


def test_ties_apply_open_then_data_then_close(spark: SparkSession) -> None:
    # At ts 5: the close comes last whatever the input order, so "a" is untracked after it;
    # "b" gets open and close at 5 then data at 5.5: tracked from 5.5.
    rows = [
        ("a", 0.0, "open", None),
        ("a", 5.0, "close", None),
        ("a", 5.0, "data", None),
        ("b", 5.0, "close", None),
        ("b", 5.0, "open", None),
        ("b", 5.5, "data", None),
        ("c", 100.0, "data", None),
    ]
    assert expiries(spark, rows) == {("b", 30.0, 36.0, 5.5)}


def test_duplicates_by_event_id_count_once(spark: SparkSession) -> None:
    # The copy of "a-2" at 40 would start a second period if it counted; the first copy (by ts)
    # is kept. Null ids are never duplicates of each other.
    rows = [
        ("a", 0.0, "open", "a-1"),
        ("a", 10.0, "data", "a-2"),
        ("a", 40.0, "data", "a-2"),
        ("a", 10.0, "data", "a-2"),
        ("b", 0.0, "open", None),
        ("b", 0.0, "open", None),
        ("c", 100.0, "data", None),
    ]
    assert expiries(spark, rows) == {("a", 30.0, 40.0, 10.0), ("b", 30.0, 30.0, 0.0)}


def test_out_of_order_arrival_is_sorted_per_key(spark: SparkSession) -> None:
    rows = [
        ("a", 50.0, "data", None),
        ("a", 25.0, "data", None),
        ("a", 0.0, "open", None),
        ("a", 100.0, "close", None),
    ]
    assert expiries(spark, rows) == {("a", 30.0, 80.0, 50.0)}


def test_reconnect_after_expiry(spark: SparkSession) -> None:
    rows = [
        ("a", 0.0, "open", None),
        ("a", 20.0, "data", None),
        ("a", 70.0, "open", None),
        ("a", 90.0, "data", None),
        ("a", 95.0, "close", None),
    ]
    assert expiries(spark, rows) == {("a", 30.0, 50.0, 20.0)}


def test_several_timeouts_in_one_pass(spark: SparkSession) -> None:
    rows = [("a", 0.0, "open", None), ("a", 25.0, "data", None), ("a", 100.0, "data", None)]
    assert expiries(spark, rows, timeouts=[10.0, 30.0, 80.0]) == {
        ("a", 10.0, 10.0, 0.0),
        ("a", 10.0, 35.0, 25.0),
        ("a", 30.0, 55.0, 25.0),
    }


def test_horizon_emits_deadline_at_horizon_and_keeps_later_ones_pending(
    spark: SparkSession,
) -> None:
    rows = [("a", 0.0, "open", None), ("b", 10.0, "open", None), ("c", 30.0, "data", None)]
    # Default horizon 30: "a" expires at 30 == horizon, "b" (40) and "c" (60) are pending.
    assert expiries(spark, rows) == {("a", 30.0, 30.0, 0.0)}
    assert expiries(spark, rows, horizon=40.0) == {("a", 30.0, 30.0, 0.0), ("b", 30.0, 40.0, 10.0)}
    # A horizon before the log's end ignores the events after it.
    assert expiries(spark, rows, horizon=29.0) == set()


def test_deadline_rounds_up_to_the_tick(spark: SparkSession) -> None:
    rows = [("a", 0.3, "open", None), ("a", 30.9, "data", None), ("b", 100.0, "data", None)]
    # 0.3 + 30 = 30.3 rounds up to 31 with tick 1: the touch at 30.9 is still in time.
    assert expiries(spark, rows) == {("a", 30.0, 61.0, 30.9)}
    # With tick 0.25, 30.3 rounds up to 30.5: the touch at 30.9 comes too late.
    assert expiries(spark, rows, tick=0.25) == {("a", 30.0, 30.5, 0.3), ("a", 30.0, 61.0, 30.9)}


def test_deadline_is_when_the_wheel_fires_on_awkward_floats() -> None:
    from aiowheel._wheel import HierarchicalWheel

    for tick in (0.001, 0.01, 0.1, 0.3, 1 / 3, 7.0):
        for last_seen in (0.1, 0.7, 12.345, 1e6 + 0.001, 1.7e9 + 0.123):
            for timeout in (0.2, 29.999, 30.0):
                wheel: HierarchicalWheel[str] = HierarchicalWheel(tick=tick, start=last_seen)
                wheel.add(last_seen + timeout, "key")
                fired_at = None
                while fired_at is None:
                    now = wheel.next_deadline()
                    assert now is not None
                    if wheel.advance(now):
                        fired_at = now
                expected = fired_at
                assert deadline(last_seen, timeout, tick) == expected
                assert expected >= last_seen + timeout
                assert math.isfinite(expected)


def test_timestamp_ts_and_strings_are_normalised(spark: SparkSession) -> None:
    from datetime import UTC, datetime

    from pyspark.sql import functions as F

    rows = [
        ("a", datetime(2024, 1, 1, 0, 0, 0, tzinfo=UTC), "OPEN ", None),
        ("a", datetime(2024, 1, 1, 0, 1, 0, tzinfo=UTC), "data", None),
    ]
    events = spark.createDataFrame(rows, "key string, ts timestamp, kind string, event_id string")
    start = datetime(2024, 1, 1, tzinfo=UTC).timestamp()
    got = collect_expiries(replay(spark, events, timeouts=[30.0], tick=1.0))
    assert {tuple(e) for e in got} == {("a", 30.0, start + 30.0, start)}
    strings = events.select("key", F.col("ts").cast("string").alias("ts"), "kind", "event_id")
    assert collect_expiries(replay(spark, strings, timeouts=[30.0], tick=1.0)) == got


def test_bad_arguments_name_the_value(spark: SparkSession) -> None:
    events = spark.createDataFrame([("a", 0.0, "open", None)], EVENT_SCHEMA)
    with pytest.raises(ValueError, match="timeout must be finite and > 0, got 0"):
        replay(spark, events, timeouts=[0], tick=1.0)
    with pytest.raises(ValueError, match="at least one timeout"):
        replay(spark, events, timeouts=[], tick=1.0)
    with pytest.raises(ValueError, match="tick must be finite and > 0, got nan"):
        replay(spark, events, timeouts=[1.0], tick=math.nan)
    with pytest.raises(ValueError, match="lacks column"):
        replay(spark, events.drop("kind"), timeouts=[1.0], tick=1.0)


def test_bad_kind_fails_the_job_with_the_value(spark: SparkSession) -> None:
    events = spark.createDataFrame([("a", 0.0, "ping", None)], EVENT_SCHEMA)
    with pytest.raises(Exception, match="kind must be one of open, data, close, got ping"):
        replay(spark, events, timeouts=[1.0], tick=1.0).collect()
