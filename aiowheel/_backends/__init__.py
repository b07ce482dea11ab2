"""Backend adapters: everything the Timer needs from an event loop, behind one small interface.

A :class:`Backend` knows how to read the clock, how the driver sleeps until an armed time (and
how to move that time), how to spawn a coroutine job, how to sleep a task until a wheel timer
fires, and where a callback's error goes. Everything else in aiowheel is written once against
this interface, as anyio does with its ``_backends`` package. One module per backend:

* :mod:`aiowheel._backends._asyncio` -- asyncio and uvloop (any ``asyncio`` event loop);
* :mod:`aiowheel._backends._trio` -- trio, directly or through ``anyio.run(backend="trio")``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from contextvars import Context
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from aiowheel.timer import Timer

__all__ = ["Backend", "Cancellable", "current_backend"]


class Cancellable(Protocol):
    """What ``Backend.spawn`` returns: a handle to cancel the running job."""

    def cancel(self) -> Any: ...


class Backend(Protocol):
    """The narrow interface between a :class:`~aiowheel.Timer` and its event loop."""

    #: "asyncio" or "trio".
    name: str
    #: The exception class the backend uses to cancel a task.
    cancelled_exc_class: type[BaseException]

    def time(self) -> float:
        """The loop's clock, in seconds (``loop.time()`` / ``trio.current_time()``)."""
        ...

    async def start(self, driver: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Start the driver coroutine (and whatever owns the jobs)."""
        ...

    async def stop(self) -> None:
        """Cancel the driver and every running job, and wait until they have finished."""
        ...

    def arm(self, when: float | None) -> None:
        """Make the driver's ``wait`` return once the clock reaches ``when`` (None: never)."""
        ...

    async def wait(self) -> None:
        """The driver's sleep: return once the armed time has been reached (maybe early)."""
        ...

    def spawn(self, job: Callable[[], Awaitable[None]], context: Context) -> Cancellable:
        """Run ``job()`` as a new task in ``context``; the result cancels it."""
        ...

    async def sleep_until(self, timer: Timer, when: float) -> None:
        """Suspend the calling task until ``timer`` fires a timer at ``when``."""
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
