"""Limits and interrupts: ``max_pending`` refuses a new key, never a tracked one or a re-filing,
and an interrupt from ``on_expire`` loses no key.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest
from idle_rule import TICK, Expired

from aiowheel import PendingLimitError, Timer
from aiowheel.idle import IdleTimeouts
from aiowheel.testing import VirtualTimeLoop

# Every test on both implementations (the `implementation` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("implementation")]


# -- limits and interrupts: no key is ever lost ---------------------------------------------------


async def test_re_filing_is_never_refused_by_max_pending(virtual_time: None) -> None:
    """Keys touched since their entry was filed are re-filed when it fires: bookkeeping, not
    new work, so max_pending never refuses it (it did, and the keys never expired)."""
    errors: list[dict[str, Any]] = []
    async with Timer(tick=TICK, max_pending=2, exception_handler=errors.append) as timer:
        expired = Expired(timer)
        idle = IdleTimeouts(timer, 1, expired)
        t0 = timer.time()
        idle.touch("a")
        idle.touch("b")  # one entry, at t0 + 1
        timer.call_at(t0 + 50, expired, "blocker")  # the Timer is at its limit
        await anyio.sleep(0.25)
        idle.touch("a")  # now due at t0 + 1.25: no wheel operation yet
        await anyio.sleep(0.25)
        idle.touch("b")  # now due at t0 + 1.5
        await anyio.sleep(2)  # at t0 + 1 both are re-filed: two entries, one over the limit
        assert expired.calls == [("a", t0 + 1.25), ("b", t0 + 1.5)]
        assert len(idle) == 0
    assert errors == []


async def test_a_new_key_at_max_pending_is_refused_at_touch(virtual_time: None) -> None:
    """A key that needs a new wheel entry is new work: refused loudly, at touch, and not
    tracked. A key whose deadline tick already has an entry costs the wheel nothing."""
    async with Timer(tick=TICK, max_pending=1) as timer:
        expired = Expired(timer)
        idle = IdleTimeouts(timer, 1, expired)
        t0 = timer.time()
        idle.touch("a")  # the one entry
        idle.touch("same tick")  # shares it
        await anyio.sleep(0.25)
        with pytest.raises(PendingLimitError):
            idle.touch("new")
        assert "new" not in idle and len(idle) == 2
        idle.touch("a")  # a known key is never refused
        await anyio.sleep(2)
        assert expired.calls == [("same tick", t0 + 1), ("a", t0 + 1.25)]


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_from_on_expire_loses_no_key(interrupt: type[BaseException]) -> None:
    """The interrupt leaves the loop (as from any Timer callback); the keys filed with the
    interrupted one still expire once the application carries on, the interrupted key is not
    expired twice."""
    loop = VirtualTimeLoop()
    expired: list[tuple[str, float]] = []

    def on_expire(key: str) -> None:
        expired.append((key, loop.time()))
        if key == "interrupting":
            raise interrupt

    async def start() -> tuple[Timer, IdleTimeouts[str]]:
        timer = Timer(tick=TICK)
        await timer.__aenter__()
        return timer, IdleTimeouts(timer, 1, on_expire)

    try:
        timer, idle = loop.run_until_complete(start())
        t0 = timer.time()
        for key in ("first", "interrupting", "second", "third"):
            idle.touch(key)
        with pytest.raises(interrupt):
            loop.run_until_complete(asyncio.sleep(5))
        loop.run_until_complete(asyncio.sleep(5))
        assert sorted(expired) == [
            ("first", t0 + 1),
            ("interrupting", t0 + 1),
            ("second", t0 + 1),
            ("third", t0 + 1),
        ]
        assert len(idle) == 0 and len(timer) == 0
        loop.run_until_complete(timer.aclose())
    finally:
        loop.close()
