"""Timeouts on the wheel: ``timer.timeout(delay)`` and ``timer.move_on_after(delay)``.

What it shows, in about a second:

1. ``async with timer.timeout(delay):`` cancels a block that runs too long and raises
   ``TimeoutError``, exactly like ``asyncio.timeout``;
2. a block that finishes in time is left alone (``t.expired()`` is False);
3. ``timer.move_on_after(delay)`` ends the block without raising; ``t.cancelled_caught`` says
   whether it was cut short -- here, collecting whatever answers arrive within a time budget;
4. ``t.reschedule(when)`` pushes the deadline on every message: a read-idle timeout for a
   stream, which costs a comparison per message, not a wheel operation;
5. nested timeouts: the inner, shorter one fires and the outer one carries on;
6. a thousand tasks, each under its own timeout, are a thousand entries on one wheel, which
   the Timer drives with one loop timer.

Run it (from the repository root, with aiowheel installed):

    python examples/timeouts.py
"""

from __future__ import annotations

import asyncio

import aiowheel


async def main() -> None:
    async with aiowheel.Timer(tick=0.001) as timer:
        start = timer.time()

        def log(message: str) -> None:
            print(f"[{timer.time() - start:5.3f} s] {message}")

        # 1. Too slow: cancelled at the deadline, TimeoutError on the way out.
        try:
            async with timer.timeout(0.1):
                await asyncio.sleep(10)
        except TimeoutError:
            log("1. the slow call timed out after 0.1 s")

        # 2. Fast enough: nothing happens.
        async with timer.timeout(0.1) as t:
            await asyncio.sleep(0.01)
        log(f"2. the fast call finished, expired={t.expired()}")

        # 3. A time budget: take the answers that came in time, drop the rest, no exception.
        answers: list[str] = []

        async def ask(name: str, delay: float) -> None:
            await asyncio.sleep(delay)
            answers.append(name)

        async with timer.move_on_after(0.15) as t:
            await asyncio.gather(ask("fast", 0.05), ask("medium", 0.1), ask("slow", 1.0))
        log(f"3. within the budget: {answers}, cut short={t.cancelled_caught}")

        # 4. An idle timeout on a stream: each message pushes the deadline 0.1 s further.
        queue: asyncio.Queue[int] = asyncio.Queue()

        async def produce() -> None:
            for number in range(5):
                await asyncio.sleep(0.05)
                queue.put_nowait(number)

        producer = asyncio.create_task(produce())
        received = []
        async with timer.move_on_after(0.1) as t:
            while True:
                received.append(await queue.get())
                t.reschedule(timer.time() + 0.1)
        await producer
        log(f"4. received {received}, then the stream was idle for 0.1 s")

        # 5. Nested: the inner timeout fires, the outer one does not.
        async with timer.timeout(1.0) as outer:
            async with timer.move_on_after(0.05) as inner:
                await asyncio.sleep(10)
            await asyncio.sleep(0.01)  # the outer block carries on
        log(f"5. inner expired={inner.expired()}, outer expired={outer.expired()}")

        # 6. A thousand concurrent timeouts, almost all cancelled, as real timeouts are.
        release = asyncio.Event()

        async def request() -> None:
            async with timer.timeout(30):
                await release.wait()

        tasks = [asyncio.create_task(request()) for _ in range(1000)]
        await asyncio.sleep(0.01)
        pending = timer.stats().pending
        release.set()
        await asyncio.gather(*tasks)
        log(f"6. {pending} timeouts were pending on the wheel at once, all released in time")


if __name__ == "__main__":
    asyncio.run(main())
