"""The idle-expiring TCP server: one IdleTimeouts on one Timer, a touch per line."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from aiowheel.demo._config import HOST, WELCOME
from aiowheel.demo._fleet import _finish
from aiowheel.demo._verdict import ClientRecord
from aiowheel.idle import IdleTimeouts
from aiowheel.timer import Timer

if TYPE_CHECKING:
    pass


class IdleServer:
    """The idle-expiring TCP server: one line from a client is one touch of its key.

    The first line is ``hello <key>``, answered with ``welcome``; every line after it is a
    keepalive. On expiry the server closes the connection; on the client's close it discards
    the key.
    """

    def __init__(self, timer: Timer, timeout: float, records: Sequence[ClientRecord]) -> None:
        self._loop = asyncio.get_running_loop()
        self._records = records
        self.idle: IdleTimeouts[int] = IdleTimeouts(timer, timeout, self._expire)
        # The open connection of each key that said hello, to close it on expiry.
        self._writers: dict[int, asyncio.StreamWriter] = {}
        # Connection handler tasks, to wait for (and, if stuck, cancel) at the end.
        self._handlers: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.touches = 0
        self.expiries = 0
        self.max_connections = 0
        # Connections that ever said hello; counted here, with `connections`, so that a status
        # line never shows more open than accepted.
        self.accepted = 0

    @property
    def connections(self) -> int:
        """Connections open now (after their hello)."""
        return len(self._writers)

    async def start(self, backlog: int) -> int:
        """Listen on 127.0.0.1 on a free port and return the port."""
        self._server = await asyncio.start_server(self._handle, HOST, 0, backlog=backlog)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        key: int | None = None
        try:
            hello = await reader.readline()
            key = _parse_hello(hello, len(self._records))
            if key is None:
                return
            self._writers[key] = writer
            self.accepted += 1
            self.max_connections = max(self.max_connections, len(self._writers))
            if not self._touch(key, writer):
                return
            writer.write(WELCOME)
            while await reader.readline() and self._touch(key, writer):
                pass
        except (ConnectionError, ValueError):  # ValueError: a line over the stream's limit
            pass  # a broken or misbehaving peer: dropped like a clean close
        finally:
            if key is not None and self._writers.get(key) is writer:
                del self._writers[key]
                self.idle.discard(key)
            writer.close()
            self._handlers.discard(task)

    def _touch(self, key: int, writer: asyncio.StreamWriter) -> bool:
        """Touch ``key`` for a packet; False if its connection was expired (and closed)."""
        if self._writers.get(key) is not writer or self.idle.closed:
            return False  # expired while this packet waited to be read, or the run is over
        # Read the clock before touch(): the deadline counts from a time >= now, so
        # "expired_at >= last_touch + timeout" holds exactly if the wheel is never early.
        now = self._loop.time()
        self.idle.touch(key)
        if self._writers.get(key) is not writer:
            # The packet came at or after the deadline: touch() expired the key first and
            # on_expire closed the connection; the new period touch() started is not wanted.
            self.idle.discard(key)
            return False
        self._records[key].last_touch = now
        self.touches += 1
        return True

    def _expire(self, key: int) -> None:
        record = self._records[key]
        if record.expired_at is None:
            record.expired_at = self._loop.time()
        record.expiries += 1
        self.expiries += 1
        writer = self._writers.pop(key, None)
        if writer is not None:
            writer.close()

    def stop_tracking(self) -> None:
        """Stop expiring connections (the run is over); packets are no longer touches."""
        self.idle.close()

    async def close(self) -> None:
        """Stop listening, close every connection and wait (bounded) for the handlers."""
        self.stop_tracking()
        if self._server is not None:
            self._server.close()
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
        await _finish(self._handlers)
        if self._server is not None:
            await self._server.wait_closed()


def _parse_hello(line: bytes, count: int) -> int | None:
    words = line.split()
    if len(words) != 2 or words[0] != b"hello" or not words[1].isdigit():
        return None
    key = int(words[1])
    return key if key < count else None
