"""Running a stream to its end in the tests, with room for a Python worker that starts late."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery


# Spark gives the Python process it starts on the driver for transformWithState (to learn the
# processor's state layout, once per query start) ten seconds to connect back: a constant of
# PythonWorkerFactory.createSimpleWorker in Spark 4.3, which no setting changes
# (spark.python.authenticate.socketTimeout is the wait after it connects). On a loaded machine
# the process can take longer, and the query dies with this message in its first micro-batch
# (the session fixture makes the process start faster, see conftest.py; this is what is left).
WORKER_FAILED_TO_START = "Python worker failed to connect back"
WORKER_START_RETRIES = 5


def run_to_end(start: Callable[[], StreamingQuery]) -> tuple[StreamingQuery, list[dict[str, Any]]]:
    """Start a query with ``start()`` and wait for its end; return it and its progress.

    A query that dies because its driver-side Python worker did not connect back in time is
    a crash like any other: it is started again from its checkpoint (which loses and repeats
    nothing: test_agreement.py checks exactly that), up to
    :data:`WORKER_START_RETRIES` times. Any other failure is the caller's to see.
    """
    from pyspark.errors import StreamingQueryException

    progress: list[dict[str, Any]] = []
    for attempt in range(WORKER_START_RETRIES + 1):
        query = start()
        try:
            query.awaitTermination()
        except StreamingQueryException as exc:
            if WORKER_FAILED_TO_START not in str(exc) or attempt == WORKER_START_RETRIES:
                raise
        finally:
            progress += query.recentProgress
        if query.exception() is None:
            break
    return query, progress
