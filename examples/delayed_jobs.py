"""Delayed jobs with ``await timer.schedule(delay, fn, *args)``.

What it shows, in about a second:

1. a plain function scheduled for later: ``await job`` returns its result;
2. a coroutine function: when its time comes it runs as a task the Timer owns;
3. many jobs at once, awaited together: they run in deadline order, whatever order they were
   scheduled in;
4. cancellation: a job cancelled before it fires never runs, and awaiting it raises
   ``asyncio.CancelledError``;
5. a job that raises: ``await job`` raises the same exception;
6. leaving ``async with Timer()`` cancels the jobs still pending.

Run it (from the repository root, with aiowheel installed):

    python examples/delayed_jobs.py
"""

from __future__ import annotations

import asyncio

import aiowheel


async def main() -> None:
    async with aiowheel.Timer(tick=0.001) as timer:
        start = timer.time()

        def log(message: str) -> None:
            print(f"[{timer.time() - start:5.3f} s] {message}")

        # 1. A plain function runs in the Timer's pass, no task needed.
        def add(a: int, b: int) -> int:
            log(f"add({a}, {b}) runs")
            return a + b

        total = await timer.schedule(0.1, add, 2, 3)
        log(f"1. await job -> {total}")

        # 2. A coroutine function runs as a task when its time comes.
        async def fetch(name: str) -> str:
            log(f"fetch({name!r}) starts")
            await asyncio.sleep(0.05)  # stands for real I/O
            return f"{name}: 42 rows"

        log(f"2. await job -> {await timer.schedule(0.1, fetch, 'report')!r}")

        # 3. Scheduled out of order, run in deadline order.
        ran: list[str] = []
        jobs = [
            timer.schedule(delay, ran.append, name)
            for name, delay in [("c", 0.3), ("a", 0.1), ("b", 0.2)]
        ]
        await asyncio.gather(*jobs)
        log(f"3. jobs ran in deadline order: {ran}")

        # 4. Cancelled before it fires: never runs, awaiting it raises CancelledError.
        reminder = timer.schedule(10, log, "the reminder ran (it should not have)")
        reminder.cancel()
        try:
            await reminder
        except asyncio.CancelledError:
            log(f"4. cancelled job: done={reminder.done()}, never ran")

        # 5. The job's exception comes out of await.
        def fail() -> None:
            raise ValueError("the job failed")

        try:
            await timer.schedule(0.05, fail)
        except ValueError as exc:
            log(f"5. await job raised {exc!r}")

        # 6. Still pending when the Timer closes: cancelled with it.
        leftover = timer.schedule(60, log, "the leftover ran (it should not have)")
        stats = timer.stats()
        log(f"   stats: {stats.fired} fired, {stats.cancelled} cancelled, {stats.pending} pending")
    log(f"6. after the Timer closed, the leftover job is done={leftover.done()}")


if __name__ == "__main__":
    asyncio.run(main())
