"""What the fault tables share."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc

from aiowheel import Timer


def raising_on_expire(
    entry: str, record: list[str], raising_key: str, exc_type: type[BaseException]
) -> Callable[[str], Any]:
    """An ``on_expire`` for ``entry`` -- "plain on_expire" or "coroutine on_expire" -- that
    records each key and raises ``exc_type`` for ``raising_key``."""

    def plain(key: str) -> None:
        record.append(key)
        if key == raising_key:
            raise exc_type

    async def coroutine(key: str) -> None:
        await anyio.sleep(0)
        plain(key)

    return plain if entry == "plain on_expire" else coroutine


# A scenario of the tables: it drives a running Timer and logs what ran.
Scenario = Callable[[Timer, list[str]], Awaitable[None]]
