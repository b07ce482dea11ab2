"""What the wheel loop's tests share: running a main on a wheel loop, a uvloop-based class, a
callable that records its calls, running a loop for a while.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from aiowheel.loop import new_event_loop, new_uvloop_event_loop

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is in the dev extra
    uvloop = None


T = TypeVar("T")
TICK = 0.001
REPO = Path(__file__).resolve().parents[2]


def run(main: Coroutine[Any, Any, T], *, uvloop: bool, debug: bool | None = None) -> T:
    """Run ``main`` on a new wheel-backed loop, the documented way: asyncio's Runner."""
    factory = new_uvloop_event_loop if uvloop else new_event_loop
    with asyncio.Runner(debug=debug, loop_factory=factory) as runner:
        return runner.run(main)


def uvloop_class() -> type:
    """The uvloop base class, or a class no loop is an instance of."""
    return uvloop.Loop if uvloop is not None else type("NoUVLoop", (), {})


class Callback:
    """A callable that can be weakly referenced, to see when a loop lets go of it."""

    def __call__(self) -> None:
        pass


def run_for(loop: asyncio.AbstractEventLoop, seconds: float) -> None:
    """Run ``loop`` until ``seconds`` after now (a timer on the loop stops it)."""
    loop.run_until_complete(asyncio.sleep(seconds))
