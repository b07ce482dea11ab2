"""The twins' contract: what each core's module exports, and what the objects it makes do.

:data:`aiowheel._impl.TWINS` says where each twin lives; this module says what it is. Per row of
the table there is a Protocol of the module (``WheelTwin``, ``TimerTwin``, ``LoopTwin``,
``IdleTwin``: the names the row lists) and Protocols of what those names make. Both twins are
held to them twice:

* by mypy, which checks the pure module and the compiled part's stub (``_c*.pyi``) against the
  module's Protocol (:class:`aiowheel._impl.Implementation` types its fields with them, and
  ``_impl`` builds one of each implementation's modules under ``TYPE_CHECKING``): a method whose
  parameters drift in one twin fails the type check;
* at run time by ``tests/test_twins.py``, generated from the table: the same public names,
  docstrings and parameters in both twins.

The layers above hold their cores typed with these Protocols (:class:`aiowheel.Timer` its
``TimerCore``, :class:`aiowheel.IdleTimeouts` its ``IdleCore``, the wheel loops their
``LoopCore``), so they can use only what the contract says. The docstrings of the pure modules
say what each method does; here is only its shape. Where an argument is one of the same twin's
own objects (an entry, a handle), it is typed ``Any``: the two twins' classes are distinct types.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, SupportsFloat, SupportsIndex

if TYPE_CHECKING:
    from aiowheel._host import TimerHost

__all__ = [
    "Entry",
    "Handle",
    "IdleCore",
    "IdleTwin",
    "LoopCore",
    "LoopHandle",
    "LoopTwin",
    "TimerCore",
    "TimerTwin",
    "Wheel",
    "WheelTwin",
]

# -- wheel -----------------------------------------------------------------------------------


class Entry(Protocol):
    """An entry of a wheel: its deadline and payload, pending while a wheel holds it."""

    deadline: float
    payload: Any

    @property
    def pending(self) -> bool: ...


class Wheel(Protocol):
    """A hierarchical timing wheel (:class:`aiowheel.HierarchicalWheel`)."""

    @property
    def tick(self) -> float: ...
    @property
    def wheel_size(self) -> int: ...
    @property
    def now(self) -> float: ...
    @property
    def levels(self) -> int: ...
    def __len__(self) -> int: ...
    def pending_per_level(self) -> tuple[int, ...]: ...
    def level_start(self, level: int) -> float: ...
    def add(self, deadline: SupportsFloat, payload: Any) -> Any: ...
    def add_entry(self, entry: Any) -> Any: ...
    def remove(self, entry: Any) -> bool: ...
    def remove_entry(self, entry: Any) -> bool | None: ...
    def next_deadline(self) -> float | None: ...
    def advance(self, now: SupportsFloat) -> list[Any]: ...
    def advance_entries(self, now: SupportsFloat) -> list[Any]: ...
    def remove_all(self) -> list[Any]: ...
    def locate(self, entry: Any) -> tuple[int, int] | None: ...
    def bucket_expiration(self, level: int, slot: int) -> float | None: ...


class WheelClass(Protocol):
    def __call__(
        self, tick: SupportsFloat = ..., wheel_size: SupportsIndex = ..., start: SupportsFloat = ...
    ) -> Wheel: ...


class WheelTwin(Protocol):
    """The ``wheel`` row: :mod:`aiowheel._wheel` and ``aiowheel._cwheel``."""

    @property
    def Entry(self) -> Callable[[float, Any], Entry]: ...  # the name it exports
    @property
    def HierarchicalWheel(self) -> WheelClass: ...
    def ceil_ticks(self, t: float, tick: float) -> int: ...
    def floor_ticks(self, t: float, tick: float) -> int: ...


# -- the Timer's core ------------------------------------------------------------------------


class Handle(Entry, Protocol):
    """A callback filed on a Timer core (the class the row exports as ``TimerHandle``, public as
    :class:`aiowheel.TimerHandle`): asyncio's ``TimerHandle`` API, and a wheel entry."""

    def when(self) -> float: ...
    def cancel(self) -> None: ...
    def cancelled(self) -> bool: ...


class TimerCore(Protocol):
    """The wheel, the handles and the dispatch of one Timer (:mod:`aiowheel._timercore`)."""

    @property
    def tick(self) -> float: ...
    @property
    def wheel_size(self) -> int: ...
    @property
    def time(self) -> Callable[[], float]: ...
    @property
    def running(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    def __len__(self) -> int: ...
    def start(
        self,
        clock: Callable[[], float],
        arm: Callable[[float | None], object],
        report: Callable[[object, tuple[Any, ...], BaseException, Any], object],
    ) -> None: ...
    def call_later(
        self,
        delay: SupportsFloat,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> Handle: ...
    def call_at(
        self,
        when: SupportsFloat,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> Handle: ...
    def refile_at(
        self,
        when: SupportsFloat,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> Handle: ...
    def close(self) -> list[tuple[object, tuple[Any, ...]]]: ...
    def rearm(self) -> None: ...
    def counters(self) -> tuple[tuple[int, ...], float, float, int]: ...
    def pending_per_level(self) -> tuple[int, ...]: ...
    def run_due(self) -> None: ...


class TimerCoreClass(Protocol):
    def __call__(
        self, tick: SupportsFloat, wheel_size: SupportsIndex, max_pending: int | None
    ) -> TimerCore: ...


class TimerTwin(Protocol):
    """The ``timer`` row: :mod:`aiowheel._timercore` and ``aiowheel._ctimercore``."""

    @property
    def TimerCore(self) -> TimerCoreClass: ...  # the name it exports
    @property
    def TimerHandle(self) -> Callable[..., Handle]: ...


# -- the wheel loop's core -------------------------------------------------------------------


class LoopHandle(Protocol):
    """A wheel-backed loop's timer handle: ``asyncio.TimerHandle``'s API."""

    def when(self) -> float: ...
    def cancel(self) -> None: ...
    def cancelled(self) -> bool: ...
    def get_context(self) -> contextvars.Context | None: ...


class LoopCore(Protocol):
    """The wheel and near queue of one wheel-backed loop (:mod:`aiowheel._loopcore`): what the
    loop reads and calls of it."""

    debug: bool

    @property
    def wheel(self) -> Any: ...
    @property
    def min_delay(self) -> float: ...
    @property
    def driver_when(self) -> float: ...
    @property
    def wheel_timers(self) -> int: ...
    @property
    def near_timers(self) -> int: ...
    @property
    def cancelled(self) -> int: ...
    @property
    def fired(self) -> int: ...
    @property
    def driver_wakeups(self) -> int: ...
    def call_later(
        self,
        delay: float,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle: ...
    def call_at(
        self,
        when: float,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle: ...
    def next_due(self) -> float: ...
    def advance(self, now: float) -> list[Any]: ...
    def pending(self) -> int: ...
    def close(self) -> None: ...


class LoopCoreClass(Protocol):
    def __call__(
        self,
        loop: Any,
        tick: SupportsFloat,
        wheel_size: SupportsIndex,
        min_delay: float,
        far_delay: float,
        *,
        arm: Callable[[float], object],
        check_in_debug: Callable[[Callable[..., object]], object],
        call_on_base: Callable[..., asyncio.TimerHandle],
    ) -> LoopCore: ...


class LoopTwin(Protocol):
    """The ``loop`` row: :mod:`aiowheel._loopcore` and ``aiowheel._cloopcore``."""

    @property
    def LoopCore(self) -> LoopCoreClass: ...  # the name it exports
    @property
    def LoopTimerHandle(self) -> Callable[..., LoopHandle]: ...


# -- idle expiry's core ----------------------------------------------------------------------


class IdleCore(Protocol):
    """Idle expiry's keys and their lazily re-filed deadlines (:mod:`aiowheel._idlecore`)."""

    @property
    def timeout(self) -> float: ...
    @property
    def closed(self) -> bool: ...
    def touch(self, key: Any) -> None: ...
    def discard(self, key: Any) -> bool: ...
    def __contains__(self, key: object) -> bool: ...
    def __len__(self) -> int: ...
    def deadline(self, key: Any) -> float | None: ...
    def close(self) -> None: ...


class IdleCoreClass(Protocol):
    def __call__(
        self, timer: TimerHost, timeout: float, on_expire: Callable[[Any], object]
    ) -> IdleCore: ...


class IdleTwin(Protocol):
    """The ``idle`` row: :mod:`aiowheel._idlecore` and ``aiowheel._cidlecore``."""

    @property
    def IdleCore(self) -> IdleCoreClass: ...  # the name it exports
