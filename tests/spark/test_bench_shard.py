"""``benchmarks/bench_spark_shard.py`` feeds the stream's processor as Spark does.

The benchmark replays one shard's micro-batches through the pandas processor outside Spark (the
state in memory, the watermark and the late-row filter computed as Spark computes them). What it
times is only worth reading if that replay is the stream's: with either implementation (the
compiled rule and shard visit, or the pure ones), the expiries it emits up to its last
watermark must be exactly ``replay``'s for the shard's keys, each once. Speed is never checked
here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from aiowheel.spark import Expiry, collect_expiries, generate, replay
from aiowheel.spark.stream import EVENT_TIME_SHIFT

pytestmark = pytest.mark.spark

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SHARD = 3


@pytest.fixture(scope="module")
def bench() -> Any:
    """The benchmark module (the benchmarks folder is not a package)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_spark_shard
    finally:
        sys.path.remove(str(BENCHMARKS))
    return bench_spark_shard


def test_the_replayed_shard_emits_replays_expiries_with_either_implementation(
    spark: SparkSession, tmp_path: Path, bench: Any
) -> None:
    log = generate(spark, connections=1_000, duration=120.0, seed=5, path=str(tmp_path / "events"))
    made = bench.make_batches(
        spark, log, str(tmp_path), small=100, large=1_000, partitions=1, shard=SHARD
    )
    large = made["streams"]["large"]
    assert len(large) == 4 and all(len(frame) for frame, _ in large)
    # The last watermark, the one the micro-batch without input runs at, in ts seconds.
    horizon = (large[-1][1] - EVENT_TIME_SHIFT * 1000) / 1000
    source = spark.read.option("recursiveFileLookup", "true").parquet(made["large"])
    expected = collect_expiries(
        replay(spark, source, timeouts=bench.TIMEOUTS, tick=bench.TICK, horizon=horizon).filter(
            F.pmod(F.xxhash64("key"), F.lit(made["shards"])) == SHARD
        )
    )
    assert expected  # the shard has expiries to compare
    for implementation in bench.IMPLEMENTATIONS:
        visits, emitted = bench.replay_stream(large, made["shards"], implementation, no_data=True)
        assert len(emitted) == len(expected)  # each once
        assert {Expiry(*row) for row in emitted} == expected
        assert len(visits) == len(large) + 1  # and the micro-batch without input
        for visit in visits:
            assert set(visit) == set(bench.PARTS)
            assert visit["total"] >= visit["visit"] + visit["encode"] >= 0
