"""Types of the compiled part aiowheel/spark/_ckeystate.pyx: the Spark stream's idle-expiry rule,
the same API as :mod:`aiowheel.spark._keystate`."""

from collections.abc import Iterable, Sequence
from typing import final

from aiowheel.spark._keystate import Event, KeyExpiry, KeyState, StoredKey, Visit

__all__ = ["IdleRule", "wake_ms"]

CPYTHON_FALLBACK: bool

def wake_ms(t: float) -> int: ...

@final
class IdleRule:
    def __init__(self, timeouts: Sequence[float], tick: float, delay: float) -> None: ...
    @property
    def timeouts(self) -> tuple[float, ...]: ...
    @property
    def tick(self) -> float: ...
    @property
    def delay(self) -> float: ...
    def visit(self, state: KeyState | None, arrived: Iterable[Event], watermark: int) -> Visit: ...
    def visit_stored(
        self, stored: StoredKey | None, arrived: list[Event], watermark: int
    ) -> tuple[StoredKey | None, list[KeyExpiry]]: ...
