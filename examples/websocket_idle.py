"""A websocket server that closes idle clients, on the ``websockets`` library and aiowheel.

What it shows: the server (``websockets.asyncio.server.serve``, the library's asyncio API)
tracks every connection in one :class:`aiowheel.IdleTimeouts`. Each message a client sends is a
touch. ``on_expire`` is a coroutine function -- IdleTimeouts runs it as a task -- that closes the
connection with code 1000 and the reason "idle timeout". websockets' own pings keep the TCP
connection alive but are not activity here: only messages are. Everything runs on 127.0.0.1.

The script runs the server and a few bounded clients in one process, then exits:

* talking clients send a message every ``timeout / 3`` seconds for three timeouts, then close
  the connection themselves (code 1000, reason "done");
* silent clients send one message and then wait until the server closes them.

It prints what each client saw and exits 0 if every talker finished untouched and every silent
client was closed for being idle, no earlier than the timeout after its message.

Run it (needs ``pip install websockets``, in aiowheel's ``dev`` extra):

    python examples/websocket_idle.py
    python examples/websocket_idle.py --timeout 2 --talkers 3 --silent 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable

from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

import aiowheel
from aiowheel.idle import IdleTimeouts

HOST = "127.0.0.1"
IDLE_REASON = "idle timeout"
#: The bound beyond the clients' three timeouts, in seconds: it only stops a hang, and a loaded
#: machine, where the clients may run late, never reaches it.
HANG = 60.0


def make_handler(
    idle: IdleTimeouts[ServerConnection],
) -> Callable[[ServerConnection], Awaitable[None]]:
    """The connection handler: echo each message; touch on open and on every message,
    discard on close."""

    async def handler(connection: ServerConnection) -> None:
        idle.touch(connection)
        try:
            async for message in connection:
                idle.touch(connection)
                await connection.send(message)  # an echo
        finally:
            # False if the connection was expired (and closed) first.
            idle.discard(connection)

    return handler


async def expire(connection: ServerConnection) -> None:
    """on_expire: a coroutine function, run by IdleTimeouts as a task."""
    print(f"server: {connection.remote_address} idle, closing")
    await connection.close(code=1000, reason=IDLE_REASON)


async def talking_client(uri: str, name: str, timeout: float) -> bool:
    """Send a message every timeout / 3 for three timeouts; True if never closed by the server."""
    loop = asyncio.get_running_loop()
    # proxy=None: loopback only, never through a proxy from the environment.
    async with connect(uri, proxy=None) as websocket:
        deadline = loop.time() + 3 * timeout
        try:
            while loop.time() < deadline:
                await websocket.send(f"{name} is here")
                await websocket.recv()
                await asyncio.sleep(timeout / 3)
        except ConnectionClosed as exc:
            print(f"{name}: closed by the server while talking ({exc})")
            return False
        await websocket.close(code=1000, reason="done")
    print(f"{name}: talked for {3 * timeout:g} s, never closed by the server")
    return True


async def silent_client(uri: str, name: str, timeout: float) -> bool:
    """Send one message, then wait; True if the server closed it for idleness, not too early."""
    loop = asyncio.get_running_loop()
    async with connect(uri, proxy=None) as websocket:
        sent_at = loop.time()  # before the send: the server's touch comes after it
        await websocket.send(f"{name} says hello, then nothing")
        await websocket.recv()
        with contextlib.suppress(ConnectionClosed):
            await websocket.recv()  # returns only if the server sends more than its echo
        idle = loop.time() - sent_at
        code, reason = websocket.close_code, websocket.close_reason
    print(f"{name}: closed after {idle:.2f} s of silence, code {code}, reason {reason!r}")
    return code == 1000 and reason == IDLE_REASON and idle >= timeout


async def main(timeout: float, talkers: int, silent: int) -> int:
    async with aiowheel.Timer(tick=0.01) as timer:
        idle: IdleTimeouts[ServerConnection] = IdleTimeouts(timer, timeout, expire)
        async with serve(make_handler(idle), HOST, 0) as server:
            port = server.sockets[0].getsockname()[1]
            uri = f"ws://{HOST}:{port}"
            print(f"serving on {uri}, idle timeout {timeout:g} s")
            clients = [talking_client(uri, f"talker {i}", timeout) for i in range(talkers)]
            clients += [silent_client(uri, f"silent {i}", timeout) for i in range(silent)]
            async with asyncio.timeout(3 * timeout + HANG):
                results = await asyncio.gather(*clients)
    passed = all(results)
    print("all clients behaved as expected" if passed else "FAILED")
    return 0 if passed else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=1.0, help="idle timeout, s (1)")
    parser.add_argument("--talkers", type=int, default=2, help="talking clients (2)")
    parser.add_argument("--silent", type=int, default=2, help="silent clients (2)")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.timeout, args.talkers, args.silent)))
