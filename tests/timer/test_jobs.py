"""Jobs -- ``schedule`` and ``schedule_at`` of plain and coroutine functions, their results and
errors through ``await``, cancelling them before and while they run, and their awaiters.
"""

from __future__ import annotations

import gc
from collections.abc import Awaitable
from typing import Any

import anyio
import pytest
from support import HANG, TICK, Boom, assert_on_time, boom, cancellation, is_virtual, noop

from aiowheel import Timer
from aiowheel._impl import CPYTHON_FALLBACK

# Every test on both implementations (the `implementation` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("implementation")]


# -- schedule: jobs ----------------------------------------------------------------------------


async def test_schedule_a_plain_function(backend_name: str) -> None:
    async with Timer(tick=TICK) as timer:
        start = timer.time()
        job = timer.schedule(0.01, lambda a, b: (a + b, timer.time()), 2, 3)
        assert not job.done()
        with pytest.raises(RuntimeError, match="Job is not done yet"):
            job.result()
        result, ran_at = await job
    assert result == 5
    assert job.done()
    assert not job.cancelled()
    assert job.result() == (5, ran_at)
    assert_on_time(start + 0.01, ran_at, exact=is_virtual(backend_name))


async def test_schedule_a_coroutine_function(backend_name: str) -> None:
    async def fetch(key: str) -> tuple[str, float]:
        started = timer.time()
        await anyio.sleep(0.005)
        return key.upper(), started

    async with Timer(tick=TICK) as timer:
        start = timer.time()
        job = timer.schedule(0.01, fetch, "key")
        result, started = await job
    assert result == "KEY"
    assert job.result() == ("KEY", started)
    assert_on_time(start + 0.01, started, exact=is_virtual(backend_name))


async def test_await_schedule_pattern_in_virtual_time(virtual_time: None) -> None:
    async def fetch() -> str:
        return "fetched"

    async with Timer(tick=TICK) as timer:
        start = timer.time()
        result = await timer.schedule(5, fetch)
        assert result == "fetched"
        assert start + 5 <= timer.time() < start + 5 + TICK
        result = await timer.schedule_at(start + 65.5, str.upper, "at")
        assert result == "AT"
        assert start + 65.5 <= timer.time() < start + 65.5 + TICK


@pytest.mark.parametrize("kind", ["plain", "coroutine"])
async def test_a_job_error_propagates_through_await(kind: str) -> None:
    async def async_boom(*args: Any) -> None:
        await anyio.sleep(0)
        raise Boom(*args)

    async with Timer() as timer:
        job = timer.schedule(0.001, boom if kind == "plain" else async_boom, kind)
        with pytest.raises(Boom, match=kind):
            await job
        assert job.done()
        assert not job.cancelled()
        with pytest.raises(Boom):
            job.result()


async def test_cancel_a_job_before_it_fires(backend_name: str) -> None:
    called: list[str] = []
    async with Timer() as timer:
        job = timer.schedule(0.002, called.append, "ran")
        job.cancel()
        assert job.cancelled()
        assert job.done()
        assert len(timer) == 0
        with pytest.raises(cancellation(backend_name)):
            await job
        with pytest.raises(cancellation(backend_name)):
            job.result()
        job.cancel()  # again: no-op
        await timer.sleep(0.003)
        stats = timer.stats()
    assert called == []
    assert stats.cancelled == 1


async def test_cancel_a_running_coroutine_job_cancels_its_task(backend_name: str) -> None:
    started = anyio.Event()
    finalised: list[bool] = []

    async def work() -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            finalised.append(True)

    async with Timer() as timer:
        job = timer.schedule(0.001, work)
        await started.wait()
        assert not job.done()
        job.cancel()
        with pytest.raises(cancellation(backend_name)), anyio.fail_after(HANG):
            await job  # fail_after: a job left running would hang here
        assert finalised == [True]
        assert job.cancelled()
        assert job.done()


async def test_cancelling_the_awaiting_task_cancels_a_pending_job() -> None:
    async with Timer() as timer:
        job = timer.schedule(10, noop)
        with anyio.move_on_after(0.005):
            await job
        assert job.cancelled()
        assert job.done()
        assert len(timer) == 0


async def test_cancelling_the_awaiting_task_cancels_a_running_job(backend_name: str) -> None:
    started = anyio.Event()
    finalised: list[bool] = []

    async def work() -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            finalised.append(True)

    async with Timer() as timer:
        job = timer.schedule(0, work)
        await started.wait()
        with anyio.move_on_after(0.005):
            await job
        with pytest.raises(cancellation(backend_name)), anyio.fail_after(HANG):
            await job  # once its task has ended; fail_after: a job left running would hang
        assert finalised == [True]
        assert job.cancelled()


async def test_a_coroutine_job_that_swallows_its_cancellation_is_not_cancelled() -> None:
    """cancelled() is True from cancel() while the task winds down, and False once the coroutine
    returned instead of letting the cancellation through, as asyncio's Task reports it."""
    started = anyio.Event()
    job: Any = None
    seen: list[bool] = []

    async def swallow() -> str:
        started.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            seen.append(job.cancelled())
            job.cancel()  # asked again while it winds down: still cancelling
            seen.append(job.cancelled())
        return "swallowed"

    async with Timer() as timer:
        job = timer.schedule(0.001, swallow)
        await started.wait()
        job.cancel()
        assert job.cancelled()
        assert not job.done()
        with anyio.fail_after(HANG):
            assert await job == "swallowed"
        assert seen == [True, True]
        assert not job.cancelled()
        assert job.done()


async def test_cancel_a_coroutine_job_spawned_but_not_started_yet(backend_name: str) -> None:
    # A later callback of the batch that spawned the job's task cancels it before the task's
    # first step: the job must still end cancelled (on asyncio a task cancelled that early never
    # runs its coroutine at all).
    async def work() -> None:
        await anyio.sleep_forever()

    async with Timer() as timer:
        when = timer.time() + 0.001
        job = timer.schedule_at(when, work)
        timer.call_at(when, job.cancel)
        with pytest.raises(cancellation(backend_name)), anyio.fail_after(HANG):
            await job  # fail_after: a job stuck "running" would hang here
        assert job.cancelled()
        assert job.done()


async def test_closing_right_after_a_coroutine_job_was_spawned_ends_it(backend_name: str) -> None:
    async def work() -> None:
        await anyio.sleep_forever()

    async with Timer() as timer:
        when = timer.time() + 0.001
        first = timer.schedule_at(when, noop)
        job = timer.schedule_at(when, work)
        # Resumes in the pass that spawns the job's task, before that task's first step.
        await first
    with pytest.raises(cancellation(backend_name)), anyio.fail_after(HANG):
        await job
    assert job.cancelled()


class NotAnException(BaseException):
    pass


@pytest.mark.parametrize("kind", ["plain", "coroutine"])
async def test_a_job_raising_a_base_exception_finishes_with_it(kind: str) -> None:
    """Not only Exception subclasses: awaiters must not hang on any error but SystemExit and
    KeyboardInterrupt (which propagate, as from a loop callback)."""

    def plain() -> None:
        raise NotAnException("plain")

    async def coroutine() -> None:
        await anyio.sleep(0)
        raise NotAnException("coroutine")

    async with Timer() as timer:
        job = timer.schedule(0.001, plain if kind == "plain" else coroutine)
        with pytest.raises(NotAnException, match=kind):
            await job
        assert job.done()


async def test_a_failed_job_nobody_awaited_is_reported_when_it_dies() -> None:
    reported: list[dict[str, Any]] = []
    async with Timer(exception_handler=reported.append) as timer:
        timer.schedule(0.001, boom, "unseen")
        await timer.sleep(0.01)
        gc.collect()
        assert [context["message"] for context in reported] == ["Job exception was never retrieved"]
        assert isinstance(reported[0]["exception"], Boom)
        seen = timer.schedule(0.001, boom, "seen")
        with pytest.raises(Boom):
            await seen
        del seen
        gc.collect()
        assert len(reported) == 1


async def test_a_plain_job_cannot_cancel_itself_while_it_runs() -> None:
    async with Timer() as timer:

        def cancel_self() -> str:
            job.cancel()
            return "ran"

        job = timer.schedule(0.001, cancel_self)
        assert await job == "ran"
        assert not job.cancelled()


async def test_cancel_after_a_job_finished_is_a_no_op() -> None:
    async with Timer() as timer:
        job = timer.schedule(0, int, "7")
        assert await job == 7
        job.cancel()
        assert not job.cancelled()
        assert job.result() == 7
        assert await job == 7  # awaiting a done job again


async def test_many_awaiters_of_one_job() -> None:
    results: list[int] = []

    async def wait_for(job: Awaitable[int]) -> None:
        results.append(await job)

    async with Timer() as timer:
        job = timer.schedule(0.002, int, "9")
        async with anyio.create_task_group() as group:
            for _ in range(3):
                group.start_soon(wait_for, job)
    assert results == [9, 9, 9]


async def test_a_pending_job_adds_at_most_two_objects_for_the_collector(
    implementation: str,
) -> None:
    """Issue 30: a job and its wheel handle; the handle keeps the job without a tuple and shares
    its context snapshot (the compiled handle is not tracked at all). The pure core made four
    tracked objects per job before. The CPython fallback build's compiled handle is tracked and
    gets a context copy of its own (no shared snapshots there): three."""
    per_job = 3 if implementation == "compiled" and CPYTHON_FALLBACK else 2
    async with Timer() as timer:
        timer.schedule(3600, noop).cancel()  # the wheel's levels for an hour, made beforehand
        jobs: list[Any] = [None] * 200
        gc.collect()
        before = len(gc.get_objects())
        for i in range(200):
            jobs[i] = timer.schedule(3600 + i / 1000, noop)
        assert len(gc.get_objects()) - before <= per_job * 200 + 10  # + the snapshot, a heap item
        for job in jobs:
            job.cancel()


async def test_a_pending_job_holds_few_references_for_the_collector() -> None:
    """Issue 30: the collector visits every field of a pending job, again at each collection
    that walks it; the cancel request and whether result() was called are states of the job's
    one state field, not fields of their own (ten fields before, eight now)."""
    async with Timer() as timer:
        job = timer.schedule(3600, noop)
        # The fields and the class (the collector visits a heap type's instances' type).
        assert len(gc.get_referents(job)) <= 8 + 1
        job.cancel()
