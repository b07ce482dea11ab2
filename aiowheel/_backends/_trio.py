"""The trio adapter, used directly under ``trio.run`` or through ``anyio.run(backend="trio")``.

The driver sleeps in a trio cancel scope whose deadline is the armed time; re-arming only moves
that deadline (trio keeps deadlines in its own heap), so it costs no allocation. The driver and
the jobs run in a nursery the Timer owns, each in its own cancel scope. trio has no loop-wide
exception handler, so callback errors are logged on the ``aiowheel`` logger (or go to the Timer's
``exception_handler``). A timeout is a ``trio.CancelScope`` without a deadline of its own: the
wheel calls its ``cancel()`` (:class:`TrioCancelScope`).

The nursery is entered by the task that enters the Timer (its *owner*), and only that task can
exit it, and only while no cancel scope it entered later is open (a timeout block, say): trio's
cancel scopes nest. So ``stop`` from another task -- a sibling, a job closing its own Timer --
or from the owner inside such a scope cancels the driver and the jobs through their own scopes
and waits for them, leaving the (by then empty) nursery for the owner to exit when it leaves the
Timer's block. It never cancels the nursery's scope from there: that scope also covers the
owner's block, which closing the Timer must not cancel. A job closing its own Timer is neither
cancelled by that nor waited for, as on asyncio.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Coroutine
from contextvars import Context, copy_context
from functools import partial
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
        # The task that entered the nursery: the only one that may exit it.
        self._owner: trio.lowlevel.Task | None = None
        self._deadline = math.inf
        self._sleep_scope: trio.CancelScope | None = None
        # The cancel scope of every child task (the driver, the jobs) not finished yet, with the
        # task once it has started (None before: spawned, not started yet).
        self._children: dict[trio.CancelScope, trio.lowlevel.Task | None] = {}
        # Set when a child finishes, for a stop() from another task waiting for them.
        self._child_done: trio.Event | None = None

    async def start(
        self, driver: Callable[[], Coroutine[Any, Any, None]], wake: Callable[[], None]
    ) -> None:
        # trio has no loop callbacks: the driver runs each pass itself, when wait() returns.
        self._manager = trio.open_nursery()
        self._nursery = await self._manager.__aenter__()
        self._owner = trio.lowlevel.current_task()
        self._start_child(driver, copy_context(), "aiowheel driver")

    async def stop(self) -> None:
        nursery, manager = self._nursery, self._manager
        if nursery is None:
            return
        current = trio.lowlevel.current_task()
        if current is not self._owner or not _innermost(current, nursery.cancel_scope):
            # A job closing its own Timer is not cancelled by it, nor waited for: it runs on.
            children = self._children
            for scope, task in children.items():
                if task is not current:
                    scope.cancel()
            while any(task is not current for task in children.values()):
                self._child_done = trio.Event()
                await self._child_done.wait()
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
        return self._start_child(job, context, None)

    def _start_child(
        self, job: Callable[[], Awaitable[None]], context: Context, name: str | None
    ) -> trio.CancelScope:
        assert self._nursery is not None, "Timer is not running"
        scope = trio.CancelScope()
        children = self._children
        children[scope] = None

        async def run() -> None:
            children[scope] = trio.lowlevel.current_task()
            try:
                with scope:
                    await job()
            finally:
                del children[scope]
                if self._child_done is not None:
                    self._child_done.set()

        # trio copies the caller's context into the new task: spawn from inside the job's.
        context.run(partial(self._nursery.start_soon, run, name=name))
        return scope

    def open_cancel_scope(self) -> TrioCancelScope:
        return TrioCancelScope()

    def report(self, context: dict[str, Any]) -> None:
        exception = context.get("exception")
        exc_info = (type(exception), exception, exception.__traceback__) if exception else None
        logger.error("%s", context.get("message", "Unhandled error in aiowheel"), exc_info=exc_info)

    def job_cancelled(self) -> BaseException:
        return JobCancelled()


def _innermost(task: trio.lowlevel.Task, scope: trio.CancelScope) -> bool:
    """Whether ``scope`` is the innermost cancel scope ``task`` is in: the only one it can exit
    (trio refuses, and breaks the task's scopes, otherwise). trio has no public way to ask; if
    its internals ever change, this says yes, as every scope exit assumed before."""
    status = getattr(task, "_cancel_status", None)
    return getattr(status, "_scope", scope) is scope


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

    def cancel_soon(self) -> None:
        # A deadline already past: trio cancels the scope when its run loop next checks
        # deadlines, before the task's next checkpoint completes; until then it can be moved.
        self._scope.deadline = -math.inf

    def withdraw(self) -> bool:
        self._scope.deadline = math.inf
        return not self._scope.cancel_called

    def delivered(self) -> bool:
        # cancel_called cancels a scope whose deadline has passed when asked: asked with none.
        deadline = self._scope.deadline
        self._scope.deadline = math.inf
        called = self._scope.cancel_called
        if not called:
            self._scope.deadline = deadline
        return called

    def close(self, exc: BaseException | None) -> bool:
        if exc is None:
            self._scope.__exit__(None, None, None)
            return False
        return self._scope.__exit__(type(exc), exc, exc.__traceback__)
