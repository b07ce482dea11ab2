"""Smoke test of an installed aiowheel: the right implementation is loaded, and timers fire.

Usage: ``python scripts/smoke.py compiled|pure``, run from outside the checkout so that it imports
the installed package. The release workflow runs it on every wheel it builds, in a fresh
environment (cibuildwheel's test step, ``compiled``; the pure wheel's job, ``pure``) before
anything is published; ``tests/test_packaging.py`` runs it on the wheel and the sdist it builds.

Exit status 0 when it passes; otherwise a message naming what was expected and what was found.
It waits for its timers, never for a time window, and ends by itself (a few hundredths of a
second of timers).
"""

from __future__ import annotations

import asyncio
import os
import platform
import sys

import aiowheel
import aiowheel.loop
from aiowheel._impl import IMPLEMENTATIONS


def check(expected: str) -> None:
    """Raise SystemExit with a message unless the ``expected`` implementation runs and its
    timers fire."""
    where = os.path.dirname(aiowheel.__file__)
    python = f"{platform.python_implementation()} {platform.python_version()}"
    if expected != aiowheel.IMPLEMENTATION:
        raise SystemExit(
            f"smoke test: expected the {expected} implementation, but {python} loaded the "
            f"{aiowheel.IMPLEMENTATION} one (aiowheel {aiowheel.__version__} from {where})"
        )
    fired: list[object] = []

    def answer() -> int:
        fired.append("job")
        return 6 * 7

    async def on_a_timer() -> None:
        async with aiowheel.Timer(tick=0.001) as timer:
            timer.call_later(0.01, fired.append, "call_later")
            job = timer.schedule(0.005, answer)  # runs first: due timers run by deadline
            if await job != 42:
                raise SystemExit(f"smoke test: the job returned {job.result()!r}, not 42")
            await timer.sleep(0.02)

    async def on_the_wheel_loop() -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[str] = loop.create_future()
        loop.call_later(0.01, done.set_result, "wheel loop")
        fired.append(await done)

    asyncio.run(on_a_timer())
    with asyncio.Runner(loop_factory=aiowheel.loop.new_event_loop) as runner:
        runner.run(on_the_wheel_loop())
    if fired != ["job", "call_later", "wheel loop"]:
        raise SystemExit(f"smoke test: the timers ran as {fired!r}")
    print(
        f"aiowheel {aiowheel.__version__}, {aiowheel.IMPLEMENTATION} implementation, {python}: "
        "smoke test passed"
    )


def main(argv: list[str]) -> None:
    if len(argv) != 2 or argv[1] not in IMPLEMENTATIONS:
        raise SystemExit(f"usage: python {argv[0]} {'|'.join(IMPLEMENTATIONS)}")
    check(argv[1])


if __name__ == "__main__":
    main(sys.argv)
