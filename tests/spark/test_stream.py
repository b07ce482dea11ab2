"""stream: the streaming job emits what replay emits, across a stop and a restart."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from aiowheel.spark import collect_expiries, generate, replay, stream, watermark, write_stream_files

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_stream_equals_replay_across_a_restart(spark: SparkSession, tmp_path: Path) -> None:
    generated = generate(
        spark, connections=1_500, duration=300.0, seed=11, path=str(tmp_path / "log.parquet")
    )
    # Edge cases on their own keys, arriving among the generated events: ties at one ts with
    # and without ids, a touch and a close exactly at the 30 s deadline, a late duplicate.
    edges = spark.createDataFrame(
        [
            ("edge-tie", 100.0, "close", None, 100.0),
            ("edge-tie", 100.0, "data", "t1", 100.0),
            ("edge-tie", 100.0, "open", None, 100.0),
            ("edge-tie", 100.0, "data", None, 100.0),
            ("edge-at", 50.0, "open", "a1", 50.0),
            ("edge-at", 80.0, "data", "a2", 80.0),
            ("edge-close", 60.0, "open", None, 60.0),
            ("edge-close", 90.0, "close", None, 90.0),
            ("edge-dup", 70.0, "open", "d1", 70.0),
            ("edge-dup", 100.0, "data", "d2", 100.0),
            ("edge-dup", 100.0, "data", "d2", 106.0),
        ],
        "key string, ts double, kind string, event_id string, arrival double",
    )
    events = generated.unionByName(edges)
    folders = write_stream_files(events, str(tmp_path / "slices"), files=6)
    source = tmp_path / "incoming"
    source.mkdir()
    output, checkpoint = str(tmp_path / "expiries"), str(tmp_path / "checkpoint")

    def deliver(batch: list[str]) -> None:
        for folder in batch:
            os.rename(folder, source / os.path.basename(folder))

    def run() -> float:
        query = stream(
            spark,
            str(source),
            output=output,
            checkpoint=checkpoint,
            timeouts=[20.0, 30.0],
            tick=0.001,
            delay=10.0,
        )
        query.awaitTermination()
        assert query.exception() is None
        reached = watermark(query)
        assert reached is not None
        return reached

    deliver(folders[:3])
    first = run()
    emitted = spark.read.parquet(output)
    assert collect_expiries(emitted) == collect_expiries(
        replay(spark, events, timeouts=[20.0, 30.0], tick=0.001, horizon=first)
    )
    deliver(folders[3:])
    last = run()
    assert last > first
    emitted = spark.read.parquet(output)
    got = collect_expiries(emitted)
    expected = collect_expiries(
        replay(spark, events, timeouts=[20.0, 30.0], tick=0.001, horizon=last)
    )
    assert len(expected) > 100
    assert {("edge-at", 20.0, 70.0, 50.0), ("edge-at", 30.0, 80.0, 50.0)} <= expected
    assert ("edge-close", 30.0, 90.0, 60.0) in expected
    assert got == expected
    assert emitted.count() == len(got)  # nothing emitted twice
