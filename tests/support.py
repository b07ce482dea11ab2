"""Helpers shared by the test modules: the one module they import from each other.

No test module imports another (a helper two modules need lives here), and none imports
``conftest.py``: with ``tests/spark/conftest.py`` there are two modules named ``conftest``, and
which one a plain ``from conftest import ...`` finds depends on collection order. The twins'
table for the ``twins`` fixture is :mod:`twins`; what the servers started in a subprocess import
is :mod:`served`.

* Waiting: :data:`HANG`, :data:`POLL`, :func:`run_until`. A loaded machine can stall a
  real-time loop for any length of time, so a test never asserts that something happened within
  a real-time window: it waits for the thing itself, bounded by :data:`HANG`, a bound that turns
  a hang into a failure and is never reached by a slow machine. In virtual time such a wait
  costs nothing: the clock jumps.
* The backends of ``conftest.py`` (asyncio in virtual time, uvloop, trio): :func:`is_virtual`,
  :func:`cancellation`, :func:`running_tasks`, :func:`jump`.
* Callbacks and checks of the Timer tests: :data:`TICK`, :func:`noop`, :class:`Fired`,
  :class:`Boom`, :func:`boom`, :class:`Fatal`, :func:`raise_`, :func:`raise_soon`,
  :func:`assert_on_time`.
* The wheel loop on a virtual clock: :class:`VirtualLoop`, :func:`make_loop`,
  :data:`needs_uvloop`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import anyio
import pytest
import sniffio

from aiowheel import JobCancelled, Timer
from aiowheel.loop import WheelLoop, new_event_loop, new_uvloop_event_loop
from aiowheel.loop._selector import WheelEventLoop
from aiowheel.testing import VirtualTimeLoop

__all__ = [
    "HANG",
    "POLL",
    "START",
    "TICK",
    "Boom",
    "Fatal",
    "Fired",
    "VirtualLoop",
    "assert_on_time",
    "boom",
    "cancellation",
    "is_virtual",
    "jump",
    "make_loop",
    "needs_uvloop",
    "noop",
    "raise_",
    "raise_soon",
    "run_until",
    "running_tasks",
]

# -- waiting -----------------------------------------------------------------------------------

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


# -- the backends --------------------------------------------------------------------------------


def is_virtual(backend_name: str) -> bool:
    """True on the backends with a virtual clock, where timing assertions are exact."""
    return backend_name != "uvloop"


def cancellation(backend_name: str) -> type[BaseException]:
    """What awaiting a cancelled job raises on this backend."""
    return JobCancelled if backend_name == "trio" else asyncio.CancelledError


def running_tasks(backend_name: str) -> set[object]:
    """Every task alive on the running loop."""
    if backend_name != "trio":
        return set(asyncio.all_tasks())
    import trio

    tasks: set[object] = set()
    stack = [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        tasks.add(task)
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return tasks


def jump(seconds: float) -> None:
    """Move the virtual clock forward now, without letting the driver (or anything) run."""
    if sniffio.current_async_library() == "trio":
        import trio

        trio.lowlevel.current_clock().jump(seconds)  # type: ignore[attr-defined]
    else:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        loop.advance(seconds)


# -- callbacks and checks of the Timer tests -----------------------------------------------------

#: The tick of most Timer tests: 1 ms, the Timer's default.
TICK = 0.001


def noop(*args: Any) -> None:
    return None


class Fired:
    """A callback that records each call's label and the Timer's time when it ran."""

    def __init__(self, timer: Timer) -> None:
        self.timer = timer
        self.calls: list[tuple[Any, float]] = []

    def __call__(self, label: Any = None) -> None:
        self.calls.append((label, self.timer.time()))

    @property
    def labels(self) -> list[Any]:
        return [label for label, _ in self.calls]


class Boom(Exception):
    pass


def boom(*args: Any) -> None:
    raise Boom(*args)


class Fatal(BaseException):
    """Not an Exception, but not SystemExit/KeyboardInterrupt either: reported, as in asyncio."""


def raise_(exc_type: type[BaseException], *args: Any) -> None:
    raise exc_type


async def raise_soon(exc_type: type[BaseException], *args: Any) -> None:
    await anyio.sleep(0)
    raise exc_type


def assert_on_time(when: float, ran_at: float, *, exact: bool, tick: float = TICK) -> None:
    """Never early; in virtual time also less than one tick late."""
    assert ran_at >= when, f"ran at {ran_at!r}, before its deadline {when!r}"
    if exact:
        assert ran_at < when + tick, f"ran at {ran_at!r}, a tick or more after {when!r}"


# -- the wheel loop on a virtual clock -----------------------------------------------------------

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is in the dev extra
    uvloop = None

needs_uvloop = pytest.mark.skipif(uvloop is None, reason="uvloop is not installed")

# A start far from 0, as a real monotonic clock is, so that float rounding is exercised.
START = 1000.0


class VirtualLoop(WheelEventLoop, VirtualTimeLoop):
    """The wheel-backed selector loop on aiowheel.testing's virtual clock.

    When the loop would block for its next timer (the wheel's driver included), the clock jumps
    exactly to it, so timing assertions need no tolerance. ``waits`` records each jump.
    """

    def __init__(self, *, start: float = START, **options: Any) -> None:
        # VirtualTimeLoop sets up the selector loop and the clock; then the wheel, which reads it.
        VirtualTimeLoop.__init__(self, start)
        self._init_wheel(**options)
        self.waits: list[float] = []

    def _jump(self, timeout: float) -> None:
        self.waits.append(timeout)
        super()._jump(timeout)


def make_loop(kind: str, **options: Any) -> WheelLoop:
    """A fresh loop of ``kind``: "virtual" (selector, virtual time), "asyncio" or "uvloop"."""
    if kind == "virtual":
        return VirtualLoop(**options)
    return (new_uvloop_event_loop if kind == "uvloop" else new_event_loop)(**options)
