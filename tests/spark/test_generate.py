"""generate: deterministic for a seed, whatever the partitioning, with every promised feature."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict

import pytest
from pyspark.sql import DataFrame, SparkSession

from aiowheel.spark import generate
from aiowheel.spark.replay import deadline

pytestmark = pytest.mark.spark

Rows = list[tuple[str, float, str, str | None]]


def test_same_seed_same_log_whatever_the_partitioning(spark: SparkSession) -> None:
    small = {"connections": 300, "duration": 120.0}
    one = generate(spark, seed=3, partitions=1, **small).collect()
    five = generate(spark, seed=3, partitions=5, **small).collect()
    other = generate(spark, seed=4, partitions=1, **small).collect()
    assert one == five
    assert one != other


def test_log_has_every_promised_feature(generated_log: tuple[DataFrame, Rows]) -> None:
    events, rows = generated_log
    assert len(rows) >= 40_000
    assert events.columns == ["key", "ts", "kind", "event_id", "arrival"]
    kinds = Counter(kind for _key, _ts, kind, _id in rows)
    assert kinds["open"] > 4_000  # every connection opens, reconnects open again
    assert kinds["close"] > 200
    ids = Counter(event_id for _key, _ts, _kind, event_id in rows)
    assert sum(1 for n in ids.values() if n == 2) > 200  # duplicate deliveries
    assert max(ids.values()) == 2
    # Arrival order is not ts order: rows come sorted by arrival, some ts go backwards.
    assert sum(1 for a, b in itertools.pairwise(rows) if b[1] < a[1]) > 200
    # Reconnects: an open that is not a connection's first slot.
    assert any(kind == "open" and not event_id.endswith(":0") for _k, _t, kind, event_id in rows)  # type: ignore[union-attr]
    # Boundary events: a touch at exactly the previous touch's deadline, and one tick before.
    per_key: dict[str, list[float]] = defaultdict(list)
    for key, ts, kind, _id in rows:
        if kind != "close":
            per_key[key].append(ts)
    at = just_before = 0
    for times in per_key.values():
        times.sort()
        for previous, ts in itertools.pairwise(times):
            due = deadline(previous, 30.0, 0.001)
            at += ts == due
            just_before += ts == due - 0.001
    assert at > 50
    assert just_before > 50


def test_bad_knobs_name_the_value(spark: SparkSession) -> None:
    with pytest.raises(
        ValueError, match=r"jitter must be >= 0 and < 0\.5 \(slots must not swap\), got 0\.7"
    ):
        generate(spark, connections=1, jitter=0.7)
    with pytest.raises(ValueError, match="silent_share must be between 0 and 1, got 2"):
        generate(spark, connections=1, silent_share=2)
    with pytest.raises(ValueError, match="connections must be >= 1, got 0"):
        generate(spark, connections=0)
