"""The loopback client fleet of ``bench_servers.py``: many connections to one server, in a
process of its own, driven step by step by the benchmark through stdin.

    python benchmarks/_fleet.py http --port P --connections N --requests R
    python benchmarks/_fleet.py ws --port P --connections N

Each step is a line on stdin; the fleet answers each with one JSON line on stdout:

* ``warm``: open :data:`WARM` connections (one request, or the WebSocket handshake, on each)
  and keep them open -- the server's code paths are then warm, so that the RSS the benchmark
  reads next is a baseline for the rest;
* ``connect``: open the other ``N - WARM`` connections the same way (at most
  :data:`CONNECTING` at a time), and keep them all open: ``{"connections": ..., "errors": ...}``;
* ``run`` (``http`` only): every connection makes ``R`` more requests, one after the other,
  all connections at once: ``{"requests": ..., "seconds": ..., "errors": ...}``;
* ``report`` (``ws`` only): ``{"pongs": ...}``, the keepalive pings answered so far;
* end of input: close every connection (with a reset, so that repeated runs leave no
  TIME_WAIT sockets behind) and exit.

The clients are as cheap as they can be -- asyncio protocols, not client libraries, on uvloop
when it is installed -- since the fleet shares the machine with the server it measures. An HTTP
client sends ``GET /`` and reads one response (``Content-Length`` framed); a WebSocket client
makes the opening handshake, then answers each ping with its pong, and sends nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import resource
import socket
import struct
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

#: Connections opened by ``warm``.
WARM = 16
#: Connections being opened at any one time (the server's listen backlog is larger).
CONNECTING = 256

_CONTENT_LENGTH = re.compile(rb"(?i)\r\ncontent-length: *(\d+)")


def raise_open_file_limit() -> int:
    """Raise this process's open-file limit to its hard limit; return the new limit."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


class Client(asyncio.Protocol):
    """One connection: ``done`` resolves when the current exchange is complete."""

    transport: asyncio.Transport

    def __init__(self) -> None:
        self.buffer = bytearray()
        # uvloop calls connection_made only after create_connection has returned.
        self.made: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.done: asyncio.Future[None] | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have the API of asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        self.made.set_result(None)
        sock = transport.get_extra_info("socket")
        # Closing sends a reset: no TIME_WAIT socket per connection left on the machine.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError("the server closed the connection"))

    def _finish(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    async def start(self) -> None:
        """The first exchange on a new connection."""
        raise NotImplementedError

    async def exchange(self, data: bytes) -> None:
        """Send ``data``; wait until :meth:`data_received` calls the exchange complete."""
        self.done = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        await self.done


class HttpClient(Client):
    REQUEST = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        match = _CONTENT_LENGTH.search(self.buffer, 0, end + 2)
        length = int(match.group(1)) if match else 0
        if len(self.buffer) >= end + 4 + length:
            del self.buffer[: end + 4 + length]
            self._finish()

    async def start(self) -> None:
        await self.exchange(self.REQUEST)

    async def requests(self, count: int) -> None:
        for _ in range(count):
            await self.exchange(self.REQUEST)


class WsClient(Client):
    """The handshake, then a pong for every ping; nothing else is sent."""

    pongs = 0  # answered by all clients of this process

    def __init__(self) -> None:
        super().__init__()
        self.open = False

    async def start(self) -> None:
        key = base64.b64encode(os.urandom(16)).decode()
        await self.exchange(
            (
                "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.open:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            if not self.buffer.startswith(b"HTTP/1.1 101 "):
                self.transport.close()
                return
            del self.buffer[: end + 4]
            self.open = True
            self._finish()
        self._read_frames()

    def _read_frames(self) -> None:
        buffer = self.buffer
        while len(buffer) >= 2:
            opcode, length = buffer[0] & 0x0F, buffer[1] & 0x7F
            start = 2
            if length == 126:
                if len(buffer) < 4:
                    return
                (length,) = struct.unpack_from("!H", buffer, 2)
                start = 4
            elif length == 127:
                if len(buffer) < 10:
                    return
                (length,) = struct.unpack_from("!Q", buffer, 2)
                start = 10
            if len(buffer) < start + length:
                return
            payload = bytes(buffer[start : start + length])
            del buffer[: start + length]
            if opcode == 0x9:  # ping: answer with a masked pong carrying the same payload
                mask = os.urandom(4)
                masked = bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload))
                self.transport.write(bytes([0x8A, 0x80 | len(payload)]) + mask + masked)
                WsClient.pongs += 1


async def open_clients(
    make: Callable[[], Client], port: int, count: int, clients: list[Client]
) -> int:
    """Open ``count`` more connections into ``clients``; return how many failed."""
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(CONNECTING)
    errors = 0

    async def open_one() -> None:
        nonlocal errors
        async with gate:
            try:
                _, client = await loop.create_connection(make, "127.0.0.1", port)
                await client.made
                await client.start()
            except OSError:
                errors += 1
            else:
                clients.append(client)

    await asyncio.gather(*(open_one() for _ in range(count)))
    return errors


async def run_requests(clients: list[HttpClient], count: int) -> dict[str, Any]:
    started = time.perf_counter()
    results = await asyncio.gather(
        *(client.requests(count) for client in clients), return_exceptions=True
    )
    seconds = time.perf_counter() - started
    errors = sum(1 for result in results if isinstance(result, BaseException))
    return {"requests": (len(clients) - errors) * count, "seconds": seconds, "errors": errors}


async def fleet(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    commands = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin)
    make: Callable[[], Client] = HttpClient if args.kind == "http" else WsClient
    clients: list[Client] = []
    errors = 0

    def answer(result: dict[str, Any]) -> None:
        print(json.dumps(result), flush=True)

    async def warm() -> dict[str, Any]:
        nonlocal errors
        errors += await open_clients(make, args.port, min(WARM, args.connections), clients)
        return {"connections": len(clients), "errors": errors}

    async def connect() -> dict[str, Any]:
        nonlocal errors
        errors += await open_clients(make, args.port, args.connections - WARM, clients)
        return {"connections": len(clients), "errors": errors}

    async def run() -> dict[str, Any]:
        http = [client for client in clients if isinstance(client, HttpClient)]
        return await run_requests(http, args.requests)

    async def report() -> dict[str, Any]:
        alive = sum(1 for client in clients if not client.lost)
        return {"pongs": WsClient.pongs, "alive": alive}

    steps: dict[str, Callable[[], Awaitable[dict[str, Any]]]] = {
        "warm": warm,
        "connect": connect,
        "run": run,
        "report": report,
    }
    while line := (await commands.readline()).decode().strip():
        if line not in steps:
            raise SystemExit(f"unknown step {line!r}: expected one of {sorted(steps)}")
        answer(await steps[line]())
    for client in clients:
        client.transport.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=["http", "ws"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--connections", type=int, required=True)
    parser.add_argument("--requests", type=int, default=1, help="per connection, in `run`")
    args = parser.parse_args()
    raise_open_file_limit()
    try:
        import uvloop
    except ImportError:
        asyncio.run(fleet(args))
    else:
        uvloop.run(fleet(args))


if __name__ == "__main__":
    main()
