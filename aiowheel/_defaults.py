"""The defaults of a wheel's shape, one home for each: the wheel twins, the Timer and the
wheel-backed event loops take them from here, so that none of them can default to another.

It imports nothing; both twins of the wheel read it (the compiled one too: it is not a pure
twin), and ``tests/test_twins.py`` compares the twins' defaults.
"""

from __future__ import annotations

from typing import Final

__all__ = ["DEFAULT_TICK", "DEFAULT_WHEEL_SIZE"]

DEFAULT_TICK: Final = 0.001
"""The width of a level-0 slot, in seconds, when none is given: a timer fires at most a
millisecond late."""

DEFAULT_WHEEL_SIZE: Final = 64
"""Slots per wheel level when none is given: with the default tick, levels of 64 ms, 4.1 s,
4.4 min, 4.7 h..."""
