"""The Spark pipeline: replay idle-expiry over connection-event logs, plan capacity, stream it.

This package owns everything aiowheel does on Apache Spark (through PySpark). It reproduces the
semantics of :class:`aiowheel.IdleTimeouts` exactly, on logs too large for one host:

* :func:`generate` — a synthetic, deterministic event log around the seed scenario (100k
  connections, 30 s idle timeout, keepalives about every 25 s), built by Spark itself;
* :func:`replay` — every expiry ``(key, timeout, expired_at, last_seen)`` the timer service
  would have produced, for several timeouts in one pass, with built-in Spark SQL only;
* :func:`metrics` and :func:`report` — pending timers over time, expirations per second, peaks
  and a what-if table across timeouts, written as Parquet, CSV, PNG plots and an HTML page;
* :func:`stream` — the same expiries from a Structured Streaming job with Spark's own state
  store and event-time timers (``transformWithState``, RocksDB state store).

pyspark is imported here, so importing this package is the one place a missing ``spark`` extra
shows: it raises ImportError naming what to install. ``import aiowheel`` never imports it.
"""

from __future__ import annotations

try:
    import pyspark  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra installed
    raise ImportError(
        "aiowheel.spark needs PySpark and its SQL dependencies; "
        "install them with: pip install 'aiowheel[spark]'"
    ) from exc

from aiowheel.spark.events import (
    EVENT_SCHEMA,
    KINDS,
    normalize_events,
    read_events,
    write_events,
)
from aiowheel.spark.generate import generate
from aiowheel.spark.metrics import CapacityMetrics, metrics
from aiowheel.spark.replay import Expiry, collect_expiries, replay, unique_events
from aiowheel.spark.report import ReportFiles, report
from aiowheel.spark.session import spark_session
from aiowheel.spark.stream import expiry_stream, stream, watermark, write_stream_files

__all__ = [
    "EVENT_SCHEMA",
    "KINDS",
    "CapacityMetrics",
    "Expiry",
    "ReportFiles",
    "collect_expiries",
    "expiry_stream",
    "generate",
    "metrics",
    "normalize_events",
    "read_events",
    "replay",
    "report",
    "spark_session",
    "stream",
    "unique_events",
    "watermark",
    "write_events",
    "write_stream_files",
]
