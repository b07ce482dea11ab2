"""Fixtures of the Spark pipeline tests: one local SparkSession for the whole run.

Every test module here carries ``pytestmark = pytest.mark.spark``. Without pyspark or Java the
folder is not collected at all, so the rest of the suite runs without the ``spark`` extra.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

if importlib.util.find_spec("pyspark") is None or shutil.which("java") is None:
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """A local[2] session with 2 shuffle partitions, no UI and quiet logs.

    Two partitions, one per core: the test logs are small, and each partition of a stateful
    stream costs a Python worker and a state store per micro-batch. Its Python workers start
    through :func:`_workers_importing_installed_pyspark`.
    """
    from aiowheel.spark import spark_session

    python = _workers_importing_installed_pyspark(tmp_path_factory.mktemp("python"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYSPARK_PYTHON", str(python))
        session = spark_session("local[2]", app_name="aiowheel-tests", shuffle_partitions=2)
    yield session
    session.stop()


def _workers_importing_installed_pyspark(folder: Path) -> Path:
    """An interpreter for Spark's Python workers that imports the installed pyspark (whose
    bytecode is cached) before the ``pyspark.zip`` Spark puts first on their path.

    Python compiles a module imported from a zip on every start: the worker that
    transformWithState starts on the driver at each query start (which Spark gives a fixed
    ten seconds to connect back, see stream_runs.py) spends about 1.5 s of CPU importing from
    the zip against 0.3 s from the package, 11-13 s of wall time at load 12 on two cores. The
    same files, the same version: only where they are read from changes.
    """
    import pyspark

    installed = Path(pyspark.__file__).parents[1]
    wrapper = folder / "python"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'PYTHONPATH="{installed}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


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
