"""Types of the compiled part aiowheel/_cidlecore.pyx: idle expiry's touch and filing, the same
API as :mod:`aiowheel._idlecore`."""

from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from aiowheel._ctimercore import TimerCore

__all__ = ["IdleCore"]

CPYTHON_FALLBACK: bool

K = TypeVar("K", bound=Hashable)

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
