"""Test support: asyncio in virtual time, and one clock API for asyncio and trio tests.

:class:`VirtualTimeLoop` is an ordinary selector event loop whose clock is a number it owns. When
the loop has nothing ready to run and would block waiting for its next timer, it jumps the clock
straight to that timer instead of sleeping -- trio's ``MockClock(autojump_threshold=0)`` for
asyncio. So a test that waits an hour finishes in milliseconds, and timing assertions can be
exact: there is no real time, hence no tolerance window, in the result.

Everything on the loop sees virtual time: ``loop.time()``, ``asyncio.sleep``,
``asyncio.timeout``, and an :class:`aiowheel.Timer` entered on it. Real I/O still works (the
loop polls its selector without blocking before each jump), but a test that waits on real
sockets while timers are pending will see virtual time race ahead of the network: turn
``autojump`` off in such a test and move the clock by hand with :meth:`VirtualClock.advance`.

:class:`VirtualClock` is the clock of whatever test is running in this thread -- a
:class:`VirtualTimeLoop`, or a trio run with ``trio.testing.MockClock`` -- with one API for
both: read the time, advance it (running every timer at its own deadline), switch autojump off
and on. The pytest plugin (:mod:`aiowheel.pytest_plugin`) hands it to tests as the
``virtual_clock`` fixture.

uvloop's clock cannot be replaced, so there is no virtual uvloop; trio has ``MockClock``.
"""

from __future__ import annotations

import asyncio
import math
import selectors
import sys
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from trio.testing import MockClock

__all__ = ["VirtualClock", "VirtualTimeLoop", "run"]

T = TypeVar("T")

# asyncio.base_events.MAXIMUM_SELECT_TIMEOUT: the longest asyncio ever waits in select().
_MAXIMUM_SELECT_TIMEOUT = 24 * 3600


def _check_seconds(seconds: object, what: str = "seconds", *, negative_ok: bool = False) -> float:
    """Return ``seconds`` as a float if it is a finite int or float (>= 0 unless
    ``negative_ok``), else raise TypeError or ValueError naming ``what`` and the value: for
    ``advance()``'s seconds and for the clock's ``start``."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{what} must be an int or a float, got {seconds!r}")
    if not negative_ok and not seconds >= 0:  # also NaN
        raise ValueError(f"{what} must be >= 0, got {seconds!r}")
    try:
        value = float(seconds)
    except OverflowError:  # an int beyond float range
        raise ValueError(f"{what} must be finite, got {seconds!r}") from None
    if not math.isfinite(value):  # a clock at infinity never reaches a timer; NaN runs all
        raise ValueError(f"{what} must be finite, got {seconds!r}")
    return value


def _clock_after(now: float, seconds: object) -> float:
    """The clock ``seconds`` (checked as :func:`_check_seconds` checks them) after ``now``:
    ValueError if that is past the largest float, where the clock would become infinite and
    never reach a timer again."""
    later = now + _check_seconds(seconds)
    if not math.isfinite(later):
        raise ValueError(
            f"seconds {seconds!r} would move the clock from {now!r} past the largest float"
        )
    return later


class _JumpingSelector(selectors.DefaultSelector):
    """A selector that tells its loop when the loop is idle, instead of blocking for a timer."""

    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualTimeLoop | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        # asyncio passes timeout 0 when callbacks are ready, None when no timer is pending, and
        # otherwise the time until its next timer (capped at a day).
        ready = super().select(0)
        if ready or timeout == 0 or self.loop is None or self.loop._idle(timeout):
            return ready
        return super().select(None)  # nothing can happen but I/O: wait for it, for real


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose ``time()`` is virtual and jumps to the next timer when idle.

    Args:
        start: the clock's initial value, in seconds: a finite int or float (TypeError for
            another type, ValueError for NaN or infinity, as :meth:`advance` refuses them).
        autojump: jump to the next timer whenever the loop is idle (the default). With False the
            clock moves only by :meth:`advance` or :meth:`VirtualClock.advance`, and an idle
            loop waits for I/O.
    """

    def __init__(self, start: float = 0.0, *, autojump: bool = True) -> None:
        selector = _JumpingSelector()
        super().__init__(selector)
        selector.loop = self
        try:
            self._virtual_now = _check_seconds(start, "start", negative_ok=True)
        except (TypeError, ValueError):
            self.close()  # a loop made, never to be used: its selector goes now
            raise
        self.autojump = autojump
        # While VirtualClock.advance runs: the time it advances to, and the future it awaits.
        self._advancing: tuple[float, asyncio.Future[None]] | None = None

    def time(self) -> float:
        return self._virtual_now

    # asyncio runs a timer once ``when < time() + clock_resolution``: with the monotonic clock's
    # resolution that is up to a nanosecond early, which in virtual time would run a timer before
    # the clock reaches it. One ulp of the current time makes the condition ``when <= time()``.
    @property
    def _clock_resolution(self) -> float:
        return math.ulp(self._virtual_now)

    @_clock_resolution.setter
    def _clock_resolution(self, value: float) -> None:
        pass  # BaseEventLoop.__init__ sets it; virtual time has its own

    async def shutdown_default_executor(self, timeout: float | None = None) -> None:
        """Wait for the default executor's threads to finish, without a virtual-time limit.

        ``asyncio.run`` and ``asyncio.Runner`` (Python 3.12+) give the threads a join timeout of
        300 seconds. On a virtual clock that limit runs out at once -- the loop is idle while the
        threads finish, so it jumps to the limit -- and asyncio warns that they did not finish.
        Threads run in real time: they are waited for as Python 3.11 does, however long they
        take; ``timeout`` is accepted and ignored.
        """
        await super().shutdown_default_executor()

    @property
    def autojump(self) -> bool:
        """Whether the idle loop jumps its clock to the next timer; settable."""
        return self._autojump

    @autojump.setter
    def autojump(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"autojump must be True or False, got {value!r}")
        self._autojump = value

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (timers due by then run on the next iteration).

        A jump: every timer it passes runs late, at the new time. :meth:`VirtualClock.advance`
        instead runs each timer at its own deadline.

        Raises:
            TypeError: ``seconds`` is not an int or a float.
            ValueError: ``seconds`` is negative, NaN or infinite, or the clock would pass the
                largest float (it never becomes infinite).
        """
        self._virtual_now = _clock_after(self._virtual_now, seconds)

    async def _advance_to(self, target: float) -> None:
        # VirtualClock.advance on asyncio: the selector does the work (_step_advance), one timer
        # deadline per idle moment, and resolves the future once nothing is due by ``target``.
        if self._advancing is not None and not self._advancing[1].done():
            raise RuntimeError("another task is already advancing this loop's clock")
        waiter = self.create_future()
        self._advancing = (target, waiter)
        try:
            await waiter
        finally:
            if self._advancing is not None and self._advancing[1] is waiter:
                self._advancing = None

    def _idle(self, timeout: float | None) -> bool:
        """The loop has nothing to run and would wait ``timeout`` seconds for its next timer
        (None: no timer is pending). Move the clock or wake the advancing task and return True,
        or return False to let the loop wait for I/O."""
        if self._advancing is not None and self._step_advance(self._advancing):
            return True
        if self._autojump and timeout is not None:
            self._jump(timeout)
            return True
        return False

    def _step_advance(self, advancing: tuple[float, asyncio.Future[None]]) -> bool:
        target, waiter = advancing
        if waiter.done():  # the advancing task was cancelled
            self._advancing = None
            return False
        # asyncio has just dropped cancelled timers from the heap's head: it is the next timer.
        scheduled: list[asyncio.TimerHandle] = self._scheduled  # type: ignore[attr-defined]
        if scheduled and scheduled[0].when() <= target:
            # Exactly to the timer's deadline: it runs in this iteration, seeing its own time.
            self._virtual_now = max(self._virtual_now, scheduled[0].when())
            return True
        self._virtual_now = max(self._virtual_now, target)
        self._advancing = None
        waiter.set_result(None)
        return True

    def _jump(self, timeout: float) -> None:
        # Jump to exactly the next timer's time: now + (when - now) may round to either side of
        # it. asyncio caps its select timeout at a day; then jump by the cap, as a real loop
        # would wake up.
        target = self._virtual_now + timeout
        scheduled: list[asyncio.TimerHandle] = self._scheduled  # type: ignore[attr-defined]
        if scheduled and timeout < _MAXIMUM_SELECT_TIMEOUT:
            target = scheduled[0].when()
        self._virtual_now = max(self._virtual_now, target)


_NOT_VIRTUAL = (
    "virtual time needs aiowheel.testing.VirtualTimeLoop -- with pytest-asyncio "
    '@pytest.mark.asyncio(loop_factories=["aiowheel-virtual"]), with anyio the anyio_backend '
    '("asyncio", {"loop_factory": VirtualTimeLoop}) -- or trio with '
    'trio.testing.MockClock: the anyio_backend ("trio", {"clock": MockClock(autojump_threshold=0)})'
)


def _running_clock() -> VirtualTimeLoop | MockClock:
    """The virtual clock of the async test running in this thread, or a RuntimeError."""
    # trio first: in trio's guest mode an asyncio loop is running too, but it is only the host.
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            clock = trio.lowlevel.current_clock()
        except RuntimeError:  # not inside trio.run
            pass
        else:
            from trio.testing import MockClock

            if isinstance(clock, MockClock):
                return clock
            raise RuntimeError(f"this trio run's clock is {clock!r}, a real one: {_NOT_VIRTUAL}")
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError(
            "VirtualClock is used from inside an async test: no asyncio event loop and no trio "
            "run is running in this thread"
        ) from None
    if isinstance(loop, VirtualTimeLoop):
        return loop
    kind = type(loop)
    raise RuntimeError(
        f"the running event loop, {kind.__module__}.{kind.__qualname__}, has a real clock: "
        f"{_NOT_VIRTUAL}"
    )


class VirtualClock:
    """The virtual clock of the async test running in this thread, on asyncio or on trio.

    Each call finds the clock anew: the running :class:`VirtualTimeLoop`, or the
    ``trio.testing.MockClock`` of the running trio run. So one object serves every test, can
    be made before the loop exists, and must be used from inside the test (its coroutine, or
    the async fixtures and tasks it runs). Used on a loop whose clock is real (asyncio's own,
    uvloop, trio without ``MockClock``), or outside any loop, every method raises
    ``RuntimeError`` saying how to run the test in virtual time.
    """

    def __init__(self) -> None:
        # The autojump setting of each clock this object switched, as it was before: restored
        # by _restore_autojump (the pytest fixture's teardown), for loops shared across tests.
        self._saved_autojump: list[tuple[VirtualTimeLoop | MockClock, bool | float]] = []

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"

    def time(self) -> float:
        """The current virtual time, in seconds: ``loop.time()`` or ``trio.current_time()``."""
        clock = _running_clock()
        if isinstance(clock, VirtualTimeLoop):
            return clock.time()
        return clock.current_time()

    async def advance(self, seconds: float) -> None:
        """Move virtual time forward by ``seconds``, running everything due on the way.

        Each timer due by then runs at its own deadline (the clock stops there first), in
        deadline order, and what it wakes runs until the loop is idle again, including timers it
        schedules within the span; then the clock is set to the end of the span. Returns once
        nothing is left to run. ``advance(0)`` only lets everything that is ready run.

        Works whether autojump is on or off; while it runs, it alone moves the clock. On trio
        the end time is reached up to float rounding (``MockClock`` moves by differences).

        Raises:
            TypeError: ``seconds`` is not an int or a float.
            ValueError: ``seconds`` is negative, NaN or infinite, or the clock would pass the
                largest float (it never becomes infinite).
            RuntimeError: no virtual clock is running (see the class), or another task is
                advancing the same loop.
        """
        _check_seconds(seconds)
        clock = _running_clock()
        if isinstance(clock, VirtualTimeLoop):
            await clock._advance_to(_clock_after(clock.time(), seconds))
        else:
            await _advance_trio(clock, _clock_after(clock.current_time(), seconds))

    @property
    def autojump(self) -> bool:
        """Whether virtual time jumps to the next timer whenever everything waits; settable.

        True is :class:`VirtualTimeLoop`'s default and ``MockClock(autojump_threshold=0)``.
        Switch it off in a test that waits on real I/O while timers are pending (autojump would
        race ahead of the network) and move the clock with :meth:`advance`; an idle loop then
        waits for I/O, and a test that waits for a timer without advancing waits forever.
        """
        clock = _running_clock()
        if isinstance(clock, VirtualTimeLoop):
            return clock.autojump
        return clock.autojump_threshold < math.inf

    @autojump.setter
    def autojump(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"autojump must be True or False, got {value!r}")
        clock = _running_clock()
        if not any(saved is clock for saved, _ in self._saved_autojump):
            before = (
                clock.autojump if isinstance(clock, VirtualTimeLoop) else clock.autojump_threshold
            )
            self._saved_autojump.append((clock, before))
        if isinstance(clock, VirtualTimeLoop):
            clock.autojump = value
        else:
            clock.autojump_threshold = 0.0 if value else math.inf

    def _restore_autojump(self) -> None:
        """Put back the autojump setting of every clock this object switched."""
        for clock, before in reversed(self._saved_autojump):
            if isinstance(clock, VirtualTimeLoop):
                clock.autojump = bool(before)
            else:
                clock.autojump_threshold = before
        self._saved_autojump.clear()


async def _advance_trio(clock: MockClock, target: float) -> None:
    import trio
    import trio.testing

    while True:
        # Idle first: what is ready runs, and the next deadline is the one that matters.
        await trio.testing.wait_all_tasks_blocked()
        to_next = trio.lowlevel.current_statistics().seconds_to_next_deadline
        now = clock.current_time()
        if to_next > target - now:  # also inf: no deadline at all
            break
        if to_next > 0:
            clock.jump(to_next)  # to the deadline; the expired scope wakes its task
    remaining = target - clock.current_time()
    if remaining > 0:
        clock.jump(remaining)


def run(main: Coroutine[Any, Any, T], *, start: float = 0.0, debug: bool | None = None) -> T:
    """Run ``main`` to completion in virtual time, on a fresh :class:`VirtualTimeLoop`: the
    virtual-time ``asyncio.run``, for tests.

    It is the only ``run`` in aiowheel, and it never runs in real time. To run a program on the
    wheel-backed loop, use asyncio's own runner: ``asyncio.Runner(loop_factory=
    aiowheel.loop.new_event_loop)``.

    ``start`` is the clock's initial value, checked as :class:`VirtualTimeLoop` checks it; a
    bad one raises before ``main`` starts, and ``main`` is closed unstarted.
    """
    try:
        now = _check_seconds(start, "start", negative_ok=True)
    except (TypeError, ValueError):
        main.close()  # as if it had run: no "coroutine was never awaited" warning
        raise
    with asyncio.Runner(debug=debug, loop_factory=lambda: VirtualTimeLoop(now)) as runner:
        return runner.run(main)
