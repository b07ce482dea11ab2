"""The proof: replay, stream and the real IdleTimeouts expire exactly the same periods.

On the generated seed scenario (duplicates, out-of-order arrival, closes, reconnects and events
exactly at the expiry boundary) plus hand-written edge cases on their own keys, three
implementations of the idle-expiry rule must produce the same set of
``(key, timeout, expired_at, last_seen)``:

* :func:`aiowheel.spark.replay` -- batch Spark SQL;
* :func:`aiowheel.spark.stream` -- Structured Streaming with state per shard of keys and
  event-time timers, on both operators (``transformWithState`` and its pandas twin), stopped
  and restarted from its checkpoint, also in the middle of a micro-batch;
* :class:`aiowheel.IdleTimeouts` on a real :class:`aiowheel.Timer` and wheel, driven in virtual
  time: the clock is advanced to each event's time before the event is applied, and
  ``expired_at`` is the Timer's clock when ``on_expire`` runs.

The stream runs on four files of a small log (tens of thousands of events) with few
micro-batches: what is checked is every expiry, exactly once, not volume.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from stream_runs import run_to_end

from aiowheel import IdleTimeouts, Timer
from aiowheel.spark import (
    Expiry,
    collect_expiries,
    replay,
    stream,
    unique_events,
    watermark,
    write_stream_files,
)
from aiowheel.testing import run

pytestmark = pytest.mark.spark

Rows = list[tuple[str, float, str, str | None]]
TIMEOUTS = [20.0, 30.0, 45.5]
TICK = 0.001
DELAY = 10.0

# Edge cases on their own keys, arriving among the generated events: ties at one ts with and
# without ids, a touch and a close exactly at the 30 s deadline, a copy arriving 6 s late.
EDGES = [
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
]


def idle_timeouts_expiries(
    events: DataFrame, *, timeouts: Sequence[float], tick: float, horizon: float
) -> set[Expiry]:
    """Feed the de-duplicated log, in (ts, kind) order, to one IdleTimeouts per timeout."""
    ordered = unique_events(events, horizon=horizon).orderBy("ts", "rank").toPandas()
    log = list(zip(ordered["key"], ordered["ts"], ordered["kind"], strict=True))
    expiries: set[Expiry] = set()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        async with Timer(tick=tick) as timer:
            last_seen: dict[tuple[float, str], float] = {}

            def expired(timeout: float, key: str) -> None:
                # In virtual time the driver runs exactly at E; a touch exactly at E expires
                # the key inline, also at E. Either way the clock reads E.
                expiries.add(Expiry(key, timeout, timer.time(), last_seen[timeout, key]))

            idles = [
                (timeout, IdleTimeouts(timer, timeout, lambda key, t=timeout: expired(t, key)))
                for timeout in timeouts
            ]

            async def sleep_until(when: float) -> None:
                # Not asyncio.sleep(when - now): now + (when - now) may miss `when` by an ulp,
                # and the touch would then start its period at a slightly different time.
                if when > loop.time():
                    arrived = loop.create_future()
                    loop.call_at(when, arrived.set_result, None)
                    await arrived

            for key, ts, kind in log:
                await sleep_until(ts)
                for timeout, idle in idles:
                    if kind == "close":
                        idle.discard(key)
                    else:
                        idle.touch(key)
                        last_seen[timeout, key] = ts
            await sleep_until(horizon)
            # The driver's alarm at the horizon itself went off in the same loop iteration as
            # ours; let its pass run before leaving (which stops tracking without expiring).
            await asyncio.sleep(0)

    run(main(), start=min(ts for _key, ts, _kind in log))
    return expiries


def test_idle_timeouts_equal_replay_on_the_generated_log(
    spark: SparkSession, generated_log: tuple[DataFrame, Rows]
) -> None:
    events, rows = generated_log
    assert len(rows) >= 40_000
    horizon = max(ts for _key, ts, _kind, _id in rows)
    expected = collect_expiries(replay(spark, events, timeouts=TIMEOUTS, tick=TICK))
    got = idle_timeouts_expiries(events, timeouts=TIMEOUTS, tick=TICK, horizon=horizon)
    assert len(expected) > 1000
    assert got == expected


def test_idle_timeouts_equal_replay_with_a_coarse_tick_and_an_early_horizon(
    spark: SparkSession, generated_log: tuple[DataFrame, Rows]
) -> None:
    events, _rows = generated_log
    expected = collect_expiries(replay(spark, events, timeouts=[30.0], tick=0.7, horizon=200.0))
    assert idle_timeouts_expiries(events, timeouts=[30.0], tick=0.7, horizon=200.0) == expected


# -- the stream ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def log_with_edges(spark: SparkSession, generated_log: tuple[DataFrame, Rows]) -> DataFrame:
    events, _rows = generated_log
    edges = spark.createDataFrame(
        EDGES, "key string, ts double, kind string, event_id string, arrival double"
    )
    return events.unionByName(edges).cache()


@pytest.fixture(scope="module")
def files(log_with_edges: DataFrame, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The log split by arrival into four files (folders), as a collector would write it."""
    return write_stream_files(log_with_edges, str(tmp_path_factory.mktemp("files")), files=4)


_IDLE: dict[float, set[Expiry]] = {}


def idle_timeouts_at(events: DataFrame, horizon: float) -> set[Expiry]:
    """IdleTimeouts' expiries up to ``horizon``, computed once per horizon."""
    if horizon not in _IDLE:
        _IDLE[horizon] = idle_timeouts_expiries(
            events, timeouts=TIMEOUTS, tick=TICK, horizon=horizon
        )
    return _IDLE[horizon]


class Job:
    """One streaming job: its source folder, sink and checkpoint, run to the end of its input."""

    def __init__(self, spark: SparkSession, root: Path, api: str) -> None:
        self.spark = spark
        self.api = api
        self.source, self.output, self.checkpoint = root / "in", root / "out", root / "ckpt"
        self.source.mkdir()
        self.progress: list[dict[str, Any]] = []

    def deliver(self, folders: Sequence[str]) -> None:
        """New files land in the source (copies: the files are shared by the tests)."""
        for folder in folders:
            shutil.copytree(folder, self.source / Path(folder).name)

    def run(self, *, one_file_per_batch: bool = False) -> float:
        """Start (or restart) from the checkpoint, process what is there, stop; return the
        watermark reached (see :func:`stream_runs.run_to_end` for a worker that starts late)."""
        query, progress = run_to_end(
            lambda: stream(
                self.spark,
                str(self.source),
                output=str(self.output),
                checkpoint=str(self.checkpoint),
                timeouts=TIMEOUTS,
                tick=TICK,
                delay=DELAY,
                max_files_per_trigger=1 if one_file_per_batch else None,
                api=self.api,  # type: ignore[arg-type]
            )
        )
        self.progress = progress
        reached = watermark(query)
        assert reached is not None
        return reached

    def emitted(self) -> tuple[set[Expiry], int]:
        """The sink's committed expiries, as a set and as a row count."""
        rows = self.spark.read.parquet(str(self.output))
        return collect_expiries(rows), rows.count()

    def crash_in_last_data_batch(self, *, sink_committed: bool) -> int:
        """Put the checkpoint back where a crash in the middle of the last micro-batch that
        read a file would leave it; return that batch's id.

        Its offsets are logged (the file is taken), its state and commit are not, and the
        batches planned after it never were. Unless ``sink_committed``, the sink's commit of
        the batch is undone too: the Parquet files its tasks wrote stay in the output folder,
        uncommitted, as a crash between writing and committing leaves them.
        """
        batch = max(p["batchId"] for p in self.progress if p["numInputRows"] > 0)
        _forget(self.checkpoint / "offsets", after=batch)
        _forget(self.checkpoint / "commits", after=batch - 1)
        # The sink never saw the batches after it; with sink_committed it did commit this one.
        _forget(self.output / "_spark_metadata", after=batch if sink_committed else batch - 1)
        return batch


def _forget(log: Path, *, after: int) -> None:
    """Remove the entries of a Spark metadata log with a batch id above ``after``."""
    for entry in log.iterdir():
        number = entry.name.removeprefix(".").removesuffix(".crc")
        if number.isdigit() and int(number) > after:
            entry.unlink()


@pytest.mark.slow
@pytest.mark.parametrize("api", ["row", "pandas"])
def test_replay_stream_and_idle_timeouts_agree(
    spark: SparkSession, log_with_edges: DataFrame, files: list[str], tmp_path: Path, api: str
) -> None:
    """All three on the same log, the stream delivered in two runs (a stop and a restart);
    after each run the sink holds exactly replay's expiries up to the watermark."""
    job = Job(spark, tmp_path, api)
    job.deliver(files[:2])
    first = job.run()
    got, count = job.emitted()
    assert got == collect_expiries(
        replay(spark, log_with_edges, timeouts=TIMEOUTS, tick=TICK, horizon=first)
    )
    assert count == len(got)
    job.deliver(files[2:])
    last = job.run()
    assert last > first
    got, count = job.emitted()
    assert count == len(got)  # nothing emitted twice
    expected = collect_expiries(
        replay(spark, log_with_edges, timeouts=TIMEOUTS, tick=TICK, horizon=last)
    )
    assert len(expected) > 1000
    assert {("edge-at", 20.0, 70.0, 50.0), ("edge-at", 30.0, 80.0, 50.0)} <= expected
    assert ("edge-close", 30.0, 90.0, 60.0) in expected
    assert got == expected
    assert got == idle_timeouts_at(log_with_edges, last)


@pytest.mark.slow
def test_a_restart_in_the_middle_of_a_file_neither_loses_nor_repeats_an_expiry(
    spark: SparkSession, log_with_edges: DataFrame, files: list[str], tmp_path: Path
) -> None:
    """One file per micro-batch; twice the job dies in the middle of a file's micro-batch and
    restarts from its checkpoint, which processes that file again: once after the sink wrote
    the batch but before it committed it, once after the sink committed but before the query
    did. The sink ends with exactly replay's and IdleTimeouts' expiries, each once."""
    job = Job(spark, tmp_path, "row")
    job.deliver(files[:2])
    job.run(one_file_per_batch=True)
    written = {path.name for path in job.output.glob("*.parquet")}
    redone = job.crash_in_last_data_batch(sink_committed=False)
    job.deliver(files[2:3])
    job.run(one_file_per_batch=True)
    # The crashed batch ran again (its uncommitted files stay, unread), then the new file.
    assert redone in {p["batchId"] for p in job.progress}
    assert written < {path.name for path in job.output.glob("*.parquet")}
    again = job.crash_in_last_data_batch(sink_committed=True)
    job.deliver(files[3:])
    last = job.run(one_file_per_batch=True)
    assert again in {p["batchId"] for p in job.progress}
    got, count = job.emitted()
    assert count == len(got)  # nothing repeated
    expected = collect_expiries(
        replay(spark, log_with_edges, timeouts=TIMEOUTS, tick=TICK, horizon=last)
    )
    assert len(expected) > 1000
    assert got == expected  # nothing lost
    assert got == idle_timeouts_at(log_with_edges, last)
