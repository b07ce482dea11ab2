"""Types of the compiled part aiowheel/_ctimercore.pyx: the Timer core, the same API as
:mod:`aiowheel._timercore`."""

from collections.abc import Callable
from contextvars import Context
from typing import Any, SupportsFloat, SupportsIndex

from aiowheel._cwheel import Entry

__all__ = ["TimerCore", "TimerHandle"]

CPYTHON_FALLBACK: bool

class TimerHandle(Entry[Callable[..., object]]):
    _context: Context | None
    _timer: TimerCore | None
    _cancelled: bool

    def __init__(
        self,
        when: float,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        timer: TimerCore,
        context: Context | None,
    ) -> None: ...
    @property
    def _args(self) -> tuple[Any, ...]: ...
    def when(self) -> float: ...
    def cancel(self) -> None: ...
    def cancelled(self) -> bool: ...

class TimerCore:
    time: Callable[[], float]
    running: bool
    closed: bool

    def __init__(
        self, tick: SupportsFloat, wheel_size: SupportsIndex, max_pending: int | None
    ) -> None: ...
    @property
    def tick(self) -> float: ...
    @property
    def wheel_size(self) -> int: ...
    def start(
        self,
        clock: Callable[[], float],
        arm: Callable[[float | None], object],
        report: Callable[[object, tuple[Any, ...], BaseException, TimerHandle], object],
    ) -> None: ...
    def call_later(
        self,
        delay: SupportsFloat,
        callback: Callable[..., object],
        *args: Any,
        context: Context | None = None,
    ) -> TimerHandle: ...
    def call_at(
        self,
        when: SupportsFloat,
        callback: Callable[..., object],
        *args: Any,
        context: Context | None = None,
    ) -> TimerHandle: ...
    def refile_at(
        self,
        when: SupportsFloat,
        callback: Callable[..., object],
        *args: Any,
        context: Context | None = None,
    ) -> TimerHandle: ...
    def __len__(self) -> int: ...
    def _forget(self, handle: TimerHandle) -> None: ...
    def close(self) -> list[tuple[object, tuple[Any, ...]]]: ...
    def rearm(self) -> None: ...
    def counters(self) -> tuple[tuple[int, ...], float, float, int]: ...
    def pending_per_level(self) -> tuple[int, ...]: ...
    def run_due(self) -> None: ...
