"""What ``tests/test_servers.py`` serves: an ASGI app that reports the loop it runs on, a loop
factory with options of its own, and gunicorn worker classes that run uvicorn on the wheel loop.

A module of its own, not part of the test file, because the servers started in a subprocess
(``uvicorn served:app``, ``gunicorn -k served.WheelUvicornWorker served:app``) import it by
name; the in-process tests import the same objects.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from uvicorn_worker import UvicornWorker

from aiowheel.loop import WheelLoop, new_event_loop

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]


#: ``--loop served:coarse_wheel_loop``: a wheel loop with options other than the defaults, the
#: way docs/servers.md tells users to pass options through a ``module:callable`` flag.
coarse_wheel_loop = functools.partial(new_event_loop, tick=0.005, min_delay=0.02)


def loop_report() -> dict[str, Any]:
    """The running loop's class, whether it is a wheel loop, its tick and its wheel counters."""
    loop = asyncio.get_running_loop()
    if isinstance(loop, WheelLoop):
        stats = dataclasses.asdict(loop.wheel_stats())
        return {"loop": type(loop).__name__, "wheel": True, "tick": loop.wheel.tick, "stats": stats}
    return {"loop": type(loop).__name__, "wheel": False, "tick": None, "stats": None}


async def app(
    scope: Scope,
    receive: Callable[[], Awaitable[Message]],
    send: Callable[[Message], Awaitable[None]],
) -> None:
    """``GET /`` answers :func:`loop_report` as JSON; ``GET /sleep`` sleeps 10 ms first (a
    timer of the app's own, long enough to go on the wheel)."""
    if scope["type"] != "http":  # lifespan: nothing to set up
        return
    if scope["path"] == "/sleep":
        await asyncio.sleep(0.01)
    body = json.dumps(loop_report()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


# What docs/servers.md shows: uvicorn-worker's settings, with the loop replaced.


class WheelUvicornWorker(UvicornWorker):
    """uvicorn's gunicorn worker on the wheel loop, asyncio's selector loop underneath."""

    CONFIG_KWARGS = UvicornWorker.CONFIG_KWARGS | {"loop": "aiowheel.loop:new_event_loop"}


class WheelUVLoopUvicornWorker(UvicornWorker):
    """uvicorn's gunicorn worker on the wheel loop, uvloop underneath."""

    CONFIG_KWARGS = UvicornWorker.CONFIG_KWARGS | {"loop": "aiowheel.loop:new_uvloop_event_loop"}
