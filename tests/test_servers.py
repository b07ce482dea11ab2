"""Real servers on the wheel loop: uvicorn, websockets, aiohttp, hypercorn, gunicorn and anyio.

What ``docs/servers.md`` tells users to type, run here on 127.0.0.1 against the libraries
themselves, on both bases of the wheel loop (asyncio's selector loop and uvloop):

* the server really runs on the wheel loop: ``asyncio.get_running_loop()`` inside the app is a
  :class:`~aiowheel.loop.WheelLoop`, and the loop's wheel counters rise while it serves;
* its timers really go to the wheel and fire there: an idle keep-alive connection is closed by
  the server's own keep-alive timer (uvicorn's ``timeout_keep_alive``, aiohttp's and hypercorn's
  keep-alive timeouts), never before the timeout has passed since the client's last request,
  and the wheel's ``fired`` counter shows it; a websockets client that stops answering keepalive
  pings is closed with 1011, a healthy one stays;
* uvicorn through its real command line (``--loop module:callable``, uvicorn >= 0.36 reads it as
  a zero-argument loop factory) in a subprocess, through ``Server.run`` (what ``uvicorn.run``
  and the command line call) with a factory of the user's own holding options, and in process
  through ``uvicorn.Config`` / ``Server``; gunicorn with uvicorn's worker class set to the wheel
  loop.

Keep-alive and ping timeouts are a second, so each test takes a few seconds; every wait is
bounded (:data:`DEADLINE`) and every server and subprocess is stopped by the test. The lower
bounds on when a connection is closed are exact (the wheel never fires early, and each is
measured from before the client's last request); there is no upper bound tighter than the
deadline, since the machine may be loaded. ``benchmarks/bench_servers.py`` measures the same
servers under load; its smoke run is in ``tests/test_benchmarks.py``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.client
import json
import os
import queue
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import anyio
import anyio.abc
import pytest
import uvicorn
from aiohttp import web
from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config as HypercornConfig
from served import app, loop_report
from websockets.asyncio.client import connect as ws_connect
from websockets.asyncio.server import ServerConnection
from websockets.asyncio.server import serve as ws_serve
from websockets.exceptions import ConnectionClosedError
from websockets.protocol import State

import aiowheel
import aiowheel.loop
from aiowheel.loop import WheelLoop, new_event_loop, new_uvloop_event_loop

T = TypeVar("T")

TESTS = Path(__file__).resolve().parent

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is in the dev extra
    uvloop = None

#: The wheel loop's two bases, and what a user types to get each (``module:callable``).
FACTORIES = {
    "asyncio": "aiowheel.loop:new_event_loop",
    "uvloop": "aiowheel.loop:new_uvloop_event_loop",
}
#: The class of the running loop on each base.
LOOP_CLASS = {"asyncio": "WheelEventLoop", "uvloop": "WheelUVLoop"}

#: Upper bound on any one wait: only stops a hung test; never a claim about speed.
DEADLINE = 60.0
#: Keep-alive timeouts: long enough that a loaded machine (client and server share a process,
#: and may be descheduled together) answers well within them -- a client's next request comes
#: a few milliseconds after the last answer, so only a stall of most of a second could miss it --
#: short enough that a test waits a second.
KEEP_ALIVE = 1.0

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(params=list(FACTORIES))
def base(request: pytest.FixtureRequest) -> str:
    """The base loop under the wheel: ``"asyncio"`` or ``"uvloop"``."""
    if request.param == "uvloop" and uvloop is None:
        pytest.skip("uvloop is not installed")
    return str(request.param)


def factory(base: str) -> Callable[[], asyncio.AbstractEventLoop]:
    return new_uvloop_event_loop if base == "uvloop" else new_event_loop


def run_on_wheel(base: str, main: Callable[[], Awaitable[T]]) -> T:
    """``asyncio.Runner(loop_factory=aiowheel.loop.new_event_loop)`` (or
    ``new_uvloop_event_loop``), as docs/servers.md shows it, bounded by :data:`DEADLINE`."""

    async def bounded() -> T:
        async with asyncio.timeout(DEADLINE):
            return await main()

    with asyncio.Runner(loop_factory=factory(base)) as runner:
        return runner.run(bounded())


def wheel_loop() -> WheelLoop:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, WheelLoop), type(loop)
    return loop


# -- a raw HTTP/1.1 client: it sees exactly when the server closes the connection -------------


async def get(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str = "/"
) -> dict[str, Any]:
    """One ``GET`` on an open keep-alive connection; the JSON body of the 200 response."""
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), head
    match = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    assert match is not None, head
    body: dict[str, Any] = json.loads(await reader.readexactly(int(match.group(1))))
    return body


async def closed_by_server(reader: asyncio.StreamReader) -> None:
    """Wait for the server to close the connection (EOF, nothing more sent)."""
    assert await reader.read() == b""


# -- uvicorn's --loop flag ---------------------------------------------------------------------


@pytest.mark.parametrize("name", list(FACTORIES.values()))
def test_uvicorn_reads_the_flag_as_the_factory_itself(name: str) -> None:
    """uvicorn >= 0.36: ``--loop module:callable`` is the loop factory, called with no argument
    (before 0.36 the flag took only the names of uvicorn's own loop set-ups)."""
    config = uvicorn.Config(app, loop=name)
    assert config.get_loop_factory() is getattr(aiowheel.loop, name.split(":")[1])


# -- uvicorn -----------------------------------------------------------------------------------


@contextlib.contextmanager
def server_process(command: list[str], ready: str, cwd: Path) -> Iterator[int]:
    """Start ``command``; yield the port its log line matching ``ready`` names; stop it.

    A thread reads the log line by line into a queue: the server may write several lines at
    once (``select`` on the pipe would then miss those already buffered), and a log that nobody
    reads could fill the pipe and block the server.
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    stderr = process.stderr
    assert stderr is not None
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stderr:
            lines.put(line)
        lines.put("")  # the end of the log

    reader = threading.Thread(target=pump)
    reader.start()
    log: list[str] = []
    try:
        deadline = time.monotonic() + DEADLINE
        while True:
            try:
                line = lines.get(timeout=max(deadline - time.monotonic(), 0))
            except queue.Empty:
                line = ""
            if not line:  # end of the log, or the deadline
                raise AssertionError(f"no {ready!r} in the server's log:\n{''.join(log)}")
            log.append(line)
            if match := re.search(ready, line):
                break
        yield int(match.group("port"))
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(DEADLINE)
        finally:
            if process.returncode is None:
                process.kill()
                process.wait()
            reader.join()  # the log ends with the process
            stderr.close()


def http_get(port: int, connection: http.client.HTTPConnection, path: str) -> dict[str, Any]:
    connection.request("GET", path)
    response = connection.getresponse()
    assert response.status == 200
    body: dict[str, Any] = json.loads(response.read())
    return body


def test_uvicorn_command_line_runs_the_app_on_the_wheel_loop(base: str) -> None:
    """``uvicorn served:app --loop aiowheel.loop:new_event_loop`` (or ``new_uvloop_event_loop``),
    as a user types it: the app runs on the wheel loop, its sleep and uvicorn's keep-alive timer
    go on the wheel, and the keep-alive timer of a reused connection is cancelled there."""
    command = [sys.executable, "-m", "uvicorn", "served:app", "--loop", FACTORIES[base]]
    command += ["--host", "127.0.0.1", "--port", "0", "--lifespan", "off"]
    ready = r"Uvicorn running on http://127\.0\.0\.1:(?P<port>\d+)"
    with server_process(command, ready, cwd=TESTS) as port:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE)
        try:
            first = http_get(port, connection, "/sleep")
            second = http_get(port, connection, "/sleep")  # the same connection, kept alive
        finally:
            connection.close()
    assert (first["loop"], first["wheel"]) == (LOOP_CLASS[base], True)
    before, after = first["stats"], second["stats"]
    # The second request's sleep, and the keep-alive timer armed after the first response ...
    assert after["wheel_timers"] >= before["wheel_timers"] + 2
    # ... which the second request cancelled (a cancel on the wheel); the sleep fired there.
    assert after["cancelled"] >= before["cancelled"] + 1
    assert after["fired"] >= before["fired"] + 1


def test_uvicorn_run_takes_a_factory_with_options_from_a_module() -> None:
    """``--loop served:coarse_wheel_loop``, where ``served.py`` holds ``coarse_wheel_loop =
    functools.partial(aiowheel.loop.new_event_loop, tick=0.005, min_delay=0.02)``: uvicorn's
    own ``Server.run`` (what ``uvicorn.run`` and the command line call) runs the app on a wheel
    loop with those options. In a thread, as uvicorn's own tests run it: it skips signal
    handlers there."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        loop="served:coarse_wheel_loop",
        http="h11",
        lifespan="off",
        log_config=None,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run)
    thread.start()
    try:
        deadline = time.monotonic() + DEADLINE
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE)
        try:
            report = http_get(port, connection, "/sleep")
        finally:
            connection.close()
    finally:
        server.should_exit = True
        thread.join(DEADLINE)
    assert not thread.is_alive()
    assert (report["loop"], report["wheel"], report["tick"]) == ("WheelEventLoop", True, 0.005)


def test_uvicorn_closes_an_idle_keep_alive_connection_from_the_wheel(base: str) -> None:
    """In process, ``uvicorn.Config(loop=...)`` + ``Server``: requests work on a kept-alive
    connection while they come faster than ``timeout_keep_alive``; once the client goes quiet,
    uvicorn's keep-alive timer -- one of the wheel loop's handles -- closes the connection, never
    before ``timeout_keep_alive`` after the last request."""

    async def main() -> None:
        loop = wheel_loop()
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            loop=FACTORIES[base],
            http="h11",
            lifespan="off",
            timeout_keep_alive=KEEP_ALIVE,  # type: ignore[arg-type]  # typed int, takes a float
            log_config=None,
        )
        server = uvicorn.Server(config)
        serving = asyncio.create_task(server.serve())
        try:
            while not server.started:
                await asyncio.sleep(0.005)
            port = server.servers[0].sockets[0].getsockname()[1]
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            # Requests closer together than the keep-alive timeout: each cancels the last timer.
            for _ in range(3):
                report = await get(reader, writer)
                assert (report["loop"], report["wheel"]) == (LOOP_CLASS[base], True)
                await asyncio.sleep(KEEP_ALIVE / 10)
            (protocol,) = server.server_state.connections
            handle = protocol.timeout_keep_alive_task  # type: ignore[attr-defined]
            assert handle is not None
            # One of aiowheel's handles (pure or compiled), not one of the base loop's.
            assert type(handle).__module__.startswith("aiowheel"), type(handle)
            before = loop.wheel_stats()
            last_request = loop.time()
            await get(reader, writer)
            await closed_by_server(reader)
            assert loop.time() - last_request >= KEEP_ALIVE
            after = loop.wheel_stats()
            assert after.fired > before.fired
            assert after.cancelled > before.cancelled  # the earlier keep-alive timer
            writer.close()
        finally:
            server.should_exit = True
            await serving

    run_on_wheel(base, main)


# -- websockets --------------------------------------------------------------------------------

PING_INTERVAL = 0.05
#: As :data:`KEEP_ALIVE`: a healthy client on a loaded machine answers well within it.
PING_TIMEOUT = 1.0


def frames(data: bytes) -> list[tuple[int, bytes]]:
    """``(opcode, payload)`` of each unmasked frame a server sent (payloads under 126 bytes)."""
    found = []
    while data:
        opcode, length = data[0] & 0x0F, data[1] & 0x7F
        assert length < 126, data
        found.append((opcode, data[2 : 2 + length]))
        data = data[2 + length :]
    return found


def test_websockets_keepalive_pings_run_on_the_wheel(base: str) -> None:
    """``websockets.asyncio.server.serve`` with ``ping_interval`` / ``ping_timeout``: a client
    that answers pings (websockets' own) stays connected over several keepalive rounds; one that
    never answers (a raw socket) is closed with 1011 "keepalive ping timeout", never before the
    first ping and its timeout have passed. The keepalive's sleeps fire on the wheel, and its
    pong timeouts are cancelled there."""

    async def main() -> None:
        loop = wheel_loop()
        connections: list[ServerConnection] = []
        failures: list[ConnectionClosedError] = []

        async def echo(connection: ServerConnection) -> None:
            connections.append(connection)
            try:
                async for message in connection:
                    await connection.send(message)
            except ConnectionClosedError as exc:
                failures.append(exc)

        async with ws_serve(
            echo,
            "127.0.0.1",
            0,
            ping_interval=PING_INTERVAL,
            ping_timeout=PING_TIMEOUT,
            close_timeout=KEEP_ALIVE,
        ) as server:
            port = server.sockets[0].getsockname()[1]
            async with ws_connect(f"ws://127.0.0.1:{port}", ping_interval=None) as client:
                # From here on only the server's keepalive makes wheel timers (the handshakes'
                # timeouts are behind us, and the polls below, shorter than min_delay, stay on
                # the base loop): a sleep that fires, then a pong timeout that the pong cancels.
                before = loop.wheel_stats()
                while loop.wheel_stats().cancelled - before.cancelled < 3:
                    await asyncio.sleep(loop.min_delay / 2)
                assert loop.wheel_stats().fired - before.fired >= 3
                await client.send("still here")
                assert await client.recv() == "still here"
                (healthy,) = connections
                assert healthy.state is State.OPEN
            assert failures == []

            # A client that completes the handshake, then never answers a ping.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            key = base64.b64encode(os.urandom(16)).decode()
            opened = loop.time()  # the server's keepalive cannot start before this
            writer.write(
                "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n".encode()
            )
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 101 ")
            sent = frames(await reader.read())  # everything until the server closes
            elapsed = loop.time() - opened
            if base == "uvloop":  # its clock counts whole milliseconds: undo the subtraction's
                elapsed = round(elapsed, 3)  # float error (0.661 - 0.111 gave 0.5499999...)
            assert elapsed >= PING_INTERVAL + PING_TIMEOUT  # a ping, its timeout
            writer.close()
            opcodes = [opcode for opcode, _ in sent]
            assert opcodes[0] == 0x9 and opcodes[-1] == 0x8, opcodes  # pings, then a close
            code, reason = struct.unpack("!H", sent[-1][1][:2])[0], sent[-1][1][2:]
            assert (code, reason) == (1011, b"keepalive ping timeout")
            while not failures:  # the handler learns it once the connection is gone
                await asyncio.sleep(0.005)
            assert failures[0].sent is not None and failures[0].sent.code == 1011

    run_on_wheel(base, main)


# -- aiohttp -----------------------------------------------------------------------------------


async def report_handler(request: web.Request) -> web.Response:
    return web.json_response(loop_report())


def aiohttp_app() -> web.Application:
    application = web.Application()
    application.router.add_get("/", report_handler)
    return application


def test_aiohttp_runner_on_the_wheel_loop_closes_idle_keep_alive(base: str) -> None:
    """``web.AppRunner(keepalive_timeout=...)`` + ``web.TCPSite`` on the wheel loop: aiohttp's
    own client gets answers from a handler running on the wheel loop, and an idle keep-alive
    connection is closed by aiohttp's keep-alive timer, from the wheel, never before
    ``keepalive_timeout`` after the last request."""

    async def main() -> None:
        loop = wheel_loop()
        runner = web.AppRunner(aiohttp_app(), keepalive_timeout=KEEP_ALIVE, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = runner.addresses[0][1]
            timeout = aiohttp.ClientTimeout(total=DEADLINE)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                for _ in range(2):
                    async with session.get(f"http://127.0.0.1:{port}/") as response:
                        report = await response.json()
                    assert (report["loop"], report["wheel"]) == (LOOP_CLASS[base], True)

            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            before = loop.wheel_stats()
            last_request = loop.time()
            await get(reader, writer)
            await closed_by_server(reader)
            assert loop.time() - last_request >= KEEP_ALIVE
            assert loop.wheel_stats().fired > before.fired
            writer.close()
        finally:
            await runner.cleanup()

    run_on_wheel(base, main)


def test_aiohttp_run_app_runs_on_the_loop_it_is_given(base: str) -> None:
    """``web.run_app(app, loop=aiowheel.loop.new_event_loop())``: the documented one-liner. The
    app asks itself for a page, then stops the server as Ctrl+C would (``GracefulExit``)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    seen: dict[str, Any] = {}
    client: list[asyncio.Task[None]] = []

    async def ask_then_exit() -> None:
        timeout = aiohttp.ClientTimeout(total=DEADLINE)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(f"http://127.0.0.1:{port}/") as response,
        ):
            seen.update(await response.json())
        raise web.GracefulExit

    async def start_client(application: web.Application) -> None:
        client.append(asyncio.create_task(ask_then_exit()))

    application = aiohttp_app()
    application.on_startup.append(start_client)
    loop = factory(base)()
    try:
        web.run_app(
            application, sock=listener, loop=loop, print=None, access_log=None, handle_signals=False
        )
    finally:
        asyncio.set_event_loop(None)  # run_app set it, then closed it
        listener.close()
    assert loop.is_closed()
    assert isinstance(client[0].exception(), web.GracefulExit)
    assert (seen["loop"], seen["wheel"]) == (LOOP_CLASS[base], True)


# -- hypercorn ---------------------------------------------------------------------------------


def test_hypercorn_serve_on_the_wheel_loop_closes_idle_keep_alive(base: str) -> None:
    """``hypercorn.asyncio.serve`` on a wheel loop (its command line picks only its own loops):
    the app runs on the wheel loop, and hypercorn's keep-alive timeout closes an idle
    connection from the wheel, never before ``keep_alive_timeout`` after the last request."""

    async def main() -> None:
        loop = wheel_loop()
        listener = socket.create_server(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        config = HypercornConfig()
        config.bind = [f"fd://{listener.detach()}"]  # hypercorn owns (and closes) it now
        config.keep_alive_timeout = KEEP_ALIVE
        config.errorlog = None
        stop = asyncio.Event()
        serving = asyncio.create_task(hypercorn_serve(app, config, shutdown_trigger=stop.wait))
        try:
            # hypercorn accepts as soon as it serves: connect, then the first answer says so.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            report = await get(reader, writer)
            assert (report["loop"], report["wheel"]) == (LOOP_CLASS[base], True)
            before = loop.wheel_stats()
            last_request = loop.time()
            await get(reader, writer)  # makes no timer of the app's own
            await closed_by_server(reader)
            assert loop.time() - last_request >= KEEP_ALIVE
            # hypercorn's keep-alive: an asyncio.wait_for that times out, on the wheel.
            assert loop.wheel_stats().fired > before.fired
            writer.close()
        finally:
            stop.set()
            await serving

    run_on_wheel(base, main)


# -- gunicorn ----------------------------------------------------------------------------------


def test_gunicorn_with_a_uvicorn_worker_on_the_wheel_loop(base: str) -> None:
    """``gunicorn -k served.WheelUvicornWorker served:app``: uvicorn's gunicorn worker
    (``uvicorn-worker``) with its ``CONFIG_KWARGS["loop"]`` set to the wheel loop's factory."""
    worker = "served.WheelUVLoopUvicornWorker" if base == "uvloop" else "served.WheelUvicornWorker"
    command = [sys.executable, "-m", "gunicorn", "-k", worker, "--workers", "1"]
    command += ["--bind", "127.0.0.1:0", "--graceful-timeout", "5", "served:app"]
    listening = r"Listening at: http://127\.0\.0\.1:(?P<port>\d+)"
    with server_process(command, listening, cwd=TESTS) as port:
        # The worker boots after the arbiter listens: retry until it answers.
        deadline = time.monotonic() + DEADLINE
        while True:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE)
            try:
                report = http_get(port, connection, "/sleep")
                break
            except (ConnectionError, http.client.RemoteDisconnected):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
            finally:
                connection.close()
    assert (report["loop"], report["wheel"]) == (LOOP_CLASS[base], True)
    assert report["stats"]["wheel_timers"] >= 1


# -- anyio -------------------------------------------------------------------------------------


def test_anyio_runs_on_the_wheel_loop_through_backend_options(base: str) -> None:
    """``anyio.run(..., backend_options={"loop_factory": new_event_loop})``: anyio's timeouts
    and a TCP round trip through anyio's streams, on the wheel."""

    async def main() -> dict[str, Any]:
        loop = wheel_loop()
        before = loop.wheel_stats()

        async def answer(stream: anyio.abc.SocketStream) -> None:
            async with stream:
                await stream.send(await stream.receive())

        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        async with listener, anyio.create_task_group() as group:
            group.start_soon(listener.serve, answer)
            port = listener.extra(anyio.abc.SocketAttribute.local_port)
            with anyio.fail_after(DEADLINE):  # on the wheel, cancelled on exit
                async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                    await stream.send(b"ping")
                    assert await stream.receive() == b"ping"
            await anyio.sleep(0.01)  # on the wheel, fires
            group.cancel_scope.cancel()
        after = loop.wheel_stats()
        return {
            "loop": type(loop).__name__,
            "cancelled": after.cancelled - before.cancelled,
            "fired": after.fired - before.fired,
        }

    result = anyio.run(main, backend="asyncio", backend_options={"loop_factory": factory(base)})
    assert result["loop"] == LOOP_CLASS[base]
    assert result["cancelled"] >= 1
    assert result["fired"] >= 1
