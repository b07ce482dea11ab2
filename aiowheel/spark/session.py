"""A SparkSession set up the way the pipeline needs it.

This module owns the Spark configuration aiowheel relies on: Python workers that run the same
interpreter as the driver (``transformWithStateInPandas`` starts a Python process on the driver
too, and a different ``python3`` on the PATH may lack pandas), the RocksDB state store provider
for :func:`aiowheel.spark.stream`, UTC as the session time zone so timestamps read the same on
every machine, and quiet logs. Under ``spark-submit`` it keeps the master it was given;
pass cluster-wide settings there (see docs/spark.md).
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from collections.abc import Mapping

from pyspark import SparkFiles
from pyspark.sql import SparkSession

__all__ = ["ROCKSDB_PROVIDER", "spark_session"]

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
_CHANGELOG_CHECKPOINTING = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"


def spark_session(
    master: str | None = None,
    *,
    app_name: str = "aiowheel",
    shuffle_partitions: int | None = None,
    conf: Mapping[str, str] | None = None,
    log_level: str = "ERROR",
) -> SparkSession:
    """Return a SparkSession set up for the pipeline, created or reused.

    ``master`` defaults to the one ``spark-submit`` was given, else ``local[*]``.
    ``shuffle_partitions`` defaults to twice the cores of a ``local[N]`` master (Spark's 200 is
    far too many for one host) and, on a cluster, to what Spark is given
    (``--conf spark.sql.shuffle.partitions=N`` of ``spark-submit``, else Spark's 200).
    ``conf`` adds any other Spark settings (read only when the session is created). The Spark
    UI and the console progress bar are off unless ``conf`` turns them on. Under
    ``spark-submit``, the ``--py-files`` reach the Python processes Spark starts on the driver
    too (see :func:`_py_files_for_driver_workers`).
    """
    # Workers and the driver-side Python runner of transformWithStateInPandas must run this
    # interpreter, which has pandas and pyarrow; setdefault keeps a user's explicit choice.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # spark-submit starts the JVM first and hands its port to this driver; then the master is
    # already in the JVM's settings and must not be overridden.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if master is None and not submitted:
        master = "local[*]"
    if shuffle_partitions is None:
        cores = None if master is None else _local_cores(master)
        shuffle_partitions = 2 * cores if cores else None
    builder = SparkSession.builder if master is None else SparkSession.builder.master(master)
    builder = (
        builder.appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # toPandas (the report, the tests) through Arrow rather than row by row.
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
        # Each micro-batch commits a small changelog of the state it changed instead of a
        # RocksDB checkpoint of all of it; snapshots are taken in the background.
        .config(_CHANGELOG_CHECKPOINTING, "true")
    )
    settings = dict(conf or {})
    if shuffle_partitions is not None:
        settings["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    if master is not None and master.startswith("local"):
        # In local mode the driver JVM is the executor too; Spark's 1g is tight for a shuffle.
        settings.setdefault("spark.driver.memory", "2g")
        # Quiet from the JVM's first line on: setLogLevel comes too late for the start-up
        # warnings, which would bury the command line's own output.
        settings.setdefault(
            "spark.driver.extraJavaOptions",
            f"-Dlog4j2.configurationFile=file:{_quiet_log4j(_root_level(log_level))}",
        )
    for name, value in settings.items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    if shuffle_partitions is not None:
        # A reused session keeps its settings: this one is a session setting, set it anew.
        spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    spark.sparkContext.setLogLevel(log_level)
    if submitted:
        _py_files_for_driver_workers(spark)
    return spark


def _py_files_for_driver_workers(spark: SparkSession) -> None:
    """Put the driver's copies of ``spark-submit --py-files`` on the path of the Python
    processes Spark starts on the driver.

    ``transformWithState`` runs the stream's processor once on the driver (to learn its state
    schema) in a Python process started with ``spark.pyspark.python`` and, unlike the
    executors' workers, without the ``--py-files`` on its path: with an interpreter that lacks
    aiowheel, the stream dies with ``No module named 'aiowheel'``. The environment of a
    Python function is that of its process, on the driver and the executors alike: the driver's
    paths are added there (on an executor they do not exist, or come after its own copies).
    """
    context = spark.sparkContext
    shipped = (spark.conf.get("spark.submit.pyFiles", "") or "").split(",")
    local = [SparkFiles.get(os.path.basename(path)) for path in shipped if path]
    found = [path for path in local if os.path.exists(path)]
    if not found:
        return
    current = context.environment.get("PYTHONPATH")
    context.environment["PYTHONPATH"] = os.pathsep.join([*found, *([current] if current else [])])


_QUIET_LOG4J = """\
# Warnings, as the shell would set (so Spark does not announce a level change), but not the
# start-up ones every local run prints (loopback hostname, no native Hadoop); for
# log_level="OFF", not the stack trace of a failed start either (a master Spark cannot parse).
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.utils.name = org.apache.spark.util.Utils
logger.utils.level = error
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
# A SparkContext that fails to start logs its Java stack at ERROR, then a warning as it stops
# what never started: off for log_level="OFF".
logger.context.name = org.apache.spark.SparkContext
logger.context.level = {level}
logger.metrics.name = org.apache.spark.metrics.MetricsSystem
logger.metrics.level = {level}
"""


def _quiet_log4j(level: str = "warn") -> str:
    """Path of the quiet log4j2 configuration with SparkContext's logger at ``level``, written
    once and shared by every process."""
    config = _QUIET_LOG4J.replace("{level}", level)
    digest = hashlib.sha256(config.encode()).hexdigest()[:12]
    path = os.path.join(tempfile.gettempdir(), f"aiowheel-log4j2-{digest}.properties")
    if not os.path.exists(path):
        # Written aside and renamed, so a JVM starting meanwhile never reads half a file.
        fd, partial = tempfile.mkstemp(prefix="aiowheel-log4j2-", dir=os.path.dirname(path))
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(config)
        os.replace(partial, path)
    return path


def _root_level(log_level: str) -> str:
    """SparkContext's log4j level for ``spark_session``'s ``log_level`` from the JVM's first
    line: nothing for OFF, else warnings (setLogLevel then sets the level asked for). The root
    logger stays at warnings: at another level than the shell's, Spark announces the change."""
    return "off" if log_level.upper() == "OFF" else "warn"


def _local_cores(master: str) -> int | None:
    """Cores of a ``local``, ``local[N]`` or ``local[*]`` master; None for a cluster."""
    if master == "local":
        return 1
    if master.startswith("local[") and master.endswith("]"):
        inner = master[len("local[") : -1].split(",", maxsplit=1)[0]
        if inner == "*":
            return os.cpu_count() or 1
        if inner.isdigit():
            return int(inner)
    return None
