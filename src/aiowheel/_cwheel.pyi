"""Types of the extension aiowheel/_cwheel.pyx: the compiled wheel (the same API as
:mod:`aiowheel.wheel`), Timer core (the same API as :mod:`aiowheel._timercore`), loop core (as
:mod:`aiowheel._loopcore`) and idle core (as :mod:`aiowheel._idlecore`)."""

from collections.abc import Callable, Hashable
from contextvars import Context
from typing import Any, Generic, SupportsFloat, SupportsIndex, TypeVar

__all__ = [
    "Entry",
    "HierarchicalWheel",
    "IdleCore",
    "LoopCore",
    "LoopTimerHandle",
    "TimerCore",
    "TimerHandle",
    "ceil_ticks",
    "floor_ticks",
    "loop_call_at",
    "loop_call_later",
]

P = TypeVar("P")
E = TypeVar("E", bound=Entry[Any])
H = TypeVar("H", bound=TimerHandle)
K = TypeVar("K", bound=Hashable)

def ceil_ticks(t: float, tick: float) -> int: ...
def floor_ticks(t: float, tick: float) -> int: ...

class Entry(Generic[P]):
    deadline: float
    payload: P | None

    def __init__(self, deadline: float, payload: P) -> None: ...
    @property
    def pending(self) -> bool: ...

class HierarchicalWheel(Generic[P]):
    @property
    def tick(self) -> float: ...
    @property
    def wheel_size(self) -> int: ...
    def __init__(
        self,
        tick: SupportsFloat = 0.001,
        wheel_size: SupportsIndex = 64,
        start: SupportsFloat = 0.0,
    ) -> None: ...
    def __len__(self) -> int: ...
    @property
    def now(self) -> float: ...
    @property
    def levels(self) -> int: ...
    def pending_per_level(self) -> tuple[int, ...]: ...
    def level_start(self, level: int) -> float: ...
    def add(self, deadline: SupportsFloat, payload: P) -> Entry[P]: ...
    def add_entry(self, entry: E) -> E: ...
    def remove(self, entry: Entry[P]) -> bool: ...
    def remove_entry(self, entry: Entry[P]) -> bool | None: ...
    def next_deadline(self) -> float | None: ...
    def advance(self, now: SupportsFloat) -> list[P]: ...
    def advance_entries(self, now: SupportsFloat) -> list[Entry[P]]: ...
    def remove_all(self) -> list[Entry[P]]: ...
    def locate(self, entry: Entry[P]) -> tuple[int, int] | None: ...
    def bucket_expiration(self, level: int, slot: int) -> float | None: ...
    def _check(self) -> None: ...

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

class LoopTimerHandle(Entry[Callable[..., object]]):
    _order: int
    def when(self) -> float: ...
    def cancel(self) -> None: ...
    def cancelled(self) -> bool: ...
    def get_context(self) -> Context: ...

class LoopCore:
    loop: Any
    wheel: HierarchicalWheel[Any]
    min_delay: float
    latest_deadline: float
    driver_when: float
    advanced_to: float
    catch_up_after: float
    near: list[tuple[float, int, LoopTimerHandle]]
    order: int
    wheel_timers: int
    near_timers: int
    cancelled: int
    fired: int
    driver_wakeups: int

    clock: Callable[[], float]
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
    ) -> None: ...
    def schedule(
        self,
        now: float,
        when: float,
        deadline: float,
        on_wheel: bool,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: Context | None,
    ) -> LoopTimerHandle: ...
    def cancel(self, handle: LoopTimerHandle) -> None: ...
    def next_due(self) -> float: ...
    def advance(self, now: float) -> list[LoopTimerHandle]: ...
    def pending(self) -> int: ...
    def close(self) -> None: ...

def loop_call_later(
    loop: Any,
    delay: float,
    callback: Callable[..., object],
    *args: Any,
    context: Context | None = None,
) -> Any: ...
def loop_call_at(
    loop: Any,
    when: float,
    callback: Callable[..., object],
    *args: Any,
    context: Context | None = None,
) -> Any: ...

class IdleCore(Generic[K]):
    _timer: TimerCore
    _timeout: float
    _len: int
    _closed: bool

    def __init__(self, timer: Any, timeout: float, on_expire: Callable[[K], object]) -> None: ...
    @property
    def timeout(self) -> float: ...
    @property
    def closed(self) -> bool: ...
    def touch(self, key: K) -> None: ...
    def discard(self, key: K) -> bool: ...
    def __contains__(self, key: object) -> bool: ...
    def __len__(self) -> int: ...
    def deadline(self, key: K) -> float | None: ...
    def close(self) -> None: ...
