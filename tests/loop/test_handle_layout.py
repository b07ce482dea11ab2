"""What a pending loop timer holds, and how asyncio's fields read from a handle that keeps them
packed (the compiled handle, see ``_cloopcore.pxd``): ``when()`` is the number given, ``_args``
a tuple, ``_loop`` the loop while pending; the rarely used fields live in an object of their
own, released with the handle. Side by side with asyncio's own loop where it is the reference,
on both implementations and both base loops.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import sys
import tracemalloc
import weakref
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from support import make_loop, needs_uvloop

import aiowheel._impl

pytestmark = pytest.mark.usefixtures("implementation")

BASES = ["asyncio", pytest.param("uvloop", marks=needs_uvloop)]


class WeakFraction(Fraction):
    """A Fraction that can be referenced weakly (Fraction has __slots__ without __weakref__)."""


def noop(*args: object) -> None:
    pass


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("offset", [3600.0, 3600, Fraction(7201, 2), Decimal("3600.25")], ids=repr)
def test_when_is_the_number_given_as_on_asyncio(base: str, offset: Any) -> None:
    reference = asyncio.new_event_loop()
    loop = make_loop(base)
    try:
        for each in (reference, loop):
            when = int(each.time()) + offset
            handle = each.call_at(when, noop)
            assert handle.when() == handle._when == when
            assert type(handle.when()) is type(when)
            handle.cancel()
            assert handle.when() == when  # kept once cancelled
    finally:
        reference.close()
        loop.close()


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("args", [(), (1,), (1, "two"), ((),)], ids=repr)
def test_args_read_as_asyncio_s_tuple_and_none_once_cancelled(base: str, args: tuple) -> None:
    reference = asyncio.new_event_loop()
    loop = make_loop(base)
    try:
        for each in (reference, loop):
            handle = each.call_later(3600.0, noop, *args)
            assert handle._args == args and type(handle._args) is tuple
            assert handle._callback is noop
            handle.cancel()
            assert handle._args is None and handle._callback is None
    finally:
        reference.close()
        loop.close()


@pytest.mark.parametrize("base", BASES)
def test_loop_while_pending_and_none_once_run_or_cancelled(base: str) -> None:
    loop = make_loop(base)
    try:
        cancelled = loop.call_later(3600.0, noop)
        fired = loop.call_later(0.001, noop)
        assert cancelled._loop is loop and fired._loop is loop
        cancelled.cancel()
        loop.run_until_complete(asyncio.sleep(0.01))
        assert cancelled._loop is None and fired._loop is None
        assert not fired.cancelled() and cancelled.cancelled() and cancelled._cancelled
    finally:
        loop.close()


@pytest.mark.parametrize("base", BASES)
def test_a_when_kept_apart_from_the_deadline_goes_with_its_handle(base: str) -> None:
    loop = make_loop(base)
    try:
        when = WeakFraction(int(loop.time()) + 3600)
        alive = weakref.ref(when)
        handle = loop.call_at(when, noop, 1)
        assert handle.when() is when and handle._args == (1,)
        del when
        gc.collect()
        assert alive() is not None  # the handle holds it
        handle.cancel()
        assert alive() is not None  # when() still answers
        del handle
        gc.collect()
        assert alive() is None
    finally:
        loop.close()


@pytest.mark.parametrize("base", BASES)
def test_debug_fields_read_as_asyncio_s(base: str) -> None:
    reference = asyncio.new_event_loop()
    loop = make_loop(base)
    try:
        for each in (reference, loop):
            each.set_debug(True)
            handle = each.call_later(3600.0, noop, 1)
            assert isinstance(handle._source_traceback, list) and handle._repr is None
            assert handle._args == (1,)
            handle.cancel()
            assert handle._repr is not None and "cancelled" in handle._repr
            assert repr(handle) == handle._repr
            each.set_debug(False)
            plain = each.call_later(3600.0, noop)
            assert plain._source_traceback is None and plain._repr is None
            plain.cancel()
            assert plain._repr is None
    finally:
        reference.close()
        loop.close()


# -- the compiled handle's bytes -------------------------------------------------------------------


@pytest.mark.implementation("compiled")
def test_the_compiled_handles_layout() -> None:
    """The words of each handle, as _cloopcore.pxd and _ctimercore.pxd list them (64-bit):
    the loop's 12, the Timer's 11 (the object header and the entry's 6 included)."""
    compiled = aiowheel._impl.compiled_implementation()
    assert compiled is not None
    if sys.maxsize != 2**63 - 1:
        pytest.skip("the layout is written for 64-bit CPython")
    assert compiled.wheel.Entry.__basicsize__ == 8 * 8
    assert compiled.loop.LoopTimerHandle.__basicsize__ == 12 * 8
    assert compiled.timer.TimerHandle.__basicsize__ == 11 * 8


@pytest.mark.implementation("compiled")
@pytest.mark.parametrize("base", BASES)
def test_a_pending_compiled_loop_timer_costs_at_most_its_budget_of_heap(base: str) -> None:
    """A bound in bytes, not a speed: tracemalloc counts exactly what the Python heap holds.
    ``call_later(3600 + e, f, i)`` with a distinct int ``i`` each costs the handle (96 bytes:
    no GC header, no float deadline, no tuple for the one argument, the shared context
    snapshot), the int (28) and the handle's slot in a bucket list (8 plus the list's
    over-allocation): 0.47x asyncio's 288. The CPython fallback build keeps the GC header and
    shares no snapshot: held to those 16 and a Context per timer more."""
    fallback = aiowheel._impl.CPYTHON_FALLBACK
    extra = 16 + sys.getsizeof(contextvars.copy_context()) if fallback else 0
    loop = make_loop(base)
    n = 20_000
    handles: list[Any] = [None] * n
    try:
        loop.call_later(3600.0, noop).cancel()  # the wheel's levels, created once
        gc.collect()
        tracemalloc.start()
        try:
            base_bytes = tracemalloc.get_traced_memory()[0]
            for i in range(n):
                handles[i] = loop.call_later(3600.0 + i * 1e-4, noop, 10**9 + i)
            per_timer = (tracemalloc.get_traced_memory()[0] - base_bytes) / n
        finally:
            tracemalloc.stop()
        assert 96 + 28 + 8 + extra <= per_timer <= 144 + extra, per_timer
    finally:
        for handle in handles:
            handle.cancel()
        loop.close()
