"""Types of the compiled part aiowheel/_ctimercore.pyx: the Timer core, the same API as
:mod:`aiowheel._timercore`."""

from collections.abc import Callable
from contextvars import Context
from typing import Any, SupportsFloat, SupportsIndex, TypeVar

from aiowheel._cwheel import Entry, HierarchicalWheel

__all__ = ["TimerCore", "TimerHandle"]

CPYTHON_FALLBACK: bool

H = TypeVar("H", bound=TimerHandle)

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
    _max_pending: int | None
    _wheel: HierarchicalWheel[Any]
    _time: Callable[[], float]
    _backend: Any
    _running: bool
    _closed: bool
    _armed_at: float
    _fired: int
    _cancelled_count: int
    _early: int
    _max_lateness: float
    _lateness_sum: float

    def __init__(
        self, tick: SupportsFloat, wheel_size: SupportsIndex, max_pending: int | None
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
    def _refile_at(
        self,
        when: SupportsFloat,
        callback: Callable[..., object],
        *args: Any,
        context: Context | None = None,
    ) -> TimerHandle: ...
    def __len__(self) -> int: ...
    def _add(self, handle: H) -> H: ...
    def _check_running(self) -> None: ...
    def _forget(self, handle: TimerHandle) -> None: ...
    def _cancel_all(self) -> list[TimerHandle]: ...
    @staticmethod
    def _release(handle: TimerHandle) -> None: ...
    def _lateness_counts(self) -> tuple[int, ...]: ...
    def _run_due(self) -> None: ...
