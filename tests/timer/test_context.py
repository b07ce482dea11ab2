"""What a callback runs in and where its errors go: a copy of the caller's context (or the one
given), and errors to the exception handler on every backend.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from typing import Any

import anyio
import pytest
from support import Boom, Fatal, Fired, boom

from aiowheel import Timer

# Every test on both implementations (the `implementation` fixture, see conftest.py).
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("implementation")]


# -- context --------------------------------------------------------------------------------------

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")


async def test_callback_runs_in_a_copy_of_the_callers_context() -> None:
    seen: list[str] = []

    def callback() -> None:
        seen.append(request_id.get())
        request_id.set("set by the callback")

    async with Timer() as timer:
        token = request_id.set("caller")
        try:
            timer.call_later(0.001, callback)
            request_id.set("changed after scheduling")
            await timer.sleep(0.002)
            assert request_id.get() == "changed after scheduling"  # no leak back
        finally:
            request_id.reset(token)
    assert seen == ["caller"]


async def test_callbacks_from_one_context_do_not_see_each_others_changes() -> None:
    """Each callback gets the caller's values as they were when it was scheduled, in a context
    of its own (the compiled Timer shares one snapshot between such handles: still isolated)."""
    seen: list[tuple[str, str]] = []

    def callback(label: str) -> None:
        seen.append((label, request_id.get()))
        request_id.set(f"set by {label}")

    async with Timer() as timer:
        token = request_id.set("first")
        try:
            when = timer.time() + 0.001
            timer.call_at(when, callback, "a")
            timer.call_at(when, callback, "b")
            request_id.set("second")
            timer.call_at(when, callback, "c")
            timer.call_at(when, callback, "d")
            request_id.set("first")  # the same value again, in a new mapping
            timer.call_at(when, callback, "e")
            await timer.sleep_until(when)
        finally:
            request_id.reset(token)
    assert seen == [
        ("a", "first"),
        ("b", "first"),
        ("c", "second"),
        ("d", "second"),
        ("e", "first"),
    ]


async def test_callback_runs_in_the_given_context() -> None:
    context = contextvars.Context()
    context.run(request_id.set, "given")
    seen: list[str] = []

    def callback() -> None:
        seen.append(request_id.get())
        request_id.set("set by the callback")

    async with Timer() as timer:
        token = request_id.set("caller")
        try:
            timer.call_later(0.001, callback, context=context)
            timer.call_at(timer.time() + 0.001, callback, context=context)
            await timer.sleep(0.002)
        finally:
            request_id.reset(token)
    assert seen == ["given", "set by the callback"]
    assert context[request_id] == "set by the callback"


async def test_coroutine_job_runs_in_a_copy_of_the_callers_context() -> None:
    async def job() -> str:
        await anyio.sleep(0)
        return request_id.get()

    async with Timer() as timer:
        token = request_id.set("scheduler")
        try:
            pending = timer.schedule(0.001, job)
            request_id.set("changed")
            assert await pending == "scheduler"
        finally:
            request_id.reset(token)


# -- errors ---------------------------------------------------------------------------------------


def fatal() -> None:
    raise Fatal


async def test_exception_handler_gets_errors_on_every_backend(
    caplog: pytest.LogCaptureFixture,
) -> None:
    contexts: list[dict[str, Any]] = []

    def handler(context: dict[str, Any]) -> None:
        contexts.append(context)
        if isinstance(context["exception"], Fatal):
            raise RuntimeError("the handler itself fails")

    with caplog.at_level(logging.ERROR, logger="aiowheel"):
        async with Timer(exception_handler=handler) as timer:
            fired = Fired(timer)
            failing = timer.call_later(0.001, boom, 3)
            timer.call_later(0.002, fatal)
            timer.call_later(0.003, fired, "later")
            await timer.sleep(0.004)

    assert fired.labels == ["later"]
    assert [type(context["exception"]) for context in contexts] == [Boom, Fatal]
    assert set(contexts[0]) == {"message", "exception", "handle"}
    assert contexts[0]["handle"] is failing
    # A failing handler is logged and does not stop the timer either.
    [record] = [record for record in caplog.records if record.name == "aiowheel"]
    assert "exception_handler" in record.getMessage()
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], RuntimeError)


async def test_the_error_report_of_a_one_argument_callback_shows_its_tuple(
    backend_name: str,
) -> None:
    if backend_name == "trio":
        pytest.skip("asyncio's exception handler")
    loop = asyncio.get_running_loop()
    contexts: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: contexts.append(context))

    def boom(argument: object) -> None:
        raise ValueError(argument)

    try:
        async with Timer() as timer:
            timer.call_later(0.001, boom, (1, 2))
            await timer.sleep(0.002)
    finally:
        loop.set_exception_handler(None)
    [context] = contexts
    assert context["message"].endswith("boom((1, 2),)")
    assert context["exception"].args == ((1, 2),)
