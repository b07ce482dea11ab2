"""An echo server that closes connections idle for N seconds, on asyncio streams and aiowheel.

What it shows: one :class:`aiowheel.IdleTimeouts` tracks every connection, keyed by the
connection's StreamWriter. A connection is touched when it opens and on every line it sends --
an O(1) update, no timer cancelled and re-armed per packet. When a connection has been idle for
``--timeout`` seconds, ``on_expire`` says goodbye and closes it; a connection the client closes
itself is ``discard``-ed. The server listens on 127.0.0.1 only.

Run it (from the repository root, with aiowheel installed):

    python examples/idle_tcp_server.py                 # serve 60 s on a free port
    nc 127.0.0.1 PORT                                  # in another shell: type lines, then wait
    python examples/idle_tcp_server.py --port 8888 --timeout 10 --duration 300
    python examples/idle_tcp_server.py --self-test --timeout 1

``--self-test`` starts the server with two clients of its own -- one that keeps talking for
three timeouts, one that goes quiet after its first line -- and exits 0 if the quiet one was
closed no earlier than the timeout after its last line and the talker never was.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import aiowheel
from aiowheel.idle import IdleTimeouts

HOST = "127.0.0.1"
#: The self-test's bound beyond its clients' three timeouts, in seconds: it only stops a hang,
#: and a loaded machine, where the clients may run late, never reaches it.
HANG = 60.0


class IdleEchoServer:
    """Echo every line back; close a connection that sent nothing for ``timeout`` seconds."""

    def __init__(self, timer: aiowheel.Timer, timeout: float) -> None:
        self.timeout = timeout
        self.idle: IdleTimeouts[asyncio.StreamWriter] = IdleTimeouts(timer, timeout, self._expire)
        self._handlers: set[asyncio.Task[None]] = set()
        self._stopping = False

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        peer = writer.get_extra_info("peername")
        print(f"{peer}: connected")
        self.idle.touch(writer)
        try:
            while (line := await reader.readline()) and not writer.is_closing():
                # A line that arrives at or after the deadline comes too late: touch() runs
                # on_expire first, which closes the connection.
                self.idle.touch(writer)
                if writer.is_closing():
                    break
                writer.write(line)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            self.idle.discard(writer)
            if not (writer.is_closing() or self._stopping):  # closed by neither side here
                print(f"{peer}: closed by the client")
            writer.close()
            self._handlers.discard(task)

    def _expire(self, writer: asyncio.StreamWriter) -> None:
        print(f"{writer.get_extra_info('peername')}: idle for {self.timeout:g} s, closing")
        writer.write(b"idle timeout, bye\n")
        writer.close()

    async def close(self) -> None:
        """Close the connections still open, wait for their handlers, stop tracking."""
        self._stopping = True
        for task in self._handlers:
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        self.idle.close()


async def serve(port: int, timeout: float, duration: float, self_test: bool) -> int:
    async with aiowheel.Timer(tick=0.01) as timer:
        echo = IdleEchoServer(timer, timeout)
        server = await asyncio.start_server(echo.handle, HOST, port)
        port = server.sockets[0].getsockname()[1]
        print(f"serving on {HOST}:{port}, idle timeout {timeout:g} s")
        try:
            if self_test:
                return await run_self_test(port, timeout)
            print(f"try: nc {HOST} {port}   (the server stops after {duration:g} s)")
            await timer.sleep(duration)
            return 0
        finally:
            server.close()
            await echo.close()
            await server.wait_closed()


async def run_self_test(port: int, timeout: float) -> int:
    """Run a talking and a quiet client against the server; 0 if both behaved as expected."""
    loop = asyncio.get_running_loop()

    async def talker() -> bool:
        reader, writer = await asyncio.open_connection(HOST, port)
        try:
            deadline = loop.time() + 3 * timeout
            while loop.time() < deadline:
                writer.write(b"still here\n")
                if await reader.readline() != b"still here\n":
                    print("talker: the server closed a connection that kept talking")
                    return False
                await asyncio.sleep(timeout / 3)
            print(f"talker: talked for {3 * timeout:g} s and was never closed")
            return True
        finally:
            writer.close()
            await writer.wait_closed()

    async def quiet() -> bool:
        reader, writer = await asyncio.open_connection(HOST, port)
        try:
            last_line = loop.time()  # before the write: the server's touch comes after it
            writer.write(b"hello, then silence\n")
            await reader.readline()  # the echo
            goodbye = await reader.readline()
            closed = await reader.read() == b""
            idle = loop.time() - last_line
            print(f"quiet: the server said {goodbye!r} after {idle:.2f} s of silence")
            return goodbye == b"idle timeout, bye\n" and closed and idle >= timeout
        finally:
            writer.close()
            await writer.wait_closed()

    try:
        async with asyncio.timeout(3 * timeout + HANG):
            passed = all(await asyncio.gather(talker(), quiet()))
    except TimeoutError:
        print(f"the clients did not finish within {3 * timeout + HANG:g} s")
        passed = False
    print("self-test passed" if passed else "self-test FAILED")
    return 0 if passed else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one)")
    parser.add_argument("--timeout", type=float, default=5.0, help="idle timeout, s (5)")
    parser.add_argument("--duration", type=float, default=60.0, help="serve this long, s (60)")
    parser.add_argument("--self-test", action="store_true", help="run two clients and check")
    args = parser.parse_args()
    return asyncio.run(serve(args.port, args.timeout, args.duration, args.self_test))


if __name__ == "__main__":
    sys.exit(main())
