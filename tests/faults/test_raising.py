"""A callback, a job, an ``on_expire`` raising Exception, BaseException or CancelledError
(:data:`RAISING`).
"""

from __future__ import annotations

import asyncio
import gc
from dataclasses import dataclass

import pytest
from faults_support import raising_on_expire
from support import Boom, Fatal, cancellation, raise_, raise_soon

from aiowheel import Timer
from aiowheel.idle import IdleTimeouts

# Every test on both implementations (the `implementation` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("implementation")]


# -- raising: Exception, BaseException, CancelledError --------------------------------------------

RAISED: dict[str, type[BaseException]] = {
    "Exception": Boom,
    "BaseException": Fatal,
    "CancelledError": asyncio.CancelledError,
}

# Outcomes. In every row the Timer carries on: a timer due after the fault still runs.
REPORTED = "reported to the exception handler, the Timer carries on"
RAISED_BY_AWAIT = "raised by `await job`, not reported"
JOB_CANCELLED = "the job is cancelled: `await job` raises the backend's cancellation"
SILENT = "nothing reported: the task ends cancelled, as an asyncio task does"


@dataclass(frozen=True)
class Raising:
    entry: str
    raised: str
    expected: str
    # Where trio differs: asyncio.CancelledError is just another BaseException there.
    on_trio: str | None = None

    def __str__(self) -> str:
        return f"{self.entry}-{self.raised}"

    def outcome(self, backend_name: str) -> str:
        return self.on_trio if backend_name == "trio" and self.on_trio else self.expected


RAISING = [
    Raising("callback", "Exception", REPORTED),
    Raising("callback", "BaseException", REPORTED),
    Raising("callback", "CancelledError", REPORTED),  # as asyncio's Handle._run
    Raising("plain job", "Exception", RAISED_BY_AWAIT),
    Raising("plain job", "BaseException", RAISED_BY_AWAIT),
    Raising("plain job", "CancelledError", RAISED_BY_AWAIT),
    Raising("coroutine job", "Exception", RAISED_BY_AWAIT),
    Raising("coroutine job", "BaseException", RAISED_BY_AWAIT),
    Raising("coroutine job", "CancelledError", JOB_CANCELLED, on_trio=RAISED_BY_AWAIT),
    Raising("plain on_expire", "Exception", REPORTED),
    Raising("plain on_expire", "BaseException", REPORTED),
    Raising("plain on_expire", "CancelledError", REPORTED),
    Raising("coroutine on_expire", "Exception", REPORTED),
    Raising("coroutine on_expire", "BaseException", REPORTED),
    Raising("coroutine on_expire", "CancelledError", SILENT, on_trio=REPORTED),
]


@pytest.mark.parametrize("row", RAISING, ids=str)
async def test_raising(backend_name: str, row: Raising) -> None:
    exc_type = RAISED[row.raised]
    reported: list[type[BaseException]] = []
    outcome: BaseException | None = None
    expired: list[str] = []
    job = None
    async with Timer(exception_handler=lambda c: reported.append(type(c["exception"]))) as timer:
        after: list[str] = []
        if row.entry == "callback":
            timer.call_later(0.001, raise_, exc_type)
        elif row.entry.endswith("job"):
            job = timer.schedule(
                0.001, raise_ if row.entry == "plain job" else raise_soon, exc_type
            )
            try:
                await job
            except BaseException as exc:
                outcome = exc
        else:
            on_expire = raising_on_expire(row.entry, expired, "raising", exc_type)
            idle = IdleTimeouts(timer, 0.001, on_expire)
            for key in ("first", "raising", "last"):
                idle.touch(key)
        timer.call_later(0.003, after.append, "later")
        await timer.sleep(0.005)
        assert after == ["later"]  # the Timer carried on
        assert len(timer) == 0  # nothing left behind
    gc.collect()  # a job failure nobody retrieved would be reported now
    if row.entry.endswith("on_expire"):
        assert sorted(expired) == ["first", "last", "raising"]  # no key lost
    if reported == [exc_type] and outcome is None:
        observed = REPORTED
    elif not reported and isinstance(outcome, cancellation(backend_name)) and job.cancelled():  # type: ignore[union-attr]
        observed = JOB_CANCELLED
    elif not reported and type(outcome) is exc_type:
        observed = RAISED_BY_AWAIT
    elif not reported and outcome is None:
        observed = SILENT
    else:
        observed = f"reported {reported}, outcome {outcome!r}"
    assert observed == row.outcome(backend_name)
