"""Fixtures of the Spark pipeline tests: one local SparkSession for the whole run.

Every test module here carries ``pytestmark = pytest.mark.spark``. Without pyspark or Java the
folder is not collected at all, so the rest of the suite runs without the ``spark`` extra.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

if importlib.util.find_spec("pyspark") is None or shutil.which("java") is None:
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A local[2] session with 2 shuffle partitions, no UI and quiet logs.

    Two partitions, one per core: the test logs are small, and each partition of a stateful
    stream costs a Python worker and a state store per micro-batch.
    """
    from aiowheel.spark import spark_session

    session = spark_session("local[2]", app_name="aiowheel-tests", shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def generated_log(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> tuple[DataFrame, list[tuple[str, float, str, str | None]]]:
    """The seed scenario on 4,000 connections over 300 s (about 46k events), in Parquet.

    Returned both as a DataFrame read back from Parquet and as plain tuples for the reference.
    """
    from aiowheel.spark import generate

    path = str(tmp_path_factory.mktemp("generated") / "events.parquet")
    events = generate(spark, connections=4_000, duration=300.0, seed=7, path=path)
    frame = events.select("key", "ts", "kind", "event_id").toPandas()
    rows = [
        (key, float(ts), kind, event_id)
        for key, ts, kind, event_id in zip(
            frame["key"], frame["ts"], frame["kind"], frame["event_id"], strict=True
        )
    ]
    return events, rows
