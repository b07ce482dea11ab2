"""Calls from inside callbacks: cancel, schedule, touch, discard, close (:data:`REENTRANT`)."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.abc
import pytest
from faults_support import Scenario
from support import cancellation

from aiowheel import Timer
from aiowheel.idle import IdleTimeouts

# Every test on both implementations (the `implementation` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("implementation")]


# -- re-entrant calls from inside callbacks -------------------------------------------------------
#
# Each row: a scenario (it records what happens in `events`) and the events that must result.


async def _cancel_itself(timer: Timer, events: list[str]) -> None:
    handles: list[Any] = []

    def callback() -> None:
        handles[0].cancel()
        events.append(f"ran, cancelled={handles[0].cancelled()}")

    handles.append(timer.call_later(0.001, callback))
    await timer.sleep(0.003)


async def _cancel_later_in_batch(timer: Timer, events: list[str]) -> None:
    when = timer.time() + 0.001
    victims = []
    timer.call_at(when, lambda: [victim.cancel() for victim in victims])
    victims.append(timer.call_at(when, events.append, "same deadline"))
    victims.append(timer.schedule_at(when, events.append, "job"))
    timer.call_at(when, events.append, "survivor")
    await timer.sleep(0.003)
    events.append(f"job cancelled={victims[1].cancelled()}")


async def _schedule_from_callback(timer: Timer, events: list[str]) -> None:
    async def coroutine_job() -> None:
        events.append("coroutine job")

    def callback() -> None:
        events.append("callback")
        timer.call_later(-1, events.append, "due at once")
        timer.schedule(0, events.append, "plain job")
        timer.schedule(0, coroutine_job)

    when = timer.time() + 0.001
    timer.call_at(when, callback)
    timer.call_at(when, events.append, "same batch")
    await timer.sleep(0.005)


async def _touch_and_discard_from_callback(timer: Timer, events: list[str]) -> None:
    # 100 ms of margin: on uvloop, in real time, the callbacks must run before the keys' deadline,
    # even on a loaded machine.
    idle = IdleTimeouts(timer, 0.1, events.append)
    idle.touch("discarded")
    idle.touch("touched")
    timer.call_later(0.001, idle.discard, "discarded")
    timer.call_later(0.001, idle.touch, "new")
    await timer.sleep(0.2)


async def _close_idle_from_callback(timer: Timer, events: list[str]) -> None:
    idle = IdleTimeouts(timer, 0.1, events.append)  # 100 ms of margin, for uvloop's real time
    idle.touch("a")
    timer.call_later(0.001, idle.close)
    await timer.sleep(0.15)
    events.append(f"tracked={len(idle)}")


async def _on_expire_closes_its_idle(timer: Timer, events: list[str]) -> None:
    def on_expire(key: str) -> None:
        events.append(key)
        idle.close()

    idle = IdleTimeouts(timer, 0.002, on_expire)
    for key in ("first", "second"):
        idle.touch(key)
    await timer.sleep(0.005)


async def _on_expire_touches_and_discards(timer: Timer, events: list[str]) -> None:
    def on_expire(key: str) -> None:
        events.append(key)
        if key == "first" and events.count("first") == 1:
            # "second" is due too: too late to discard, it expires first (once, right here).
            assert idle.discard("second") is False
            idle.touch("first")  # a new period: expires once more

    idle = IdleTimeouts(timer, 0.002, on_expire)
    for key in ("first", "second"):
        idle.touch(key)
    await timer.sleep(0.008)


async def _reschedule_timeout_from_callback(timer: Timer, events: list[str]) -> None:
    async with timer.move_on_after(1) as scope:
        timer.call_later(0.001, lambda: scope.reschedule(timer.time() + 0.001))
        await anyio.sleep(0.5)
    events.append(f"caught={scope.cancelled_caught}, early={timer.time() < scope.when()}")  # type: ignore[operator]


async def _cancel_a_job_from_callback(timer: Timer, events: list[str]) -> None:
    now = timer.time()  # one reading: in real time two could be more than a millisecond apart
    job = timer.schedule_at(now + 0.002, events.append, "job ran")
    timer.call_at(now + 0.001, job.cancel)
    try:
        await job
    except BaseException as exc:
        events.append(type(exc).__name__)


# In real time (uvloop) two touches in a row may straddle a tick boundary and so not share a
# batch (or a wheel entry): the rows that need them to are run in virtual time only. Rows of
# later tables join the set where they are defined.
VIRTUAL_ONLY: set[Scenario] = {_on_expire_touches_and_discards}

REENTRANT: list[tuple[str, Scenario, list[str]]] = [
    ("a callback cancels itself", _cancel_itself, ["ran, cancelled=True"]),
    (
        "a callback cancels timers and a job later in its batch: they never run",
        _cancel_later_in_batch,
        ["survivor", "job cancelled=True"],
    ),
    (
        "a callback schedules: all run, in a later pass than its batch",
        _schedule_from_callback,
        ["callback", "same batch", "due at once", "plain job", "coroutine job"],
    ),
    (
        "a callback discards and touches idle keys",
        _touch_and_discard_from_callback,
        ["touched", "new"],
    ),
    ("a callback closes an IdleTimeouts", _close_idle_from_callback, ["tracked=0"]),
    ("on_expire closes its IdleTimeouts", _on_expire_closes_its_idle, ["first"]),
    (
        "on_expire discards a key of its batch (too late: it expires, once) and touches its own",
        _on_expire_touches_and_discards,
        ["first", "second", "first"],
    ),
    (
        "a callback moves a Timeout's deadline earlier",
        _reschedule_timeout_from_callback,
        ["caught=True, early=False"],
    ),
    ("a callback cancels a pending job", _cancel_a_job_from_callback, ["<cancellation>"]),
]


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [(scenario, expected) for _, scenario, expected in REENTRANT],
    ids=[name for name, _, _ in REENTRANT],
)
async def test_reentrant(backend_name: str, scenario: Scenario, expected: list[str]) -> None:
    if scenario in VIRTUAL_ONLY and backend_name == "uvloop":
        pytest.skip("needs virtual time: see VIRTUAL_ONLY")
    reported: list[dict[str, Any]] = []
    events: list[str] = []
    async with Timer(exception_handler=reported.append) as timer:
        await scenario(timer, events)
        await timer.sleep(0.001)  # the Timer still works
        assert len(timer) == 0
    expected = [
        cancellation(backend_name).__name__ if e == "<cancellation>" else e for e in expected
    ]
    assert events == expected
    assert reported == []
