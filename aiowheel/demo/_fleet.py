"""The fleet of simulated clients: connect, keepalive, and some go silent."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from aiowheel.demo._config import (
    CONNECT_TIMEOUT,
    CONNECTS_IN_FLIGHT,
    HOST,
    TEARDOWN_TIMEOUT,
    WELCOME,
    DemoConfig,
)
from aiowheel.demo._verdict import ClientRecord

if TYPE_CHECKING:
    pass


class Fleet:
    """The simulated clients: one task per client reading until the server closes it, and one
    plain loop timer per client writing its next keepalive."""

    def __init__(
        self, records: Sequence[ClientRecord], port: int, config: DemoConfig, rng: random.Random
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._records = records
        self._port = port
        self._rng = rng
        self._low = config.keepalive * (1 - config.jitter)
        self._high = config.longest_interval
        self._writers: dict[int, asyncio.StreamWriter] = {}
        self._keepalives: dict[int, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._connecting = asyncio.Semaphore(CONNECTS_IN_FLIGHT)
        self._stopping = False
        self.connected = 0

    def start(self) -> None:
        """Start every client's task; each waits for its own connect time."""
        for record in self._records:
            task = self._loop.create_task(self._run(record), name=f"demo client {record.key}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, record: ClientRecord) -> None:
        await asyncio.sleep(max(0.0, record.connect_at - self._loop.time()))
        key = record.key
        # A connect counts as done when the server has welcomed the client, so the semaphore
        # bounds the server's accepting too, not only the client's half.
        async with self._connecting:
            if self._stopping:
                return
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT):
                    reader, writer = await asyncio.open_connection(HOST, self._port)
                    writer.write(b"hello %d\n" % key)
                    sent_at = self._loop.time()
                    welcome = await reader.readline()
            except (OSError, TimeoutError) as exc:
                record.connect_error = f"{type(exc).__name__}: {exc}"
                return
        if welcome != WELCOME or self._stopping:
            if not self._stopping:
                record.connect_error = f"the server answered {welcome!r} to hello"
            writer.close()
            return
        record.last_sent = sent_at
        self._writers[key] = writer
        self.connected += 1
        try:
            self._schedule_keepalive(record, writer)
            # The server sends nothing more: read() returns b"" once the connection is closed.
            with contextlib.suppress(ConnectionError):
                while await reader.read(64):
                    pass
            if not self._stopping:
                record.close_seen_at = self._loop.time()
        finally:
            handle = self._keepalives.pop(key, None)
            if handle is not None:
                handle.cancel()
            self._writers.pop(key, None)
            writer.close()

    def _schedule_keepalive(self, record: ClientRecord, writer: asyncio.StreamWriter) -> None:
        delay = self._rng.uniform(self._low, self._high)
        self._keepalives[record.key] = self._loop.call_later(delay, self._keepalive, record, writer)

    def _keepalive(self, record: ClientRecord, writer: asyncio.StreamWriter) -> None:
        now = self._loop.time()
        if now >= record.silent_at or writer.is_closing():
            # Gone silent: the socket stays open, nothing more is sent.
            self._keepalives.pop(record.key, None)
            return
        writer.write(b"ping\n")
        record.last_sent = now
        self._schedule_keepalive(record, writer)

    def stop(self) -> None:
        """Stop every keepalive and close every client connection. Idempotent."""
        self._stopping = True
        for handle in self._keepalives.values():
            handle.cancel()
        self._keepalives.clear()
        for writer in self._writers.values():
            writer.close()

    async def wait_closed(self) -> None:
        """Wait (bounded) for the client tasks to finish after :meth:`stop`."""
        await _finish(self._tasks)


async def _finish(tasks: set[asyncio.Task[None]]) -> None:
    """Wait up to TEARDOWN_TIMEOUT for ``tasks``, then cancel and await what is left."""
    pending = set(tasks)
    if pending:
        _, pending = await asyncio.wait(pending, timeout=TEARDOWN_TIMEOUT)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending)
