"""The asyncio adapter: any ``asyncio`` event loop, including uvloop.

A wake of the Timer is one loop timer (``loop.call_at``) whose callback runs the Timer's pass --
advance the wheel, run what is due, re-arm -- directly, in the same loop iteration. Moving the
wake-up time cancels that loop timer and arms a new one, so re-arming costs one loop timer no
matter how many wheel timers are added. The driver coroutine stays, as the one task that owns
the Timer's lifetime: it sleeps until the Timer closes (``stop`` cancels it). Waking it for each
pass instead would cost a future, a scheduled task step and a second loop iteration per wake --
as much CPU as the loop's own timers when a few timers are due per wake. Jobs are plain tasks,
errors go to ``loop.call_exception_handler``. A timeout cancels its task with ``task.cancel()``
and counts it back with ``uncancel()``, exactly as ``asyncio.timeout`` does
(:class:`AsyncioCancelScope`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from contextvars import Context, copy_context
from typing import Any

_sniffio_local: Any
try:  # what anyio (and other libraries) ask which async library runs; optional
    from sniffio import thread_local as _sniffio_local
except ImportError:  # pragma: no cover - anyio without sniffio checks for a running loop
    _sniffio_local = None

__all__ = ["AsyncioBackend", "AsyncioCancelScope"]


def _is_uvloop(loop: asyncio.AbstractEventLoop) -> bool:
    """``loop`` is a ``uvloop.Loop``, or of a subclass of it (aiowheel's wheel-backed uvloop is
    one), found without importing uvloop, which is optional."""
    return any(cls.__module__.partition(".")[0] == "uvloop" for cls in type(loop).__mro__)


class AsyncioBackend:
    name = "asyncio"
    cancelled_exc_class: type[BaseException] = asyncio.CancelledError

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        # asyncio's own loops read time.monotonic() through a Python method; calling the C
        # function directly spares a frame on every clock read (every touch of IdleTimeouts).
        # Loops with a clock of their own (uvloop, virtual-time test loops) keep theirs.
        uses_monotonic = getattr(loop.time, "__func__", None) is asyncio.BaseEventLoop.time
        self.time: Callable[[], float] = time.monotonic if uses_monotonic else loop.time
        self._driver: asyncio.Task[None] | None = None
        # The Timer's pass, run by the alarm; set by start().
        self._wake: Callable[[], None] = _never_woken
        # The loop timer that runs the next pass, and the context it runs in: the driver's
        # (set by start()), instead of a copy of the arming caller's context at every arm.
        self._alarm: asyncio.TimerHandle | None = None
        self._context = Context()
        # uvloop converts a delay to whole milliseconds with round(), so its timers can fire up
        # to half a millisecond early; the driver would wake, find nothing due and re-arm, again
        # and again, until the millisecond turns. Half a millisecond more makes round() a ceil.
        self._bias = 0.0005 if _is_uvloop(loop) else 0.0
        self._jobs: set[asyncio.Task[None]] = set()

    async def start(
        self, driver: Callable[[], Coroutine[Any, Any, None]], wake: Callable[[], None]
    ) -> None:
        self._wake = wake
        self._context = copy_context()
        self._driver = self.loop.create_task(driver(), name="aiowheel driver")

    async def stop(self) -> None:
        self.arm(None)
        # A job closing its own Timer is not cancelled by it, nor waited for: it runs on.
        current = asyncio.current_task(self.loop)
        tasks = [task for task in self._jobs if task is not current]
        for task in tasks:
            _cancel_soon(self.loop, task)
        if self._driver is not None:
            self._driver.cancel()
            tasks.append(self._driver)
        # wait(), not gather(): a job's outcome (even one that swallows its cancellation) is its
        # awaiters' business; only a cancellation of the closing task itself ends the wait.
        if tasks:
            await asyncio.wait(tasks)

    def arm(self, when: float | None) -> None:
        alarm = self._alarm
        if alarm is not None:
            alarm.cancel()
        if when is None:
            self._alarm = None
        else:
            self._alarm = self.loop.call_at(when + self._bias, self._ring, context=self._context)

    def _ring(self) -> None:
        self._alarm = None
        local = _sniffio_local
        if local is None:
            self._wake()
            return
        # sniffio finds asyncio through the current task, and a pass runs outside any: name
        # the library for the pass, so that anyio (and whatever else asks sniffio) works in a
        # callback as it did when the driver task ran the passes. Once per pass, not per timer.
        outer = local.name
        local.name = "asyncio"
        try:
            self._wake()
        finally:
            local.name = outer

    async def wait(self) -> None:
        # The passes run from the alarm (see the module docstring): the driver sleeps until
        # stop() cancels it.
        await self.loop.create_future()

    def interrupt(self, exc: BaseException, rearm: Callable[[], None]) -> None:
        # The pass runs in the alarm's loop callback: the interrupt leaves the loop from there,
        # at once, as any loop callback's does. The driver is re-armed by a callback queued
        # now, which runs when the application runs the loop again -- not before the raise:
        # the alarm, due at once for the rest of the batch, would then run that rest before
        # the interrupt had left (uvloop runs due timers after an iteration's callbacks).
        self.loop.call_soon(rearm)
        raise exc

    def spawn(self, job: Callable[[], Awaitable[None]], context: Context) -> _JobTask:
        task = self.loop.create_task(_run(job), context=context)
        self._jobs.add(task)
        task.add_done_callback(self._job_done)
        return _JobTask(self.loop, task)

    def _job_done(self, task: asyncio.Task[None]) -> None:
        self._jobs.discard(task)
        # A job's task ends with an exception only for an interrupt, which already left the loop
        # as the task stepped (the Job keeps it for its awaiters): retrieved here, so that it is
        # not reported a second time as "Task exception was never retrieved".
        if not task.cancelled():
            task.exception()

    def open_cancel_scope(self) -> AsyncioCancelScope:
        return AsyncioCancelScope(self.loop)

    def report(self, context: dict[str, Any]) -> None:
        self.loop.call_exception_handler(context)

    def job_cancelled(self) -> BaseException:
        return asyncio.CancelledError()


def _never_woken() -> None:
    raise RuntimeError("aiowheel: the Timer's alarm rang before the Timer started")


async def _run(job: Callable[[], Awaitable[None]]) -> None:
    await job()


def _cancel_soon(loop: asyncio.AbstractEventLoop, task: asyncio.Task[None]) -> None:
    # A task cancelled before its first step never runs its coroutine: job() would not be called,
    # so the Job could not see its cancellation and would stay "running" forever. call_soon
    # delivers the cancel after that first step, which was scheduled when the task was created.
    loop.call_soon(task.cancel)


class _JobTask:
    """What ``spawn`` returns: cancels the job's task, never before the task has started."""

    __slots__ = ("_loop", "_task")

    def __init__(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[None]) -> None:
        self._loop = loop
        self._task = task

    def cancel(self) -> None:
        _cancel_soon(self._loop, self._task)


class AsyncioCancelScope:
    """A timeout's cancel scope: the calling task from now until ``close``.

    The logic of ``asyncio.timeouts.Timeout``: ``cancel`` calls ``task.cancel()``; ``close``
    calls ``task.uncancel()`` if it did, and the cancellation is this scope's own only if no other
    cancel request arrived meanwhile (the task's ``cancelling()`` count is back to what it was on
    entry) -- so an outer timeout or a ``task.cancel()`` from outside is never swallowed.

    A cancel requested from the scope's own task (a deadline already past when the timeout is
    entered or rescheduled) is delivered with ``call_soon``, before the task next resumes, as
    ``asyncio.timeout`` does: cancelling the running task directly would leave the request
    pending after the scope if its code finished without awaiting.
    """

    __slots__ = ("_cancelling", "_delivered", "_loop", "_soon", "_task")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("Timeout should be used inside a task")
        self._loop = loop
        self._task = task
        # The task's pending cancel requests on entry; more on exit means another canceller.
        self._cancelling = task.cancelling()
        # The pending call_soon of a cancel requested from the task itself.
        self._soon: asyncio.Handle | None = None
        # True once task.cancel() was called for this scope (then close() must uncancel).
        self._delivered = False

    def cancel(self) -> None:
        if self._delivered or self._soon is not None:
            return
        if asyncio.current_task(self._loop) is self._task:
            self._soon = self._loop.call_soon(self._deliver)
        else:
            self._deliver()

    def cancel_soon(self) -> None:
        if not self._delivered and self._soon is None:
            self._soon = self._loop.call_soon(self._deliver)

    def withdraw(self) -> bool:
        if self._soon is not None:
            self._soon.cancel()
            self._soon = None
        return not self._delivered

    def delivered(self) -> bool:
        return self._delivered

    def _deliver(self) -> None:
        self._soon = None
        self._delivered = True
        self._task.cancel()

    def close(self, exc: BaseException | None) -> bool:
        if self._soon is not None:
            self._soon.cancel()
            self._soon = None
        return (
            self._delivered
            and self._task.uncancel() <= self._cancelling
            and isinstance(exc, asyncio.CancelledError)
        )
