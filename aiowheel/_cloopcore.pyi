"""Types of the compiled part aiowheel/_cloopcore.pyx: the wheel-backed event loop's timers, the
same API as :mod:`aiowheel._loopcore`."""

from collections.abc import Callable
from contextvars import Context
from typing import Any, SupportsFloat, SupportsIndex

from aiowheel._cwheel import Entry, HierarchicalWheel

__all__ = ["ClockWatch", "LoopCore", "LoopTimerHandle"]

CPYTHON_FALLBACK: bool

class LoopTimerHandle(Entry[Callable[..., object]]):
    def when(self) -> float: ...
    def cancel(self) -> None: ...
    def cancelled(self) -> bool: ...
    def get_context(self) -> Context: ...

class ClockWatch: ...

class LoopCore:
    loop: Any
    arm: Callable[[float], object]
    check_in_debug: Callable[[Callable[..., object]], object]
    call_on_base: Callable[..., Any]
    loop_time: Callable[[], float] | None
    wheel: HierarchicalWheel[Any]
    min_delay: float
    latest_deadline: float
    driver_when: float
    advanced_to: float
    wheel_reach: float
    catch_up_after: float
    near: list[tuple[float, int, LoopTimerHandle]]
    order: int
    wheel_timers: int
    near_timers: int
    cancelled: int
    fired: int
    driver_wakeups: int

    clock: Callable[[], float] | None
    closed: bool
    debug: bool
    far_delay: float

    def __init__(
        self,
        loop: Any,
        tick: SupportsFloat,
        wheel_size: SupportsIndex,
        min_delay: float,
        far_delay: float,
        *,
        arm: Callable[[float], object],
        check_in_debug: Callable[[Callable[..., object]], object],
        call_on_base: Callable[..., Any],
    ) -> None: ...
    def call_later(
        self,
        delay: float,
        callback: Callable[..., object],
        *args: Any,
        context: Context | None = None,
    ) -> Any: ...
    def call_at(
        self,
        when: float,
        callback: Callable[..., object],
        *args: Any,
        context: Context | None = None,
    ) -> Any: ...
    def next_due(self) -> float: ...
    def advance(self, now: float) -> list[LoopTimerHandle]: ...
    def pending(self) -> int: ...
    def close(self) -> None: ...
