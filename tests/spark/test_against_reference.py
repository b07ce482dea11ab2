"""replay equals the plain per-key reference loop on a generated log of >= 100k events."""

from __future__ import annotations

import pytest
from idle_reference import reference_expiries
from pyspark.sql import DataFrame, SparkSession

from aiowheel.spark import collect_expiries, replay

pytestmark = pytest.mark.spark

Rows = list[tuple[str, float, str, str | None]]


def test_replay_equals_reference_on_generated_log(
    spark: SparkSession, generated_log: tuple[DataFrame, Rows]
) -> None:
    events, rows = generated_log
    timeouts = [20.0, 30.0, 45.5]
    got = collect_expiries(replay(spark, events, timeouts=timeouts, tick=0.001))
    expected = reference_expiries(rows, timeouts=timeouts, tick=0.001)
    assert len(expected) > 1000
    assert {tuple(e) for e in got} == expected


def test_replay_equals_reference_with_coarse_tick_and_early_horizon(
    spark: SparkSession, generated_log: tuple[DataFrame, Rows]
) -> None:
    events, rows = generated_log
    got = collect_expiries(replay(spark, events, timeouts=[30.0], tick=0.7, horizon=200.0))
    expected = reference_expiries(rows, timeouts=[30.0], tick=0.7, horizon=200.0)
    assert {tuple(e) for e in got} == expected
