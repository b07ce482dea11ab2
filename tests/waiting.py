"""Waiting for an event, in tests that run in real time (uvloop, real servers) as well as in
virtual time.

A loaded machine can stall a real-time loop for any length of time, so a test never asserts that
something happened within a real-time window: it waits for the thing itself, bounded by
:data:`HANG`, a bound that turns a hang into a failure and is never reached by a slow machine.
In virtual time such a wait costs nothing: the clock jumps.

A module of its own, not ``conftest.py``, so that tests can import it (see ``twins.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["HANG", "POLL", "run_until"]

#: Upper bound on a wait for an event, in seconds: fails only on a hang, never on a slow machine.
HANG = 60.0
#: How often a condition is checked: shorter than the wheel loop's default ``min_delay`` (4 ms),
#: so that the checks stay on the base loop and add no wheel timer.
POLL = 0.001


def run_until(loop: asyncio.AbstractEventLoop, condition: Callable[[], bool]) -> None:
    """Run ``loop`` until ``condition()`` holds, checked every :data:`POLL` s of its clock.

    Bounded by reading ``loop.time()``, not by ``asyncio.timeout``: that would put a timer of
    its own on a wheel loop's wheel, and be counted in the ``wheel_stats()`` a test checks.
    """

    async def poll() -> None:
        give_up = loop.time() + HANG
        while not condition():
            if loop.time() > give_up:
                raise TimeoutError(f"still not true after {HANG:g} s: {condition}")
            await asyncio.sleep(POLL)

    loop.run_until_complete(poll())
