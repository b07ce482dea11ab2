"""``aiowheel.loop.run``: the wheel's ``asyncio.run``, in ``uvloop.run``'s shape.

Where asyncio is the reference (the errors, the debug default, what happens at the end), the test
runs ``asyncio.run`` side by side. No timing: a main that returns at once, or sleeps 0.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

import pytest
from support import needs_uvloop

import aiowheel._impl
import aiowheel.loop
from aiowheel.loop import WheelLoop, new_event_loop, new_uvloop_event_loop

MAKERS = [new_event_loop, pytest.param(new_uvloop_event_loop, marks=needs_uvloop)]


@pytest.mark.parametrize("make", MAKERS)
def test_runs_a_main_on_a_new_wheel_loop_with_its_options_and_returns_its_result(
    core: str, make: Callable[..., WheelLoop]
) -> None:
    seen: dict[str, Any] = {}

    async def main(x: int) -> int:
        loop = asyncio.get_running_loop()
        handle = loop.call_later(3600, print)  # on the wheel: the core's handle
        seen.update(
            loop=loop,
            options=(loop.wheel.tick, loop.wheel.wheel_size, loop.min_delay),
            handle_class=type(handle),
        )
        await asyncio.sleep(0)
        return 6 * x

    result = aiowheel.loop.run(
        main(7), loop_factory=make, tick=0.002, wheel_size=32, min_delay=0.01, core=core
    )
    assert result == 42
    assert isinstance(seen["loop"], WheelLoop)
    assert isinstance(seen["loop"], type(make()))
    assert seen["options"] == (0.002, 32, 0.01)
    assert seen["handle_class"] is aiowheel._impl.impl_named(core).loop.TimerHandle
    assert seen["loop"].is_closed()


def test_the_default_loop_is_new_event_loops_with_its_default_options() -> None:
    async def main() -> tuple[type, tuple[float, int, float]]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, WheelLoop)
        return type(loop), (loop.wheel.tick, loop.wheel.wheel_size, loop.min_delay)

    reference = new_event_loop()
    try:
        expected = (
            type(reference),
            (
                reference.wheel.tick,
                reference.wheel.wheel_size,
                reference.min_delay,
            ),
        )
    finally:
        reference.close()
    assert aiowheel.loop.run(main()) == expected


@pytest.mark.parametrize("debug", [True, False, None])
def test_debug_is_asyncio_runs(debug: bool | None, monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> bool:
        return asyncio.get_running_loop().get_debug()

    # None: the default, which asyncio takes from PYTHONASYNCIODEBUG and -X dev; the same here.
    for env in ("", "1"):
        monkeypatch.setenv("PYTHONASYNCIODEBUG", env)
        assert aiowheel.loop.run(main(), debug=debug) == asyncio.run(main(), debug=debug)
    assert aiowheel.loop.run(main(), debug=True) is True
    assert aiowheel.loop.run(main(), debug=False) is False


def test_a_main_that_raises_raises_and_the_pending_tasks_are_cancelled_as_asyncio_runs_are() -> (
    None
):
    cancelled: list[str] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.sleep(3600)  # on the wheel
        finally:
            cancelled.append(name)

    async def main(name: str) -> None:
        asyncio.get_running_loop().create_task(forever(name))
        await asyncio.sleep(0)
        raise LookupError(name)

    with pytest.raises(LookupError, match="asyncio"):
        asyncio.run(main("asyncio"))
    with pytest.raises(LookupError, match="aiowheel"):
        aiowheel.loop.run(main("aiowheel"))
    assert cancelled == ["asyncio", "aiowheel"]


async def _a_main() -> None:
    pass


@pytest.mark.parametrize(
    "not_a_coroutine",
    [_a_main, 42, None, asyncio.sleep],
    ids=["the-function", "int", "None", "asyncio.sleep"],
)
def test_anything_but_a_coroutine_is_refused_as_asyncio_run_refuses_it(
    not_a_coroutine: Any,
) -> None:
    with pytest.raises(Exception) as expected:
        asyncio.run(not_a_coroutine)
    with pytest.raises(type(expected.value)) as got:
        aiowheel.loop.run(not_a_coroutine)
    # ValueError("a coroutine was expected, ...") up to 3.13; 3.14's runner also takes any
    # awaitable, and raises TypeError for anything else.
    assert str(got.value) == str(expected.value)
    assert isinstance(got.value, ValueError if sys.version_info < (3, 14) else TypeError)


def test_refused_from_a_running_loop_as_asyncio_run_is() -> None:
    async def outer() -> list[str]:
        messages = []
        for run in (asyncio.run, aiowheel.loop.run):
            inner = _a_main()
            with pytest.raises(RuntimeError) as error:
                run(inner)
            inner.close()
            messages.append(str(error.value))
        return messages

    assert aiowheel.loop.run(outer()) == [
        "asyncio.run() cannot be called from a running event loop",
        "aiowheel.loop.run() cannot be called from a running event loop",
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [({"tick": 0}, "tick"), ({"wheel_size": 1}, "wheel_size"), ({"core": "c"}, "core")],
)
def test_a_bad_option_is_refused_by_name_before_main_starts(
    options: dict[str, Any], message: str
) -> None:
    started: list[bool] = []

    async def main() -> None:
        started.append(True)

    coroutine = main()
    with pytest.raises(ValueError, match=message):
        aiowheel.loop.run(coroutine, **options)
    coroutine.close()
    assert started == []
