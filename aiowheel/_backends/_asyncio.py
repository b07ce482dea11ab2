"""The asyncio adapter: any ``asyncio`` event loop, including uvloop.

The driver sleeps on a future that one loop timer (``loop.call_at``) resolves; moving the wake-up
time cancels that loop timer and arms a new one, so re-arming costs one loop timer no matter how
many wheel timers are added. Jobs are plain tasks, errors go to ``loop.call_exception_handler``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from contextvars import Context
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiowheel.timer import Timer

__all__ = ["AsyncioBackend"]


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class AsyncioBackend:
    name = "asyncio"
    cancelled_exc_class: type[BaseException] = asyncio.CancelledError

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.time = loop.time
        self._driver: asyncio.Task[None] | None = None
        # The loop timer that ends the driver's wait, and the future the driver waits on.
        self._alarm: asyncio.TimerHandle | None = None
        self._waiter: asyncio.Future[None] | None = None
        # Set when the alarm went off while the driver was not waiting (before its first wait).
        self._rang = False
        self._jobs: set[asyncio.Task[None]] = set()

    async def start(self, driver: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._driver = self.loop.create_task(driver(), name="aiowheel driver")

    async def stop(self) -> None:
        self.arm(None)
        tasks = [*self._jobs, *([self._driver] if self._driver is not None else [])]
        for task in tasks:
            task.cancel()
        # Not gather(): a job may swallow its cancellation, and stop() must still wait for all.
        for task in tasks:
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                if not task.done():  # we were cancelled ourselves while waiting
                    raise
            except Exception:  # a job's own error: reported to its awaiters, not to us
                pass

    def arm(self, when: float | None) -> None:
        alarm = self._alarm
        if alarm is not None:
            alarm.cancel()
        self._alarm = None if when is None else self.loop.call_at(when, self._ring)

    def _ring(self) -> None:
        self._alarm = None
        waiter = self._waiter
        if waiter is None:
            self._rang = True
        else:
            _resolve(waiter)

    async def wait(self) -> None:
        if self._rang:
            self._rang = False
            return
        self._waiter = waiter = self.loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def spawn(self, job: Callable[[], Awaitable[None]], context: Context) -> asyncio.Task[None]:
        task = self.loop.create_task(_run(job), context=context)
        self._jobs.add(task)
        task.add_done_callback(self._jobs.discard)
        return task

    async def sleep_until(self, timer: Timer, when: float) -> None:
        future: asyncio.Future[None] = self.loop.create_future()
        handle = timer.call_at(when, _resolve, future)
        try:
            await future
        finally:
            handle.cancel()

    def report(self, context: dict[str, Any]) -> None:
        self.loop.call_exception_handler(context)

    def job_cancelled(self) -> BaseException:
        return asyncio.CancelledError()


async def _run(job: Callable[[], Awaitable[None]]) -> None:
    await job()
