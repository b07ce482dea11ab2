"""The trio adapter, used directly under ``trio.run`` or through ``anyio.run(backend="trio")``.

The driver sleeps in a trio cancel scope whose deadline is the armed time; re-arming only moves
that deadline (trio keeps deadlines in its own heap), so it costs no allocation. Jobs run in a
nursery the Timer owns, each in its own cancel scope. trio has no loop-wide exception handler,
so callback errors are logged on the ``aiowheel`` logger (or go to the Timer's
``exception_handler``). A timeout is a ``trio.CancelScope`` without a deadline of its own: the
wheel calls its ``cancel()`` (:class:`TrioCancelScope`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Coroutine
from contextvars import Context
from typing import Any

import trio

from aiowheel.exceptions import JobCancelled

__all__ = ["TrioBackend", "TrioCancelScope"]

logger = logging.getLogger("aiowheel")


class TrioBackend:
    name = "trio"
    cancelled_exc_class: type[BaseException] = trio.Cancelled

    def __init__(self) -> None:
        self.time = trio.current_time
        self._nursery: trio.Nursery | None = None
        self._manager: Any = None
        self._deadline = math.inf
        self._sleep_scope: trio.CancelScope | None = None

    async def start(self, driver: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._manager = trio.open_nursery()
        self._nursery = await self._manager.__aenter__()
        self._nursery.start_soon(driver, name="aiowheel driver")

    async def stop(self) -> None:
        nursery, manager = self._nursery, self._manager
        if nursery is None:
            return
        self._nursery = self._manager = None
        nursery.cancel_scope.cancel()
        try:
            await manager.__aexit__(None, None, None)
        except BaseExceptionGroup as group:
            # The nursery is the Timer's own, invisible to its user: one failure of the driver
            # or a job (an interrupt; nothing else escapes them) leaves the block as it is.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise

    def arm(self, when: float | None) -> None:
        self._deadline = math.inf if when is None else when
        scope = self._sleep_scope
        if scope is not None:
            scope.deadline = self._deadline

    async def wait(self) -> None:
        with trio.CancelScope(deadline=self._deadline) as scope:
            self._sleep_scope = scope
            try:
                await trio.sleep_forever()
            finally:
                self._sleep_scope = None

    def interrupt(self, exc: BaseException, rearm: Callable[[], None]) -> None:
        raise exc

    def spawn(self, job: Callable[[], Awaitable[None]], context: Context) -> trio.CancelScope:
        assert self._nursery is not None, "Timer is not running"
        scope = trio.CancelScope()

        async def run() -> None:
            with scope:
                await job()

        # trio copies the caller's context into the new task: spawn from inside the job's.
        context.run(self._nursery.start_soon, run)
        return scope

    def open_cancel_scope(self) -> TrioCancelScope:
        return TrioCancelScope()

    def report(self, context: dict[str, Any]) -> None:
        exception = context.get("exception")
        exc_info = (type(exception), exception, exception.__traceback__) if exception else None
        logger.error("%s", context.get("message", "Unhandled error in aiowheel"), exc_info=exc_info)

    def job_cancelled(self) -> BaseException:
        return JobCancelled()


class TrioCancelScope:
    """A timeout's cancel scope: a ``trio.CancelScope`` entered now, in the calling task.

    trio decides what it catches: its own cancellation only, and only when no enclosing scope is
    cancelled too (then the outermost cancelled scope catches it), as ``trio.move_on_after``.
    """

    __slots__ = ("_scope",)

    def __init__(self) -> None:
        self._scope = trio.CancelScope()
        self._scope.__enter__()

    def cancel(self) -> None:
        self._scope.cancel()

    def close(self, exc: BaseException | None) -> bool:
        if exc is None:
            self._scope.__exit__(None, None, None)
            return False
        return self._scope.__exit__(type(exc), exc, exc.__traceback__)
