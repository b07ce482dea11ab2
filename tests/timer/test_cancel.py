"""Cancelling a handle: before it runs, twice or after it ran, and letting go of the callback and
its arguments at once (or once it ran).
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
from support import Fired

from aiowheel import Timer

# Every test on both implementations (the `implementation` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("implementation")]


# -- helpers --------------------------------------------------------------------------------------


class Target:
    """A callable that can be weakly referenced, to see when the Timer lets go of it."""

    def __call__(self, *args: Any) -> None:
        return None


# -- cancel ---------------------------------------------------------------------------------------


async def test_cancel_before_it_runs() -> None:
    async with Timer() as timer:
        fired = Fired(timer)
        handle = timer.call_later(0.002, fired, "cancelled")
        timer.call_later(0.002, fired, "kept")
        assert not handle.cancelled()
        assert len(timer) == 2
        handle.cancel()
        assert handle.cancelled()
        assert len(timer) == 1  # out of the wheel at once
        await timer.sleep(0.003)
        stats = timer.stats()
    assert fired.labels == ["kept"]
    assert stats.cancelled == 1


async def test_cancel_twice_or_after_it_ran_is_a_no_op() -> None:
    async with Timer() as timer:
        fired = Fired(timer)
        twice = timer.call_later(0.002, fired, "twice")
        twice.cancel()
        twice.cancel()
        assert twice.cancelled()
        ran = timer.call_later(0.001, fired, "ran")
        await timer.sleep(0.003)
        assert fired.labels == ["ran"]
        ran.cancel()
        ran.cancel()
        # As asyncio.TimerHandle: cancelled() reports that cancel() was called.
        assert ran.cancelled()
        stats = timer.stats()
    assert (stats.cancelled, stats.fired, stats.pending) == (1, 2, 0)


async def test_cancel_releases_the_callback_and_its_arguments_at_once() -> None:
    gc.disable()  # only reference counting may free them: "at once", not "eventually"
    try:
        async with Timer() as timer:
            objects = [Target() for _ in range(4)]
            refs = [weakref.ref(obj) for obj in objects]
            handle = timer.call_later(10, objects[0], objects[1])
            job = timer.schedule(10, objects[2], objects[3])
            del objects
            assert all(ref() is not None for ref in refs)
            assert len(timer) == 2
            handle.cancel()
            assert [ref() is None for ref in refs] == [True, True, False, False]
            assert len(timer) == 1
            job.cancel()
            assert all(ref() is None for ref in refs)
            assert len(timer) == 0
    finally:
        gc.enable()


async def test_a_callback_and_its_arguments_are_released_once_it_ran() -> None:
    """Also when the callback's object holds the handle (a cycle while pending): once the timer
    ran, reference counting alone frees them."""

    class Connection:
        def __init__(self, timer: Timer) -> None:
            self.handle = timer.call_later(0.001, self.on_timeout, Target())

        def on_timeout(self, argument: Target) -> None:
            self.ran = True

    gc.disable()
    try:
        async with Timer() as timer:
            connection = Connection(timer)
            refs = [weakref.ref(connection), weakref.ref(connection.handle._args[0])]
            handle = connection.handle
            del connection
            await timer.sleep(0.002)
            assert [ref() for ref in refs] == [None, None]
            assert handle.payload is None and handle._args == ()
            assert repr(handle).endswith(" done None>")
    finally:
        gc.enable()


@pytest.mark.parametrize("outcome", ["ran", "cancelled"])
async def test_a_handle_its_own_callback_references_is_freed_by_reference_counting(
    outcome: str,
) -> None:
    """handle -> callback -> handle is a cycle while the timer is pending (the wheel holds the
    handle then anyway); once it ran or was cancelled the handle lets go of its callback, so
    reference counting alone frees all three -- with no help from the garbage collector, which
    does not see the compiled core's handles at all."""

    class Owner:
        def __init__(self, timer: Timer, argument: Target) -> None:
            self.handle = timer.call_later(0.001, self.fire, argument)

        def fire(self, argument: Target) -> None:
            assert isinstance(argument, Target)

    gc.disable()
    try:
        async with Timer() as timer:
            owner = Owner(timer, Target())
            refs = [weakref.ref(owner), weakref.ref(owner.handle._args[0])]
            handle = owner.handle
            del owner
            assert all(ref() is not None for ref in refs)
            if outcome == "cancelled":
                handle.cancel()
            else:
                await timer.sleep(0.002)
            assert [ref() for ref in refs] == [None, None]
            assert (handle.payload, handle._args) == (None, ())
            assert handle.cancelled() == (outcome == "cancelled")
    finally:
        gc.enable()
