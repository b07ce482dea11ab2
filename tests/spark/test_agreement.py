"""The proof: replay, stream and the real IdleTimeouts expire exactly the same periods.

On the generated seed scenario (>= 100k events with duplicates, out-of-order arrival, closes,
reconnects and events exactly at the expiry boundary), three implementations of the idle-expiry
rule must produce the same set of ``(key, timeout, expired_at, last_seen)``:

* :func:`aiowheel.spark.replay` -- batch Spark SQL;
* :func:`aiowheel.spark.stream` -- Structured Streaming with per-key state and event-time timers;
* :class:`aiowheel.IdleTimeouts` on a real :class:`aiowheel.Timer` and wheel, driven in virtual
  time: the clock is advanced to each event's time before the event is applied, and
  ``expired_at`` is the Timer's clock when ``on_expire`` runs.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

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
    assert len(rows) >= 100_000
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


@pytest.mark.slow
def test_replay_stream_and_idle_timeouts_agree(
    spark: SparkSession, generated_log: tuple[DataFrame, Rows], tmp_path: Path
) -> None:
    """All three on the same >= 100k-event log, the stream delivered in two runs (a restart)."""
    events, _rows = generated_log
    folders = write_stream_files(events, str(tmp_path / "slices"), files=4)
    source = tmp_path / "incoming"
    source.mkdir()
    output, checkpoint = str(tmp_path / "expiries"), str(tmp_path / "checkpoint")
    horizon = None
    for batch in (folders[:2], folders[2:]):
        for folder in batch:
            os.rename(folder, source / os.path.basename(folder))
        query = stream(
            spark,
            str(source),
            output=output,
            checkpoint=checkpoint,
            timeouts=TIMEOUTS,
            tick=TICK,
            delay=10.0,
        )
        query.awaitTermination()
        assert query.exception() is None
        horizon = watermark(query)
    assert horizon is not None
    streamed = spark.read.parquet(output)
    from_stream = collect_expiries(streamed)
    assert streamed.count() == len(from_stream)  # nothing emitted twice
    from_replay = collect_expiries(
        replay(spark, events, timeouts=TIMEOUTS, tick=TICK, horizon=horizon)
    )
    from_idle = idle_timeouts_expiries(events, timeouts=TIMEOUTS, tick=TICK, horizon=horizon)
    assert len(from_replay) > 1000
    assert from_stream == from_replay == from_idle
