"""asyncio's timer contract on the wheel loop: ``call_later`` and ``call_at`` on time and in
order, handles, cancellation, and what is refused, on the selector loop and uvloop.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import math
import random
import re
import weakref
from typing import Any

import pytest
from loop_support import TICK, Callback, run_for
from support import START, VirtualLoop, make_loop, run_until
from twins import is_loop_handle

from aiowheel._impl import CPYTHON_FALLBACK
from aiowheel.loop import FAR_DELAY, WheelLoop

# Every test on both implementations of the loop core, in one pytest run: a loop made without
# implementation= holds the one the fixture names (see conftest.py).
pytestmark = pytest.mark.usefixtures("implementation")


# -- the timer contract ---------------------------------------------------------------------------


def test_never_early_and_in_deadline_then_scheduling_order(loop: WheelLoop) -> None:
    rng = random.Random(4)
    ran: list[tuple[float, int]] = []
    handles: list[asyncio.TimerHandle] = []
    base = loop.time()
    for i in range(300):
        if i % 3:
            handle = loop.call_later(
                rng.uniform(0.005, 0.04), lambda i=i: ran.append((loop.time(), i))
            )
        else:
            # A handful of shared deadlines, each scheduled many times over.
            when = base + 0.03 + (i % 5) * 0.0037
            handle = loop.call_at(when, lambda i=i: ran.append((loop.time(), i)))
        handles.append(handle)
    # In real time (uvloop) a stalled machine could make a shared deadline too near for the
    # wheel; the contract below is the wheel's, so it is checked on the wheel's timers.
    on_wheel = {i for i, handle in enumerate(handles) if is_loop_handle(handle)}
    assert len(on_wheel) >= 200  # the call_later ones at least: 5 ms >= min_delay
    run_until(loop, lambda: len(ran) == len(handles))

    assert len(ran) == len(handles)
    for ran_at, i in ran:
        if i in on_wheel:
            assert ran_at >= handles[i].when()
    order = [i for _, i in ran if i in on_wheel]
    assert order == sorted(order, key=lambda i: (handles[i].when(), i))
    assert loop.wheel_stats().pending == 0


def test_lateness_is_at_most_one_tick_in_virtual_time() -> None:
    loop = VirtualLoop()
    rng = random.Random(7)
    lateness: list[float] = []
    for _ in range(500):
        # From 4 ms to 10 minutes: every level from 0 to 3.
        handle = loop.call_later(10 ** rng.uniform(-2.4, 2.8), lambda: None)
        handle._callback = lambda h=handle: lateness.append(loop.time() - h.when())
    run_for(loop, 700)
    loop.close()
    assert len(lateness) == 500
    assert min(lateness) >= 0
    assert max(lateness) <= TICK * (1 + 1e-9)


def test_equal_deadlines_keep_scheduling_order_across_levels() -> None:
    loop = VirtualLoop()
    deadline = START + 10.0
    order: list[str] = []
    loop.call_at(deadline, order.append, "first")
    assert loop.wheel.levels == 3  # 10 000 ticks ahead: on level 2, the only timer
    # The same deadline, scheduled later on, when it is on level 1 and then on level 0.
    loop.call_at(deadline - 3.0, lambda: loop.call_at(deadline, order.append, "second"))
    loop.call_at(deadline - 0.01, lambda: loop.call_at(deadline, order.append, "third"))
    loop.call_at(deadline + 0.01, loop.stop)
    loop.run_forever()
    loop.close()
    assert order == ["first", "second", "third"]


def test_an_earlier_callback_in_the_batch_can_cancel_a_later_one(loop: WheelLoop) -> None:
    ran: list[int] = []
    when = loop.time() + 0.01
    handles: list[asyncio.TimerHandle] = []

    def first() -> None:
        ran.append(1)
        handles[1].cancel()

    handles.append(loop.call_at(when, first))
    handles.append(loop.call_at(when, ran.append, 2))
    handles.append(loop.call_at(when, ran.append, 3))
    run_until(loop, lambda: 3 in ran)
    assert ran == [1, 3]
    assert handles[1].cancelled()
    # It was already off the wheel, handed over to run: not counted as a wheel cancellation.
    assert loop.wheel_stats().cancelled == 0


def test_timers_scheduled_from_a_callback_run_in_a_later_pass(loop: WheelLoop) -> None:
    order: list[str] = []
    when = loop.time() + 0.01

    def first() -> None:
        order.append("first")
        loop.call_later(0, order.append, "zero")
        loop.call_later(-1, order.append, "negative")
        loop.call_soon(order.append, "soon")
        loop.call_later(loop.min_delay, order.append, "wheel")

    loop.call_at(when, first)
    loop.call_at(when, order.append, "second")
    run_until(loop, lambda: "wheel" in order)
    assert order[:2] == ["first", "second"]
    assert set(order[2:5]) == {"zero", "negative", "soon"}
    assert order[5:] == ["wheel"]


def test_zero_delay_on_the_wheel_runs_in_a_later_pass(kind: str) -> None:
    loop = make_loop(kind, min_delay=0)
    order: list[str] = []
    when = loop.time() + 0.01

    def first() -> None:
        order.append("first")
        handle = loop.call_later(0, order.append, "zero")
        assert is_loop_handle(handle)  # min_delay=0: even this is on the wheel

    loop.call_at(when, first)
    loop.call_at(when, order.append, "second")
    run_until(loop, lambda: "zero" in order)
    loop.close()
    assert order == ["first", "second", "zero"]


def test_stop_from_a_wheel_callback_lets_its_batch_finish(loop: WheelLoop) -> None:
    ran: list[str] = []
    when = loop.time() + 0.01

    def stopper() -> None:
        ran.append("stopper")
        loop.stop()
        # A timer scheduled in a pass runs in a later one, even if it is due at once: in real
        # time (uvloop) a stalled machine could find a timer filed beforehand due in this pass.
        loop.call_later(loop.min_delay, ran.append, "later")

    loop.call_at(when, stopper)
    loop.call_at(when, ran.append, "same batch")
    loop.run_forever()
    assert ran == ["stopper", "same batch"]
    assert loop.wheel_stats().pending == 1
    run_until(loop, lambda: "later" in ran)
    assert ran == ["stopper", "same batch", "later"]


def test_run_until_complete_with_a_future_set_by_a_wheel_timer(loop: WheelLoop) -> None:
    future = loop.create_future()
    loop.call_later(0.01, future.set_result, 42)
    assert loop.run_until_complete(future) == 42
    # Again, on the same loop, after it stopped.
    future = loop.create_future()
    loop.call_at(loop.time() + 0.01, future.set_result, "again")
    assert loop.run_until_complete(future) == "again"


def test_handles_behave_as_asyncio_timer_handles(loop: WheelLoop) -> None:
    def tick() -> None:
        pass

    when = loop.time() + 1.0
    handle = loop.call_at(when, tick)
    later = loop.call_at(when + 1.0, tick)
    assert is_loop_handle(handle)
    # On both cores it has asyncio's API but is not an asyncio.TimerHandle, as uvloop's
    # handles are not (docs/loop.md's table says so).
    assert not isinstance(handle, asyncio.TimerHandle)
    assert handle.when() == when
    assert handle < later and handle <= later and later > handle and later >= handle
    assert handle != later
    assert handle == loop.call_at(when, tick)  # asyncio's equality: same time and callback
    assert hash(handle) == hash(when)
    # The very repr asyncio gives the same timer, under the handle's own name, which its class
    # has on both cores: what reprs and tracebacks say is what aiowheel.loop exports.
    assert type(handle).__name__ == "LoopTimerHandle"
    assert repr(handle) == repr(asyncio.TimerHandle(when, tick, (), loop)).replace(
        "<TimerHandle", "<LoopTimerHandle", 1
    )
    assert re.fullmatch(
        r"<LoopTimerHandle when=\S+ .*tick\(\) at .*test_timer_contract\.py:\d+>", repr(handle)
    )
    assert not handle.cancelled()
    handle.cancel()
    handle.cancel()  # idempotent
    assert handle.cancelled()
    assert repr(handle).startswith("<LoopTimerHandle cancelled when=")
    assert loop.wheel_stats().cancelled == 1
    later.cancel()


def test_a_wheel_callbacks_error_goes_to_the_exception_handler(loop: WheelLoop) -> None:
    # As asyncio's Handle._run: the message names the callback, the context carries the
    # exception and the handle, and the other timers still run.
    reports: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reports.append(context))
    ran: list[str] = []
    error = ValueError("boom")

    def fail() -> None:
        raise error

    handle = loop.call_later(0.01, fail)
    loop.call_later(0.01, ran.append, "after")
    assert is_loop_handle(handle)
    run_until(loop, lambda: "after" in ran)
    (report,) = reports
    assert report["exception"] is error
    assert report["handle"] is handle
    reference = asyncio.TimerHandle(handle.when(), fail, (), loop)
    assert report["message"] == f"Exception in callback {reference._repr_info()[2]}"
    assert ran == ["after"]


def test_wheel_callbacks_run_in_their_context(loop: WheelLoop) -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen: list[str] = []

    def read_and_set() -> None:
        seen.append(var.get())
        var.set("set by the callback")  # in the handle's context only

    given = contextvars.Context()
    given.run(var.set, "given")
    explicit = loop.call_later(0.01, read_and_set, context=given)
    var.set("current")
    implicit = loop.call_later(0.01, read_and_set)
    var.set("changed after scheduling")

    # get_context() is asyncio's from Python 3.12 on; the compiled handle has it on every version.
    def context_of(handle: asyncio.TimerHandle) -> contextvars.Context:
        get = getattr(handle, "get_context", None)
        return get() if get is not None else handle._context  # type: ignore[attr-defined,no-any-return]

    assert context_of(explicit) is given
    assert context_of(implicit).get(var) == "current"  # a copy made when scheduled
    run_until(loop, lambda: len(seen) == 2)
    assert seen == ["given", "current"]
    assert var.get() == "changed after scheduling"
    assert given.get(var) == "set by the callback"


def test_wheel_handles_compare_with_asyncios(loop: WheelLoop) -> None:
    def tick() -> None:
        pass

    when = loop.time() + 1.0
    handle = loop.call_at(when, tick)
    assert handle < asyncio.TimerHandle(when + 1, tick, (), loop)
    assert handle > asyncio.TimerHandle(when - 1, tick, (), loop)
    assert handle == asyncio.TimerHandle(when, tick, (), loop)
    assert handle != asyncio.TimerHandle(when, print, (), loop)
    assert handle != "not a handle"
    with pytest.raises(TypeError):
        handle < 1.0  # noqa: B015  # unordered, as asyncio's handles are
    handle.cancel()


def test_a_cancelled_wheel_handle_keeps_its_repr_in_debug_mode(loop: WheelLoop) -> None:
    def tick() -> None:
        pass

    loop.set_debug(True)
    handle = loop.call_later(1.0, tick)
    handle.cancel()
    # asyncio's Handle.cancel: in debug mode the repr is kept, callback and all.
    assert re.fullmatch(
        r"<LoopTimerHandle cancelled when=\S+ .*tick\(\) at .*created at .*>", repr(handle)
    )
    loop.set_debug(False)


def test_cancel_frees_the_timer_at_once(loop: WheelLoop) -> None:
    gc.disable()
    try:
        callback = Callback()
        callback_ref = weakref.ref(callback)
        handle = loop.call_later(10, callback)
        handle_ref = weakref.ref(handle)
        del callback
        assert loop.wheel_stats().pending == 1
        handle.cancel()
        assert callback_ref() is None
        assert loop.wheel_stats().pending == 0
        del handle
        assert handle_ref() is None  # nothing on the loop holds the cancelled timer
    finally:
        gc.enable()


def test_asyncio_keeps_cancelled_handles_for_contrast() -> None:
    """What the wheel loop does differently: asyncio's heap holds a cancelled handle."""
    loop = asyncio.SelectorEventLoop()
    gc.disable()
    try:
        handle = loop.call_later(10, Callback())
        handle_ref = weakref.ref(handle)
        handle.cancel()
        del handle
        assert handle_ref() is not None
    finally:
        gc.enable()
        loop.close()


def test_far_and_nan_timers_stay_on_the_base_loop_and_short_ones_skip_the_wheel(
    kind: str,
) -> None:
    loop = make_loop(kind, tick=TICK)
    try:
        assert loop.min_delay == 4 * TICK
        # Below min_delay: the loop's own handles, in its queue of imminent timers.
        near = [loop.call_later(0.003, Callback()), loop.call_at(loop.time() + 0.001, Callback())]
        on_base = [
            loop.call_later(math.inf, Callback()),
            loop.call_later(FAR_DELAY * 2, Callback()),
        ]
        on_wheel = [loop.call_later(0.004, Callback()), loop.call_at(loop.time() + 60, Callback())]
        if kind == "virtual":  # uvloop itself refuses NaN
            on_base.append(loop.call_later(math.nan, Callback()))
        assert not any(is_loop_handle(handle) for handle in on_base)
        assert all(is_loop_handle(handle) for handle in near + on_wheel)
        stats = loop.wheel_stats()
        assert (stats.base_timers, stats.wheel_timers, stats.pending) == (
            len(near) + len(on_base),
            2,
            4,
        )
        assert len(loop.wheel) == 2
        on_base += near
        for handle in on_base + on_wheel:
            handle.cancel()
        assert loop.wheel_stats().pending == 0
    finally:
        loop.close()


def test_min_delay_sets_the_routing(kind: str) -> None:
    loop = make_loop(kind, min_delay=0.05)
    try:
        loop.call_later(0.049, Callback())
        assert len(loop.wheel) == 0
        loop.call_later(0.05, Callback())
        assert len(loop.wheel) == 1
    finally:
        loop.close()


def test_short_timers_keep_the_base_loops_precision() -> None:
    loop = VirtualLoop()
    ran_at: list[float] = []
    handle = loop.call_later(0.0003, lambda: ran_at.append(loop.time()))
    run_for(loop, 0.01)
    loop.close()
    assert ran_at == [handle.when()]  # the heap's exact time, not rounded up to a tick


def test_a_pending_timer_adds_at_most_one_object_for_the_collector(
    loop: WheelLoop, implementation: str
) -> None:
    """Issue 30: the pure handle is its own wheel entry, keeps one argument without a tuple and
    shares its context snapshot (the compiled handle is not tracked at all); the pure core made
    four tracked objects per timer before. The CPython fallback build's compiled handle is
    tracked and gets a context copy of its own (no shared snapshots there): two."""
    per_timer = 2 if implementation == "compiled" and CPYTHON_FALLBACK else 1
    loop.call_later(3600, print).cancel()  # the wheel's levels for an hour, made beforehand
    handles: list[asyncio.TimerHandle | None] = [None] * 200
    gc.collect()
    before = len(gc.get_objects())
    for i in range(200):
        handles[i] = loop.call_later(3600 + i / 1000, print, i + 10_000)
    assert len(gc.get_objects()) - before <= per_timer * 200 + 10  # + the snapshot, a heap item
    for handle in handles:
        assert handle is not None
        handle.cancel()


def test_timers_equal_as_asyncio_compares_them_keep_their_own_place(loop: WheelLoop) -> None:
    seen: list[str] = []
    when = loop.time() + 0.05
    first = loop.call_at(when, seen.append, "second")
    second = loop.call_at(when, seen.append, "second")
    assert first == second  # asyncio's equality: the same when, callback and arguments
    first.cancel()
    run_until(loop, lambda: bool(seen))
    assert seen == ["second"]
    assert first.cancelled()
    assert not second.cancelled()


def test_timers_of_contexts_with_equal_values_see_their_own(loop: WheelLoop) -> None:
    """Timers made in the same variables share a context snapshot: the same values means the
    same objects, never equal ones (no __eq__ runs, and each sees what its caller set)."""

    class Touchy:
        def __eq__(self, other: object) -> bool:
            raise AssertionError("a context value was compared")

        __hash__ = object.__hash__

    var: contextvars.ContextVar[object] = contextvars.ContextVar("var")
    seen: list[object] = []
    values = [{}, {}, Touchy(), Touchy()]
    for value in values:
        context = contextvars.copy_context()
        context.run(var.set, value)
        context.run(loop.call_later, 0.01, lambda: seen.append(var.get()))
    run_until(loop, lambda: len(seen) == len(values))
    assert [id(value) for value in seen] == [id(value) for value in values]
