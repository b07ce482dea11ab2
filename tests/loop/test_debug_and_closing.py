"""Debug mode, errors from callbacks, and closing a wheel loop."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import warnings
import weakref
from collections.abc import Callable

import pytest
from loop_support import Callback, run, run_for
from support import VirtualLoop, make_loop, needs_uvloop
from twins import is_loop_handle

from aiowheel.loop import new_uvloop_event_loop

# Every test on both implementations of the loop core, in one pytest run: a loop made without
# implementation= holds the one the fixture names (see conftest.py).
pytestmark = pytest.mark.usefixtures("implementation")


# -- debug mode, errors, closing ------------------------------------------------------------------


def test_slow_wheel_callbacks_are_logged_in_debug_mode(caplog: pytest.LogCaptureFixture) -> None:
    loop = VirtualLoop()
    loop.set_debug(True)
    loop.slow_callback_duration = 0.05

    def slow() -> None:
        loop.advance(0.1)

    handle = loop.call_later(0.01, slow)
    assert handle._source_traceback[-1].filename == __file__  # type: ignore[attr-defined]
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        run_for(loop, 0.02)
    loop.close()
    # The timer's own message (asyncio also logs the driver's pass that ran it).
    (message,) = [m for m in caplog.messages if "slow()" in m]
    assert (
        message.startswith("Executing <LoopTimerHandle") and "test_debug_and_closing.py" in message
    )
    assert message.endswith("took 0.100 seconds")


@needs_uvloop
def test_slow_wheel_callbacks_are_logged_in_debug_mode_on_uvloop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = new_uvloop_event_loop()
    loop.set_debug(True)
    loop.slow_callback_duration = 0.01

    def slow() -> None:
        time.sleep(0.02)

    loop.call_later(0.005, slow)
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        run_for(loop, 0.01)
    loop.close()
    assert any(
        m.startswith("Executing <LoopTimerHandle when=") and "slow()" in m for m in caplog.messages
    )


def test_source_tracebacks_end_at_the_caller_in_debug_mode(kind: str) -> None:
    loop = make_loop(kind)
    loop.set_debug(True)
    try:
        for handle in (
            loop.call_later(1, Callback()),
            loop.call_at(loop.time() + 1, Callback()),
            loop.call_later(0.001, Callback()),  # on the base loop
        ):
            assert handle._source_traceback[-1].filename == __file__  # type: ignore[attr-defined]
            handle.cancel()
    finally:
        loop.close()


async def a_coroutine_function() -> None:
    pass


BAD_CALLS: list[tuple[str, Callable[[asyncio.AbstractEventLoop], object]]] = [
    ("delay None", lambda loop: loop.call_later(None, print)),  # type: ignore[arg-type]
    ("when None", lambda loop: loop.call_at(None, print)),  # type: ignore[arg-type]
    ("delay str", lambda loop: loop.call_later("1", print)),  # type: ignore[arg-type]
    ("coroutine function", lambda loop: loop.call_later(1, a_coroutine_function)),
    ("coroutine function, at", lambda loop: loop.call_at(loop.time() + 1, a_coroutine_function)),
    ("not callable", lambda loop: loop.call_later(1, 42)),  # type: ignore[arg-type]
]


def outcome(call: Callable[[], object]) -> tuple[type[BaseException], str] | None:
    try:
        handle = call()
    except Exception as exc:
        return type(exc), str(exc)
    assert isinstance(handle, asyncio.Handle) or is_loop_handle(handle)
    handle.cancel()
    return None


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize(("name", "bad_call"), BAD_CALLS, ids=[name for name, _ in BAD_CALLS])
def test_bad_calls_fail_as_on_asyncio(
    kind: str, debug: bool, name: str, bad_call: Callable[[asyncio.AbstractEventLoop], object]
) -> None:
    reference = asyncio.SelectorEventLoop()
    loop = make_loop(kind)
    try:
        reference.set_debug(debug)
        loop.set_debug(debug)
        assert outcome(lambda: bad_call(loop)) == outcome(lambda: bad_call(reference))
    finally:
        loop.close()
        reference.close()


def test_calls_on_a_closed_loop_fail_as_on_asyncio(kind: str) -> None:
    loop = make_loop(kind)
    loop.close()
    for call in (lambda: loop.call_later(1, print), lambda: loop.call_at(loop.time() + 1, print)):
        with pytest.raises(RuntimeError, match=r"^Event loop is closed$"):
            call()


def test_debug_mode_refuses_calls_from_another_thread(use_uvloop: bool) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        with pytest.raises(RuntimeError, match="Non-thread-safe operation"):
            await loop.run_in_executor(None, loop.call_later, 1, print)

    run(main(), uvloop=use_uvloop, debug=True)


def test_closing_with_pending_timers_is_clean(kind: str) -> None:
    loop = make_loop(kind)
    callbacks = [Callback() for _ in range(500)]
    refs = [weakref.ref(callback) for callback in callbacks]
    for i, callback in enumerate(callbacks):
        loop.call_later(0.01 + i * 0.5, callback)  # up to 250 s: levels 0 to 2
    del callbacks, callback
    assert loop.wheel_stats().pending == 500
    gc.disable()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            loop.close()
            loop.close()  # idempotent
        assert loop.wheel_stats().pending == 0
        assert all(ref() is None for ref in refs)  # no reference cycle left for the gc
    finally:
        gc.enable()
