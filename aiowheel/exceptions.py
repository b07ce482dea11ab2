"""Exceptions aiowheel raises beyond the built-in ones (TypeError, ValueError, RuntimeError)."""

from __future__ import annotations

__all__ = ["JobCancelled", "PendingLimitError"]


class PendingLimitError(RuntimeError):
    """Raised when scheduling would exceed a Timer's ``max_pending``.

    The guard against a flood of clients exhausting memory (Netty's ``maxPendingTimeouts``).
    """


class JobCancelled(BaseException):
    """Raised on trio by awaiting a :class:`~aiowheel.Job` that was cancelled.

    On asyncio a cancelled job raises :class:`asyncio.CancelledError`, as a cancelled future does.
    trio has no cancellation exception that can be raised outside a cancel scope, so it gets this
    one; like ``CancelledError`` it is a ``BaseException`` so ``except Exception`` won't eat it.
    """
