"""Backend adapters: everything the Timer needs from an event loop, behind one small interface.

A :class:`Backend` knows how to read the clock, how the driver sleeps until an armed time (and
how to move that time), how to spawn a coroutine job, how to cancel part of a task (a
:class:`CancelScope`, for timeouts), and where a callback's error goes. Everything else in
aiowheel is written once against this interface, as anyio does with its ``_backends`` package.
One module per backend:

* :mod:`aiowheel._backends._asyncio` -- asyncio and uvloop (any ``asyncio`` event loop);
* :mod:`aiowheel._backends._trio` -- trio, directly or through ``anyio.run(backend="trio")``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from contextvars import Context
from typing import Any, Protocol

__all__ = ["Backend", "CancelScope", "Cancellable", "current_backend"]


class Cancellable(Protocol):
    """What ``Backend.spawn`` returns: a handle to cancel the running job."""

    def cancel(self) -> Any: ...


class CancelScope(Protocol):
    """The code between entering and closing the scope, in the task that entered it: what a
    timeout cancels. Opened by ``Backend.open_cancel_scope``.

    Cancellation follows the backend's own rules: on asyncio a ``task.cancel()`` counted with
    ``uncancel()`` exactly as ``asyncio.timeout`` does, on trio a ``trio.CancelScope``.
    """

    def cancel(self) -> None:
        """Cancel the scope's code: it gets the backend's cancellation at its next await (or
        checkpoint). May be called from any task of the loop, including the scope's own."""
        ...

    def cancel_soon(self) -> None:
        """From the scope's own task: cancel it as the loop next runs, before the task resumes
        from its next await, unless :meth:`withdraw` comes first (``asyncio.timeout``'s
        ``call_soon`` of its expiry for a deadline already past)."""
        ...

    def withdraw(self) -> bool:
        """Take back a :meth:`cancel_soon` not delivered yet: True if taken back (or none was
        asked), False if it was delivered."""
        ...

    def delivered(self) -> bool:
        """Whether a :meth:`cancel_soon` has been delivered."""
        ...

    def close(self, exc: BaseException | None) -> bool:
        """Leave the scope, from its task, with the exception leaving it (None if none).

        True iff ``exc`` is this scope's own cancellation, caught here: the caller then raises
        TimeoutError or swallows it. False for anything else, including a cancellation that
        came from outside (it must propagate).
        """
        ...


class Backend(Protocol):
    """The narrow interface between a :class:`~aiowheel.Timer` and its event loop."""

    #: "asyncio" or "trio".
    name: str
    #: The exception class the backend uses to cancel a task.
    cancelled_exc_class: type[BaseException]

    def time(self) -> float:
        """The loop's clock, in seconds (``loop.time()`` / ``trio.current_time()``)."""
        ...

    async def start(
        self, driver: Callable[[], Coroutine[Any, Any, None]], wake: Callable[[], None]
    ) -> None:
        """Start the driver coroutine (and whatever owns the jobs).

        ``wake`` is the Timer's pass (advance the wheel, run what is due, re-arm). A backend
        with loop callbacks (asyncio) runs it from the callback of the armed time and the
        driver only sleeps, until ``stop``; one without (trio) lets ``wait`` return and the
        driver runs it.
        """
        ...

    async def stop(self) -> None:
        """Cancel the driver and every running job, and wait until they have finished."""
        ...

    def arm(self, when: float | None) -> None:
        """Make the driver's ``wait`` return once the clock reaches ``when`` (None: never)."""
        ...

    async def wait(self) -> None:
        """The driver's sleep: return once the armed time has been reached (maybe early) -- or
        never, on a backend that runs the passes itself (see ``start``)."""
        ...

    def interrupt(self, exc: BaseException, rearm: Callable[[], None]) -> None:
        """Let ``exc`` -- a KeyboardInterrupt or SystemExit a callback raised in the driver --
        leave the event loop once, the way the loop's own callbacks' interrupts do.

        asyncio: raised here, out of the loop callback that runs the pass, so it leaves
        ``run_forever()`` at once; ``rearm()`` (re-arming the driver) is queued with
        ``call_soon`` and runs when the application runs the loop again.
        trio: raised here, ending the driver and, through the Timer's nursery, the block that
        entered the Timer (which closes it).
        """
        ...

    def spawn(self, job: Callable[[], Awaitable[None]], context: Context) -> Cancellable:
        """Run ``job()`` as a new task in ``context``; the result cancels it."""
        ...

    def open_cancel_scope(self) -> CancelScope:
        """Enter a :class:`CancelScope` in the calling task. RuntimeError outside a task."""
        ...

    def report(self, context: dict[str, Any]) -> None:
        """Report a callback's error, where this backend reports errors by default."""
        ...

    def job_cancelled(self) -> BaseException:
        """The exception awaiting a cancelled job raises."""
        ...


def current_backend() -> Backend:
    """The adapter for the async library running in the calling task."""
    try:
        import sniffio
    except ImportError:  # anyio without sniffio: asyncio is then the only option
        library = "asyncio"
    else:
        try:
            library = sniffio.current_async_library()
        except sniffio.AsyncLibraryNotFoundError:
            library = "none"
    if library == "asyncio":
        from aiowheel._backends._asyncio import AsyncioBackend

        return AsyncioBackend(asyncio.get_running_loop())
    if library == "trio":
        from aiowheel._backends._trio import TrioBackend

        return TrioBackend()
    raise RuntimeError(
        f"aiowheel needs a running asyncio or trio event loop (found {library!r}); "
        "enter the Timer inside a coroutine run by asyncio.run(), anyio.run() or trio.run()"
    )
