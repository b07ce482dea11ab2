"""What the benchmark suite measures: its scenarios, their variants, and the code that measures
one variant at one size.

This module owns the measurements; :mod:`suite` (benchmarks/suite.py) runs each one in a fresh
child process (``suite.py --child SPEC`` calls :func:`run_child`), gathers the figures and
writes the tables and plots (with :mod:`_report`). A child measures exactly one variant of one
scenario at one size, so no variant inherits another's heap, caches or garbage.

A :class:`Variant` says which event loop it runs on -- asyncio's, uvloop, trio, or aiowheel's
wheel loop on either base (``asyncio+wheel``, ``uvloop+wheel``, made as ``bench_loop.py`` makes
them) -- and, if it uses aiowheel, which wheel: the suite sets ``AIOWHEEL_NO_EXTENSIONS=1`` in
the child's environment for ``pure`` and removes it for ``compiled``, and the child checks that
:data:`aiowheel.IMPLEMENTATION` agrees before it measures anything.

CPU figures are ``time.process_time()`` deltas of the child, divided by the operation count (or,
with ``suite.py --callgrind``, CPU instructions per operation: see :mod:`_callgrind`); memory
figures are ``tracemalloc`` (the Python heap, exactly) or RSS (what the OS sees). Every
figure is a number to compare with the other variants of the same run, never a pass/fail.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import random
import resource
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import asdict, dataclass, replace
from functools import partial
from typing import Any, Protocol, TypeVar

from bench_loop import make_loop

T = TypeVar("T")

# Operations between two passes of the event loop in churn and idle touch: the loop gets to run
# (asyncio then drops cancelled handles from its heap, as it would in a real program) without
# a loop pass per operation dominating the figures.
BATCH = 1000
# Idle touch and churn: how far away the rescheduled timers are -- they never fire meanwhile.
IDLE_TIMEOUT = 60.0
# Keepalive: websockets' 20 s ping interval and a 60 s idle timeout, stretched 60 times (20 min,
# 1 h). Under callgrind, or on a loaded machine, setting up a million connections takes minutes,
# and a timer that came due meanwhile would add its firing to the cycles measured. How far away
# a timer is costs nothing on the loops measured: asyncio pushes it onto its heap after its
# peers either way, the wheel files it one level up (level 3 instead of 2 at a 1 ms tick).
PING_DELAY = 20.0 * 60
IDLE_DELAY = 60.0 * 60
CHURN_DELAYS = (30.0, 120.0)
# Memory and wake-ups: timers far in the future, so none fires while they are measured.
FAR_DELAYS = (3600.0, 7200.0)
# Lifecycle on trio: a million tasks take minutes of CPU and several GB each, so the default
# sizes stop at this many.
TRIO_MAX_N = 100_000
# Lateness: the first timer is due LEAD seconds after scheduling starts, plus LEAD_FACTOR times
# the time scheduling all N is estimated to take (from CALIBRATION throwaway timers, on the
# machine as loaded at that moment), so that every timer is scheduled before the first is due
# (the "slack" column confirms it).
LEAD = 0.5
LEAD_FACTOR = 3.0
CALIBRATION = 10_000


@dataclass(frozen=True)
class Settings:
    """Sizes and parameters of one run of the suite (``--quick`` has its own)."""

    sizes: tuple[int, ...] = (10_000, 100_000, 1_000_000)
    rounds: int = 1
    seed: int = 1
    # lifecycle: delays uniform in [0, spread) seconds.
    spread: float = 2.0
    # churn, idle touch: operations timed, at every N.
    ops: int = 100_000
    # lateness: N timers due uniformly over `window` seconds, then a burst of `burst` timers
    # due over `burst_window` seconds.
    window: float = 1.0
    burst: int = 1_000_000
    burst_window: float = 2.0
    # wakeups: seconds watched.
    interval: float = 1.0
    # memory: also 10M timers, for the wheel variants only.
    huge: bool = False
    # Whether each variant's max_n applies (not when the sizes were asked for explicitly).
    capped: bool = True
    # Counting instructions (suite.py --callgrind): the child does only the set-up and the
    # `ops` operations, none of the extra passes (the traced one) that callgrind need not count.
    counting: bool = False
    # Random inputs drawn for the timed operations (their first `ops` are used): `ops` if this
    # is fewer. suite.py --callgrind draws as many in its run of n and of 2n operations, so
    # that drawing them cancels out of the difference.
    drawn: int = 0

    def draws(self) -> int:
        return max(self.ops, self.drawn)


DEFAULT = Settings()
QUICK = Settings(
    sizes=(2_000,),
    spread=0.2,
    ops=2_000,
    window=0.2,
    burst=20_000,
    burst_window=0.2,
    interval=0.2,
)
HUGE = 10_000_000
# suite.py --callgrind: N = 20k (a set-up that takes seconds, not minutes, under callgrind), and
# `ops` then 2 `ops` operations, whose difference is counted. Few enough operations that
# asyncio's heap is not rebuilt in either run (it is once its cancelled handles are more than
# half of it), as in the timed run at N = 1M.
CALLGRIND = Settings(sizes=(20_000,), ops=5_000, counting=True)
QUICK_CALLGRIND = Settings(sizes=(2_000,), ops=500, counting=True)


@dataclass(frozen=True)
class Variant:
    """One contender in a scenario."""

    name: str
    # The event loop the child runs: "asyncio", "uvloop", "trio", "none" for no loop, or
    # aiowheel's wheel loop on either base, "asyncio+wheel" or "uvloop+wheel".
    loop: str
    # "pure" or "compiled" if the variant exercises aiowheel's wheel, else None (the child then
    # runs with the default selection).
    wheel: str | None = None
    # The API exercised, when a scenario compares several on one loop.
    api: str = "call_at"
    # Largest N the default sizes run this variant at (an explicit --sizes runs it at any N).
    max_n: int | None = None


@dataclass(frozen=True)
class Metric:
    """One figure of a scenario: its key in the child's result, header and display unit."""

    key: str
    header: str
    # Multiplies the raw value (seconds, bytes, counts) for display.
    scale: float = 1.0
    digits: int = 2


@dataclass(frozen=True)
class Case:
    """One row group of a scenario's table: a size, the variants run at it, their settings."""

    label: str
    n: int
    variants: tuple[Variant, ...]
    settings: Settings


def _per_size(scenario: Scenario, settings: Settings) -> list[Case]:
    """One case per size of the run, with every variant (up to its max_n, if capped)."""
    return [
        Case(f"{n:,}", n, _up_to(scenario.variants, n, settings), settings) for n in settings.sizes
    ]


def _up_to(variants: tuple[Variant, ...], n: int, settings: Settings) -> tuple[Variant, ...]:
    if not settings.capped:
        return variants
    return tuple(v for v in variants if v.max_n is None or n <= v.max_n)


@dataclass(frozen=True)
class Scenario:
    """A question the suite answers, with its contenders and the figures it reports."""

    name: str
    title: str
    # What is measured and how, in one paragraph (it heads the scenario in results.md).
    doc: str
    variants: tuple[Variant, ...]
    metrics: tuple[Metric, ...]
    # The metric the ratio columns compare, and the variants they compare against, each with
    # the short label of its column ("vs asyncio").
    ratio_key: str
    baselines: tuple[tuple[str, str], ...]
    # Measures one variant at size n (in the child process).
    measure: Callable[[Variant, int, Settings], dict[str, float | None]]
    # The sizes (and variants and settings at each) the scenario runs at.
    cases: Callable[[Scenario, Settings], list[Case]] = _per_size
    # Whether `measure` times `settings.ops` operations after an untimed set-up, its "cpu"
    # figure per operation: then suite.py --callgrind can count its instructions per operation.
    countable: bool = False

    def counted(self) -> Scenario:
        """This scenario as ``suite.py --callgrind`` reports it: CPU instructions per
        operation (the unit of its CPU figure), the ratios on them."""
        cpu = next(metric for metric in self.metrics if metric.key == "cpu")
        unit = cpu.header.rsplit("/", 1)[-1]
        metric = Metric("instructions", f"instructions/{unit}", 1.0, 0)
        return replace(self, metrics=(metric,), ratio_key="instructions")


# -- helpers for the children ---------------------------------------------------------------


class Scheduler(Protocol):
    """What asyncio's loops and aiowheel's Timer have in common."""

    def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> Any: ...

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> Any: ...


def _noop(*args: object) -> None:
    return None


def _uniform(n: int, low: float, high: float, rng: random.Random) -> list[float]:
    draw = rng.random
    span = high - low
    return [low + span * draw() for _ in range(n)]


@contextmanager
def _untimed() -> Iterator[None]:
    """Setup outside the timed part: without the cyclic GC (a million new objects would set
    off a dozen full collections), then one full collection, so that every variant starts its
    timed part with its long-lived objects collected once and the GC's counters at zero."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect()


def _run(variant: Variant, main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run ``main()`` on a fresh loop of the variant's kind.

    The loop is not closed: the child exits right after (``suite.py --child`` ends with
    ``os._exit``), and closing a loop with a million pending timers takes seconds and measures
    nothing."""
    if variant.loop == "trio":
        import trio

        return trio.run(main)
    loop = make_loop(variant.loop)
    asyncio.set_event_loop(loop)
    return loop.run_until_complete(main())


@asynccontextmanager
async def _scheduler(variant: Variant) -> AsyncIterator[Scheduler]:
    """The running loop for the loops' own variants (the wheel loop's too), a running aiowheel
    Timer otherwise."""
    if variant.wheel is None or variant.loop.endswith("+wheel"):
        yield asyncio.get_running_loop()  # type: ignore[misc]
        return
    import aiowheel

    async with aiowheel.Timer() as timer:
        yield timer


def _check_wheel(variant: Variant) -> None:
    """Refuse to measure a variant on the wrong wheel (a mislabelled row is worse than none)."""
    if variant.wheel is None:
        return
    import aiowheel

    if variant.wheel != aiowheel.IMPLEMENTATION:
        raise RuntimeError(
            f"{variant.name!r} expects the {variant.wheel} wheel, "
            f"but aiowheel selected the {aiowheel.IMPLEMENTATION} one"
        )


# -- 1. lifecycle ---------------------------------------------------------------------------


def _lifecycle(variant: Variant, n: int, settings: Settings) -> dict[str, Any]:
    delays = _uniform(n, 0.0, settings.spread, random.Random(settings.seed))
    if variant.loop == "trio":
        return _run(variant, partial(_lifecycle_trio, variant, delays))
    return _run(variant, partial(_lifecycle_asyncio, variant, delays))


async def _lifecycle_asyncio(variant: Variant, delays: list[float]) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    all_fired = loop.create_future()
    remaining = len(delays)

    def fired() -> None:
        nonlocal remaining
        remaining -= 1
        if remaining == 0:
            all_fired.set_result(None)

    async with _scheduler(variant) as scheduler:
        call_at = scheduler.call_at
        start = time.process_time()
        now = loop.time()
        for delay in delays:
            call_at(now + delay, fired)
        await all_fired
        cpu = time.process_time() - start
    return {"cpu": cpu / len(delays)}


async def _lifecycle_trio(variant: Variant, delays: list[float]) -> dict[str, Any]:
    import trio

    if variant.wheel is None:
        start = time.process_time()
        async with trio.open_nursery() as nursery:
            for delay in delays:
                nursery.start_soon(trio.sleep, delay)
        return {"cpu": (time.process_time() - start) / len(delays)}
    import aiowheel

    async with aiowheel.Timer() as timer:
        start = time.process_time()
        async with trio.open_nursery() as nursery:
            for delay in delays:
                nursery.start_soon(timer.sleep, delay)
        return {"cpu": (time.process_time() - start) / len(delays)}


# -- 2. churn --------------------------------------------------------------------------------


def _churn(variant: Variant, n: int, settings: Settings) -> dict[str, Any]:
    rng = random.Random(settings.seed)
    ops = settings.ops
    initial = _uniform(n, *CHURN_DELAYS, rng)
    keys = rng.choices(range(n), k=settings.draws())[:ops]
    delays = _uniform(settings.draws(), *CHURN_DELAYS, rng)[:ops]

    async def main() -> dict[str, Any]:
        async with _scheduler(variant) as scheduler:
            call_later = scheduler.call_later
            with _untimed():
                handles = [call_later(delay, _noop) for delay in initial]
            start = time.process_time()
            for first in range(0, ops, BATCH):
                last = first + BATCH
                for key, delay in zip(keys[first:last], delays[first:last], strict=True):
                    handles[key].cancel()
                    handles[key] = call_later(delay, _noop)
                await asyncio.sleep(0)
            cpu = time.process_time() - start
        return {"cpu": cpu / ops}

    return _run(variant, main)


# -- 3. idle touch ---------------------------------------------------------------------------


def _idle_touch(variant: Variant, n: int, settings: Settings) -> dict[str, Any]:
    rng = random.Random(settings.seed)
    ops = settings.ops
    keys = list(range(n))
    touched = rng.choices(keys, k=settings.draws())[:ops]

    async def main() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        batches = [touched[first : first + BATCH] for first in range(0, ops, BATCH)]
        if variant.api == "touch":
            import aiowheel

            async with _scheduler(variant) as timer:
                assert isinstance(timer, aiowheel.Timer)
                with aiowheel.IdleTimeouts(timer, IDLE_TIMEOUT, _noop) as idle:
                    touch = idle.touch
                    with _untimed():
                        for key in keys:
                            touch(key)
                    start = time.process_time()
                    for batch in batches:
                        for key in batch:
                            touch(key)
                        await asyncio.sleep(0)
                    cpu = time.process_time() - start
        elif variant.api == "call_later":
            call_later = loop.call_later
            with _untimed():
                handles = [call_later(IDLE_TIMEOUT, _noop, key) for key in keys]
            start = time.process_time()
            for batch in batches:
                for key in batch:
                    handles[key].cancel()
                    handles[key] = call_later(IDLE_TIMEOUT, _noop, key)
                await asyncio.sleep(0)
            cpu = time.process_time() - start
        elif variant.api == "dict":  # the floor: what any touch must do at least
            last_seen = dict.fromkeys(keys, 0.0)
            clock = time.monotonic
            start = time.process_time()
            for batch in batches:
                for key in batch:
                    last_seen[key] = clock()
                await asyncio.sleep(0)
            cpu = time.process_time() - start
        else:  # asyncio.Timeout.reschedule: n timeouts entered in this task, never expiring
            now = loop.time()
            gc.disable()  # _untimed(), around an await
            timeouts = [asyncio.Timeout(now + IDLE_TIMEOUT) for _ in keys]
            for timeout in timeouts:
                await timeout.__aenter__()
            gc.enable()
            gc.collect()
            clock = loop.time
            start = time.process_time()
            for batch in batches:
                for key in batch:
                    timeouts[key].reschedule(clock() + IDLE_TIMEOUT)
                await asyncio.sleep(0)
            cpu = time.process_time() - start
        return {"cpu": cpu / ops}

    return _run(variant, main)


# -- 4. memory -------------------------------------------------------------------------------


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def _traced_bytes() -> int:
    return tracemalloc.get_traced_memory()[0]


def _memory(variant: Variant, n: int, settings: Settings) -> dict[str, Any]:
    """RSS first, on a fresh heap; then the same again, traced, on a fresh Timer or
    IdleTimeouts (tracing's own bookkeeping would inflate RSS, and tracemalloc counts exact
    bytes whether or not the allocator reuses memory freed by the first pass)."""
    keys = list(range(n))
    delays = _uniform(n, *FAR_DELAYS, random.Random(settings.seed))
    handles: list[Any] = [None] * n

    async def measure(read: Callable[[], int]) -> tuple[float, float, float]:
        """Bytes per timer: pending, after cancelling all, after one more loop pass."""

        def sample() -> float:
            gc.collect()
            return (read() - base) / n

        loop = asyncio.get_running_loop()
        async with _scheduler(variant) as scheduler:
            if variant.api == "touch":
                import aiowheel

                assert isinstance(scheduler, aiowheel.Timer)
                idle = aiowheel.IdleTimeouts(scheduler, FAR_DELAYS[0], _noop)
                base = read()
                for key in keys:
                    idle.touch(key)
                pending = sample()
                for key in keys:
                    idle.discard(key)
            else:
                call_at = scheduler.call_at
                base = read()
                now = loop.time()
                for key in keys:
                    handles[key] = call_at(now + delays[key], _noop, key)
                pending = sample()
                for key in keys:
                    handles[key].cancel()
                    handles[key] = None
            cancelled = sample()
            # One pass of the loop: asyncio drops cancelled handles from its heap only here,
            # uvloop frees a cancelled timer's libuv handle only here.
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            after_pass = sample()
            if variant.api == "touch":
                idle.close()
        return pending, cancelled, after_pass

    async def main() -> dict[str, Any]:
        gc.collect()
        rss_pending, _, _ = await measure(_rss_bytes)
        tracemalloc.start()
        gc.collect()
        pending, cancelled, after_pass = await measure(_traced_bytes)
        return {
            "heap_pending": pending,
            "rss_pending": rss_pending,
            "heap_cancelled": cancelled,
            "heap_after_pass": after_pass,
        }

    return _run(variant, main)


def _memory_cases(scenario: Scenario, settings: Settings) -> list[Case]:
    cases = _per_size(scenario, settings)
    if settings.huge:
        wheel_only = tuple(variant for variant in scenario.variants if variant.wheel)
        cases.append(Case(f"{HUGE:,}", HUGE, wheel_only, settings))
    return cases


# -- 5. lateness -----------------------------------------------------------------------------


def _lateness(variant: Variant, n: int, settings: Settings) -> dict[str, Any]:
    rng = random.Random(settings.seed)
    offsets = _uniform(n, 0.0, settings.window, rng)

    async def main() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        clock = loop.time
        fired_at = [0.0] * n
        all_fired = loop.create_future()
        remaining = n

        def fired(index: int) -> None:
            nonlocal remaining
            fired_at[index] = clock()
            remaining -= 1
            if remaining == 0:
                all_fired.set_result(None)

        async with _scheduler(variant) as scheduler:
            call_at = scheduler.call_at
            first_due = clock() + await _lead(scheduler, n)
            whens = [first_due + offset for offset in offsets]
            with _untimed():
                for index, when in enumerate(whens):
                    call_at(when, fired, index)
            slack = first_due - clock()
            await all_fired
            own = _timer_lateness(scheduler)
        lateness = sorted(at - when for at, when in zip(fired_at, whens, strict=True))
        return {
            "p50": lateness[n // 2],
            "p99": lateness[min(n - 1, n * 99 // 100)],
            "max": lateness[-1],
            "early": sum(1 for late in lateness if late < 0),
            "earliest": min(0.0, lateness[0]),
            "slack": slack,
            **own,
        }

    return _run(variant, main)


TIMER_BUCKET = "timer <= "
"""Prefix of the keys holding the Timer's own lateness histogram (``stats().lateness``) in a
lateness result: one key per bucket, its upper bound in seconds after the prefix."""


def _timer_lateness(scheduler: Scheduler) -> dict[str, float]:
    """The Timer's own view of the run (its lateness histogram and p99 bucket), for the
    variants that have one; the loops' own ``call_at`` have no such counters."""
    stats = getattr(scheduler, "stats", None)
    if stats is None:
        return {}
    histogram = stats().lateness
    own = {f"{TIMER_BUCKET}{bound!r}": float(count) for bound, count in histogram.buckets}
    own["timer_p99"] = histogram.quantile(0.99)
    return own


async def _lead(scheduler: Scheduler, n: int) -> float:
    """Seconds from now until the first of ``n`` timers may be due so that all are scheduled by
    then: LEAD + LEAD_FACTOR times the time ``n`` timers take to schedule, as estimated from
    CALIBRATION throwaway ones (a time, not CPU: the machine may be loaded)."""
    sample = min(n, CALIBRATION)
    far = asyncio.get_running_loop().time() + FAR_DELAYS[0]
    gc.disable()  # as while the n timers are scheduled
    start = time.perf_counter()
    handles = [scheduler.call_at(far, _noop) for _ in range(sample)]
    elapsed = time.perf_counter() - start
    gc.enable()
    for handle in handles:
        handle.cancel()
    await asyncio.sleep(0)  # asyncio drops the cancelled handles from its heap
    return LEAD + LEAD_FACTOR * elapsed * n / sample


def _lateness_cases(scenario: Scenario, settings: Settings) -> list[Case]:
    """The sizes below the burst's (N timers in `window` are a burst too), then the burst."""
    cases = [case for case in _per_size(scenario, settings) if case.n < settings.burst]
    burst = replace(settings, window=settings.burst_window)
    label = f"{settings.burst:,} burst"
    cases.append(Case(label, settings.burst, scenario.variants, burst))
    return cases


# -- 6. wake-ups -----------------------------------------------------------------------------


def _wakeups(variant: Variant, n: int, settings: Settings) -> dict[str, Any]:
    delays = _uniform(n, *FAR_DELAYS, random.Random(settings.seed))

    async def main() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        selects = 0
        selector = getattr(loop, "_selector", None)  # asyncio's own loops; uvloop has none
        if selector is not None:
            select = selector.select

            def counting_select(timeout: float | None = None) -> Any:
                nonlocal selects
                selects += 1
                return select(timeout)

            selector.select = counting_select
        async with _scheduler(variant) as scheduler:
            with _untimed():
                for delay in delays:
                    scheduler.call_later(delay, _noop)
            await asyncio.sleep(0.05)  # let the loop settle after the burst of scheduling
            stats = getattr(scheduler, "stats", None)
            driver_before = stats().driver_wakeups if stats else 0
            selects_before = selects
            switches = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
            cpu = time.process_time()
            await asyncio.sleep(settings.interval)
            cpu = time.process_time() - cpu
            switches = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - switches
            per_second = 1.0 / settings.interval
            return {
                "wakeups": switches * per_second,
                "loop_passes": (selects - selects_before) * per_second if selector else None,
                "driver": (stats().driver_wakeups - driver_before) * per_second if stats else None,
                "cpu": cpu * per_second,
            }

    return _run(variant, main)


# -- 7. the floor ----------------------------------------------------------------------------


def _floor(variant: Variant, n: int, settings: Settings) -> dict[str, Any]:
    offsets = _uniform(n, 0.0, settings.spread, random.Random(settings.seed))
    if variant.loop == "none":
        if variant.api == "dict":
            store: dict[int, float] = {}
            start = time.process_time()
            for key, when in enumerate(offsets):
                store[key] = when  # noqa: PERF403 -- one store per timer is the point
        elif variant.api == "append":
            stored: list[float] = []
            append = stored.append
            start = time.process_time()
            for when in offsets:
                append(when)
        else:
            from aiowheel._impl import HierarchicalWheel

            add = HierarchicalWheel(tick=0.001, wheel_size=64, start=0.0).add
            start = time.process_time()
            for when in offsets:
                add(when, None)
        return {"cpu": (time.process_time() - start) / n}

    async def main() -> dict[str, Any]:
        async with _scheduler(variant) as scheduler:
            now = asyncio.get_running_loop().time() + 1.0
            whens = [now + offset for offset in offsets]
            call_at = scheduler.call_at
            start = time.process_time()
            for when in whens:
                call_at(when, _noop)
            return {"cpu": (time.process_time() - start) / n}

    return _run(variant, main)


# -- 8. keepalive: idle connections at scale ---------------------------------------------------


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _keepalive(variant: Variant, n: int, settings: Settings) -> dict[str, Any]:
    """First untraced: the peak RSS growth over the set-up of n connections and the timed
    cycles, and the CPU per cycle; then (unless counting instructions) the same set-up again,
    traced, for the heap per connection."""
    cycled = random.Random(settings.seed).choices(range(n), k=settings.draws())[: settings.ops]
    batches = [cycled[first : first + BATCH] for first in range(0, settings.ops, BATCH)]

    async def connections(read: Callable[[], int], timed: bool) -> tuple[float, float | None]:
        """Open n connections' timers; return the bytes per connection (``read()`` after the
        set-up, less before) and, if ``timed``, the CPU per keepalive cycle."""
        keys = range(n)
        pings: list[Any] = [None] * n
        idles: list[Any] = [None] * n
        cpu = None
        async with _scheduler(variant) as scheduler:
            call_later = scheduler.call_later
            gc.collect()
            base = read()
            if variant.api == "touch":
                import aiowheel

                assert isinstance(scheduler, aiowheel.Timer)
                idle = aiowheel.IdleTimeouts(scheduler, IDLE_DELAY, _noop)
                touch = idle.touch
                with _untimed():
                    for key in keys:
                        pings[key] = call_later(PING_DELAY, _noop, key)
                        touch(key)
                per_connection = (read() - base) / n
                if timed:
                    start = time.process_time()
                    for batch in batches:
                        for key in batch:
                            pings[key].cancel()
                            pings[key] = call_later(PING_DELAY, _noop, key)
                            touch(key)
                        await asyncio.sleep(0)
                    cpu = (time.process_time() - start) / settings.ops
                idle.close()
            else:
                with _untimed():
                    for key in keys:
                        pings[key] = call_later(PING_DELAY, _noop, key)
                        idles[key] = call_later(IDLE_DELAY, _noop, key)
                per_connection = (read() - base) / n
                if timed:
                    start = time.process_time()
                    for batch in batches:
                        for key in batch:
                            pings[key].cancel()
                            pings[key] = call_later(PING_DELAY, _noop, key)
                            idles[key].cancel()
                            idles[key] = call_later(IDLE_DELAY, _noop, key)
                        await asyncio.sleep(0)
                    cpu = (time.process_time() - start) / settings.ops
                for handle in idles:
                    handle.cancel()
            for handle in pings:
                handle.cancel()
            # Two passes of the loop: asyncio and uvloop free cancelled timers only in one.
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        return per_connection, cpu

    async def main() -> dict[str, Any]:
        gc.collect()
        rss_before = _rss_bytes()
        _, cpu = await connections(_rss_bytes, timed=True)
        rss_peak = (_peak_rss_bytes() - rss_before) / n
        if settings.counting:
            return {"cpu": cpu, "rss_peak": rss_peak}
        tracemalloc.start()
        heap, _ = await connections(_traced_bytes, timed=False)
        return {"rss_peak": rss_peak, "heap": heap, "cpu": cpu}

    return _run(variant, main)


# -- the scenarios ---------------------------------------------------------------------------


def _pair(
    name: str, loop: str, api: str = "call_at", max_n: int | None = None
) -> tuple[Variant, Variant]:
    """The pure and the compiled variant of an aiowheel contender."""
    return (
        Variant(f"{name}, pure", loop, "pure", api, max_n),
        Variant(f"{name}, compiled", loop, "compiled", api, max_n),
    )


_MS = 1e3

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        name="lifecycle",
        title="1. Lifecycle: N timers scheduled and all fired",
        doc=(
            "N timers with delays uniform in [0, spread) s are scheduled, then the loop runs "
            "until every callback has run; the figure is the child's CPU time from the first "
            "schedule to the last callback, divided by N (schedule + fire + one trivial "
            "callback). On trio, which has no `call_at`, each timer is a task: N tasks in "
            "`trio.sleep(d)` against N tasks in aiowheel's `timer.sleep(d)` -- both figures "
            "include creating and running a task per timer, and the default sizes stop at "
            f"{TRIO_MAX_N:,} for them (a million trio tasks take minutes and gigabytes each)."
        ),
        variants=(
            Variant("asyncio loop.call_at", "asyncio"),
            *_pair("asyncio + Timer.call_at", "asyncio"),
            Variant("uvloop loop.call_at", "uvloop"),
            *_pair("uvloop + Timer.call_at", "uvloop"),
            Variant("trio tasks: trio.sleep", "trio", api="sleep", max_n=TRIO_MAX_N),
            *_pair("trio tasks: timer.sleep", "trio", "sleep", TRIO_MAX_N),
        ),
        metrics=(Metric("cpu", "CPU µs/timer", 1e6),),
        ratio_key="cpu",
        baselines=(
            ("asyncio", "asyncio loop.call_at"),
            ("uvloop", "uvloop loop.call_at"),
            ("trio", "trio tasks: trio.sleep"),
        ),
        measure=_lifecycle,
    ),
    Scenario(
        name="churn",
        title="2. Churn: reschedules among N pending timers",
        doc=(
            "N timers are pending 30-120 s away; then `ops` times a random one is rescheduled: "
            "`handle.cancel()` and a new `call_later` 30-120 s away. The loop runs one pass "
            f"every {BATCH} reschedules. Figure: CPU per reschedule. asyncio drops cancelled "
            "handles from its heap in a pass that finds them more than half of it, which takes "
            "more than N reschedules: at N > ops that rebuild is not in asyncio's figure."
        ),
        variants=(
            Variant("asyncio cancel + loop.call_later", "asyncio"),
            *_pair("asyncio + Timer cancel + call_later", "asyncio"),
            Variant("uvloop cancel + loop.call_later", "uvloop"),
            *_pair("uvloop + Timer cancel + call_later", "uvloop"),
        ),
        metrics=(Metric("cpu", "CPU µs/reschedule", 1e6),),
        ratio_key="cpu",
        baselines=(
            ("asyncio", "asyncio cancel + loop.call_later"),
            ("uvloop", "uvloop cancel + loop.call_later"),
        ),
        measure=_churn,
        countable=True,
    ),
    Scenario(
        name="touch",
        title="3. Idle touch: pushing back the idle deadline of one of N keys",
        doc=(
            f"N keys each have an idle deadline {IDLE_TIMEOUT:.0f} s away; then `ops` times a "
            "random key is touched: `IdleTimeouts.touch(key)`, against "
            "`handles[key].cancel(); handles[key] = loop.call_later(...)` (handles in a list, "
            "the cheapest container for the baseline) and against "
            "`timeouts[key].reschedule(loop.time() + timeout)` on N entered "
            f"`asyncio.Timeout`s. One loop pass every {BATCH} touches. Figure: CPU per touch. "
            "The floor is the least any touch must do, a clock read and a dict store "
            "(`last_seen[key] = time.monotonic()`): with a million keys touched in random "
            "order even that misses the CPU caches."
        ),
        variants=(
            Variant("asyncio cancel + loop.call_later", "asyncio", api="call_later"),
            Variant("uvloop cancel + loop.call_later", "uvloop", api="call_later"),
            Variant("asyncio.Timeout.reschedule", "asyncio", api="reschedule"),
            *_pair("IdleTimeouts.touch", "asyncio", "touch"),
            Variant("floor: last_seen[key] = monotonic()", "asyncio", api="dict"),
        ),
        metrics=(Metric("cpu", "CPU ns/touch", 1e9, 0),),
        ratio_key="cpu",
        baselines=(
            ("call_later", "asyncio cancel + loop.call_later"),
            ("uvloop", "uvloop cancel + loop.call_later"),
            ("Timeout", "asyncio.Timeout.reschedule"),
        ),
        measure=_idle_touch,
        countable=True,
    ),
    Scenario(
        name="memory",
        title="4. Memory per pending timer, and after cancelling them all",
        doc=(
            "N timers are scheduled 1-2 h away (`call_at(when, callback, key)`, the handles "
            "kept in a preallocated list), or N keys touched on an `IdleTimeouts`. Bytes per "
            "timer: the RSS growth (measured first, untraced) and the Python heap "
            "(`tracemalloc`, measured next on a fresh Timer). Then every timer is cancelled "
            "and its handle dropped (keys discarded): the heap is measured at once and again "
            "after one pass of the loop -- asyncio keeps cancelled handles in its heap until "
            "a pass finds them more than half of it, uvloop frees a cancelled timer's libuv "
            "handle in the next pass, the wheel releases a handle at once. `IdleTimeouts` "
            "keeps a discarded key's entry until its filing comes due (up to the timeout "
            "later). "
            "RSS is rarely given back to the OS, so it is shown for the pending timers only. "
            "The drop-in wheel loop's rows are the same `loop.call_at` on "
            "`aiowheel.loop.new_event_loop()` (asyncio+wheel) or `new_uvloop_event_loop()` "
            "(uvloop+wheel): a `LoopTimerHandle` each."
        ),
        variants=(
            Variant("asyncio TimerHandle", "asyncio"),
            Variant("uvloop TimerHandle", "uvloop"),
            *_pair("asyncio+wheel LoopTimerHandle", "asyncio+wheel"),
            *_pair("uvloop+wheel LoopTimerHandle", "uvloop+wheel"),
            *_pair("aiowheel TimerHandle", "asyncio"),
            *_pair("IdleTimeouts key", "asyncio", "touch"),
        ),
        metrics=(
            Metric("heap_pending", "heap B/timer", 1.0, 0),
            Metric("rss_pending", "RSS B/timer", 1.0, 0),
            Metric("heap_cancelled", "heap B/timer after cancel", 1.0, 0),
            Metric("heap_after_pass", "... after a loop pass", 1.0, 0),
        ),
        ratio_key="heap_pending",
        baselines=(("asyncio", "asyncio TimerHandle"), ("uvloop", "uvloop TimerHandle")),
        measure=_memory,
        cases=_memory_cases,
    ),
    Scenario(
        name="lateness",
        title="5. Lateness under load",
        doc=(
            "N timers are scheduled to come due uniformly over `window` seconds. The first is "
            f"due {LEAD} s plus {LEAD_FACTOR:.0f} times the estimated scheduling time after "
            f"scheduling starts (estimated from {CALIBRATION:,} throwaway timers just before), "
            "so that all are scheduled before the first is due (slack > 0 confirms it); the "
            "GC is off while they are scheduled. Each "
            "callback records `loop.time()`; lateness is that minus the timer's `when`, in "
            "the loop's own clock (uvloop's has millisecond resolution). Early fires are "
            "callbacks that saw `loop.time() < when`: asyncio may fire up to its "
            "`clock_resolution` early, uvloop up to about 1 ms (it rounds delays to whole "
            "milliseconds) -- counted as they are. The burst row is `burst` timers due within "
            "`burst_window` seconds; sizes from the burst's up are left to it. The Timer's own "
            "view, from `stats().lateness` (its clock as each callback starts), is the last "
            "column -- the upper bound of the bucket holding its p99 -- and the histogram "
            "below the table."
        ),
        variants=(
            Variant("asyncio loop.call_at", "asyncio"),
            *_pair("asyncio + Timer.call_at", "asyncio"),
            Variant("uvloop loop.call_at", "uvloop"),
            *_pair("uvloop + Timer.call_at", "uvloop"),
        ),
        metrics=(
            Metric("p50", "p50 ms", _MS, 3),
            Metric("p99", "p99 ms", _MS, 3),
            Metric("max", "max ms", _MS, 3),
            Metric("early", "early fires", 1.0, 0),
            Metric("earliest", "most early ms", _MS, 3),
            Metric("slack", "slack s", 1.0, 2),
            Metric("timer_p99", "Timer's p99 bucket ms", _MS, 3),
        ),
        ratio_key="p99",
        baselines=(("asyncio", "asyncio loop.call_at"), ("uvloop", "uvloop loop.call_at")),
        measure=_lateness,
        cases=_lateness_cases,
    ),
    Scenario(
        name="wakeups",
        title="6. Idle wake-ups with N timers pending an hour away",
        doc=(
            "N timers are pending 1-2 h away and the program does nothing for `interval` "
            "seconds. Wake-ups per second: voluntary context switches of the process "
            "(`getrusage`), i.e. times it blocked and was woken, for every loop alike; also "
            "asyncio's loop passes (calls of its selector's `select`) and the Timer driver's "
            "wake-ups (`stats().driver_wakeups`) where they exist. The one wake-up that ends "
            "the interval is included, so 1 per interval is the least possible."
        ),
        variants=(
            Variant("asyncio loop", "asyncio"),
            *_pair("asyncio + Timer", "asyncio"),
            Variant("uvloop loop", "uvloop"),
            *_pair("uvloop + Timer", "uvloop"),
        ),
        metrics=(
            Metric("wakeups", "wake-ups/s", 1.0, 1),
            Metric("loop_passes", "asyncio passes/s", 1.0, 1),
            Metric("driver", "driver wake-ups/s", 1.0, 1),
            Metric("cpu", "CPU ms/s", 1e3, 2),
        ),
        ratio_key="wakeups",
        baselines=(("asyncio", "asyncio loop"), ("uvloop", "uvloop loop")),
        measure=_wakeups,
    ),
    Scenario(
        name="floor",
        title="7. The floor: the cheapest Python-level call into C per timer",
        doc=(
            "The cost per timer of the cheapest thing a Python loop over N timers can do with "
            "each -- a dict store `d[key] = when` or a `list.append(when)` -- next to scheduling "
            "alone (no firing): `HierarchicalWheel.add` on its own, and `call_at` on asyncio, "
            "uvloop and the Timer. Same loop shape in every variant. Figure: CPU per timer; "
            "ratios against the dict store."
        ),
        variants=(
            Variant("floor: d[key] = when", "none", api="dict"),
            Variant("floor: list.append(when)", "none", api="append"),
            *_pair("wheel.add", "none", "wheel.add"),
            Variant("asyncio loop.call_at (schedule only)", "asyncio"),
            Variant("uvloop loop.call_at (schedule only)", "uvloop"),
            *_pair("Timer.call_at (schedule only)", "asyncio"),
        ),
        metrics=(Metric("cpu", "CPU ns/op", 1e9, 0),),
        ratio_key="cpu",
        baselines=(("floor", "floor: d[key] = when"),),
        measure=_floor,
    ),
    Scenario(
        name="keepalive",
        title="8. Idle connections at scale: a keepalive ping and an idle timeout each",
        doc=(
            "N idle websocket-style connections, each with the two timers a server keeps for "
            "it: a keepalive (a ping every 20 s, as websockets sends them) and an idle "
            "timeout (60 s, pushed back whenever data arrives), both stretched 60 times (20 "
            "min, 1 h) so that none comes due while measured, even under callgrind (how far "
            "away a timer is costs nothing on these loops). "
            "No sockets: only the timers are modelled, as churn models reschedules. On a "
            "loop, each is a `loop.call_later(delay, callback, key)` (handles in two "
            "preallocated lists) -- the same code on asyncio, uvloop and the wheel loop on "
            "either base (`aiowheel.loop.new_event_loop()`, `new_uvloop_event_loop()`); "
            "aiowheel's own API keeps the ping on a `Timer.call_later` and the idle timeouts "
            "on an `IdleTimeouts` of the same Timer, one `touch` per packet. Then `ops` "
            "keepalive cycles of random connections, one loop pass every "
            f"{BATCH}: a cycle is the ping timer rescheduled (`cancel()` and a new "
            "`call_later`, what its firing and re-arming costs the timers) and the pong's "
            "arrival pushing back the idle timeout (`cancel()` and a new `call_later`, or "
            "`touch`); every timer is far enough away not to fire while measured. Figures: "
            "the peak RSS growth over the set-up and the cycles (untraced), the Python heap "
            "(`tracemalloc`, the set-up again, traced) per connection, and the CPU per cycle "
            "(`suite.py --callgrind`: CPU instructions per cycle). Not on trio, which has no "
            "`call_later`: a connection's timers there are cancel scopes of a task per "
            "connection, a different program."
        ),
        variants=(
            Variant("asyncio loop.call_later", "asyncio", api="call_later"),
            Variant("uvloop loop.call_later", "uvloop", api="call_later"),
            *_pair("asyncio+wheel loop.call_later", "asyncio+wheel", "call_later"),
            *_pair("uvloop+wheel loop.call_later", "uvloop+wheel", "call_later"),
            *_pair("Timer.call_later + IdleTimeouts.touch", "asyncio", "touch"),
        ),
        metrics=(
            Metric("rss_peak", "peak RSS B/conn", 1.0, 0),
            Metric("heap", "heap B/conn", 1.0, 0),
            Metric("cpu", "CPU µs/cycle", 1e6),
        ),
        ratio_key="heap",
        baselines=(
            ("asyncio", "asyncio loop.call_later"),
            ("uvloop", "uvloop loop.call_later"),
        ),
        measure=_keepalive,
        countable=True,
    ),
)

SCENARIO_NAMES = tuple(scenario.name for scenario in SCENARIOS)


def scenario_named(name: str) -> Scenario:
    for scenario in SCENARIOS:
        if scenario.name == name:
            return scenario
    raise ValueError(f"unknown scenario {name!r}; expected one of {', '.join(SCENARIO_NAMES)}")


# -- the child side --------------------------------------------------------------------------


def child_spec(scenario: Scenario, variant: Variant, case: Case) -> str:
    """The JSON argument of ``suite.py --child`` that measures ``variant`` in ``case``."""
    spec = {
        "scenario": scenario.name,
        "variant": variant.name,
        "n": case.n,
        "settings": asdict(case.settings),
    }
    return json.dumps(spec)


def child_env(variant: Variant) -> dict[str, str]:
    """The child's environment: ``AIOWHEEL_NO_EXTENSIONS`` set for the pure wheel only."""
    env = dict(os.environ)
    env.pop("AIOWHEEL_NO_EXTENSIONS", None)
    if variant.wheel == "pure":
        env["AIOWHEEL_NO_EXTENSIONS"] = "1"
    return env


def run_child(spec_json: str) -> str:
    """Measure what ``spec_json`` (from :func:`child_spec`) names; return the result as JSON."""
    spec = json.loads(spec_json)
    scenario = scenario_named(spec["scenario"])
    settings = Settings(**{**spec["settings"], "sizes": tuple(spec["settings"]["sizes"])})
    (variant,) = (v for v in scenario.variants if v.name == spec["variant"])
    _check_wheel(variant)
    return json.dumps(scenario.measure(variant, spec["n"], settings))
