"""Running the demo: the server and the fleet together, and the live status line."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiowheel.demo._config import LAG_PERIOD, PLAIN_STATUS_PERIOD, STATUS_PERIOD, DemoConfig
from aiowheel.demo._fleet import Fleet
from aiowheel.demo._server import IdleServer
from aiowheel.demo._verdict import Verdict, judge, plan_clients
from aiowheel.timer import Timer, TimerStats

if TYPE_CHECKING:
    from rich.console import Console


@dataclass(frozen=True)
class DemoReport:
    """What :func:`run_demo` hands to the summary."""

    config: DemoConfig
    seed: int
    loop_name: str
    verdict: Verdict
    touches: int
    max_connections: int
    timer: TimerStats
    max_loop_lag: float
    elapsed: float


class _Status:
    """The status line: the event loop's worst lag, the touch rate over the last second, and
    the counters of the server and the Timer."""

    def __init__(self, config: DemoConfig, timer: Timer, server: IdleServer, silent: int) -> None:
        self._loop = asyncio.get_running_loop()
        self._config = config
        self._timer = timer
        self._server = server
        self._silent = silent
        self._start = self._loop.time()
        self.max_lag = 0.0
        # (time, touches so far), trimmed to the last second or so.
        self._samples: deque[tuple[float, int]] = deque()

    async def watch_lag(self) -> None:
        """Sleep LAG_PERIOD at a time, forever, keeping the worst oversleep."""
        loop = self._loop
        while True:
            before = loop.time()
            await asyncio.sleep(LAG_PERIOD)
            self.max_lag = max(self.max_lag, loop.time() - before - LAG_PERIOD)

    def _touch_rate(self) -> float:
        now = self._loop.time()
        touches = self._server.touches
        samples = self._samples
        samples.append((now, touches))
        while len(samples) > 2 and now - samples[1][0] >= 1.0:
            samples.popleft()
        first_time, first_touches = samples[0]
        span = now - first_time
        return (touches - first_touches) / span if span > 0 else 0.0

    def lines(self) -> tuple[str, str]:
        """The status now, in two short lines (also samples the touch rate)."""
        config = self._config
        server = self._server
        elapsed = min(self._loop.time() - self._start, config.duration)
        lateness = self._timer.stats().max_lateness
        return (
            f"{elapsed:4.1f}/{config.duration:g} s   "
            f"open connections {server.connections:,} (of {server.accepted:,} accepted)   "
            f"touches/s {self._touch_rate():,.0f}",
            f"expired {server.expiries:,} ({self._silent:,} clients go silent)   "
            f"timer lateness max {lateness * 1000:.1f} ms   "
            f"loop lag max {self.max_lag * 1000:.0f} ms",
        )


async def run_demo(config: DemoConfig, console: Console) -> DemoReport:
    """Run the server and the fleet for ``config.duration`` seconds and judge the outcome."""
    config.check()
    seed = config.seed if config.seed is not None else random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    loop = asyncio.get_running_loop()
    began = time.monotonic()
    async with Timer(tick=config.tick) as timer:
        start = loop.time()
        records = plan_clients(config, rng, start)
        silent_total = sum(not record.talking for record in records)
        server = IdleServer(timer, config.timeout, records)
        port = await server.start(backlog=min(max(config.clients, 128), 65535))
        fleet = Fleet(records, port, config, rng)
        status = _Status(config, timer, server, silent_total)
        lag_task = loop.create_task(status.watch_lag(), name="demo loop lag")
        end = start + config.duration
        try:
            fleet.start()
            await _show_status(console, status, end)
            # The run is over: take its counters, then stop tracking and stop the clients at
            # once (no await in between), so that nothing expires and no client mistakes the
            # teardown for the server closing it.
            end = loop.time()
            stats = timer.stats()
            max_lag = status.max_lag
        finally:
            server.stop_tracking()
            fleet.stop()
            lag_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await lag_task
            await fleet.wait_closed()
            await server.close()
    verdict = judge(records, timeout=config.timeout, tolerance=config.tolerance, end=end)
    return DemoReport(
        config=config,
        seed=seed,
        loop_name=type(loop).__module__.split(".")[0],
        verdict=verdict,
        touches=server.touches,
        max_connections=server.max_connections,
        timer=stats,
        max_loop_lag=max_lag,
        elapsed=time.monotonic() - began,
    )


async def _show_status(console: Console, status: _Status, end: float) -> None:
    """Refresh the status until the loop's clock reaches ``end``: live on a terminal, as a
    plain line every PLAIN_STATUS_PERIOD seconds otherwise."""
    from rich.live import Live
    from rich.text import Text

    loop = asyncio.get_running_loop()
    if console.is_terminal:
        with Live(Text("\n".join(status.lines())), console=console, auto_refresh=False) as live:
            while loop.time() < end:
                await asyncio.sleep(min(STATUS_PERIOD, max(0.0, end - loop.time())))
                live.update(Text("\n".join(status.lines())), refresh=True)
        return
    next_line = loop.time() + PLAIN_STATUS_PERIOD
    while loop.time() < end:
        await asyncio.sleep(min(STATUS_PERIOD, max(0.0, end - loop.time())))
        lines = status.lines()  # sampled every STATUS_PERIOD, for the touch rate
        if loop.time() >= next_line:
            console.print("   ".join(lines), soft_wrap=True)
            next_line += PLAIN_STATUS_PERIOD
    console.print("   ".join(status.lines()), soft_wrap=True)
