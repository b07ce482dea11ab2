"""Real code, unchanged, on the wheel loop: asyncio, websockets, anyio and the idle-expiry
example.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import subprocess
import sys

import pytest
from loop_support import REPO, run
from support import HANG, VirtualLoop

import aiowheel
import aiowheel._impl
import aiowheel.loop
from aiowheel.loop import WheelLoop, new_event_loop, new_uvloop_event_loop

# Every test on both implementations of the loop core, in one pytest run: a loop made without
# implementation= holds the one the fixture names (see conftest.py).
pytestmark = pytest.mark.usefixtures("implementation")


# -- real code, unchanged, on the wheel loop ------------------------------------------------------


async def asyncio_patterns() -> aiowheel.loop.WheelStats:
    """sleep, timeout, wait_for and TaskGroup, the way applications use them."""
    loop = asyncio.get_running_loop()
    assert isinstance(loop, WheelLoop)
    started = loop.time()
    await asyncio.sleep(0.01)
    assert loop.time() >= started + 0.01

    async with asyncio.timeout(HANG):  # a bound on a hang only: the machine may be loaded
        await asyncio.sleep(0.005)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await asyncio.sleep(10)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(10) as scope:
            scope.reschedule(loop.time() + 0.01)
            await asyncio.sleep(10)

    assert await asyncio.wait_for(asyncio.sleep(0.005, "in time"), timeout=HANG) == "in time"
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(asyncio.sleep(10), timeout=0.01)

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(asyncio.sleep(0.005 * i, i)) for i in range(1, 6)]
    assert [task.result() for task in tasks] == [1, 2, 3, 4, 5]

    async def fail_soon() -> None:
        await asyncio.sleep(0.01)
        raise LookupError("boom")

    with pytest.raises(ExceptionGroup) as caught:
        async with asyncio.TaskGroup() as group:
            sleepers = [group.create_task(asyncio.sleep(60)) for _ in range(10)]
            group.create_task(fail_soon())
    assert caught.group_contains(LookupError)
    assert all(task.cancelled() for task in sleepers)
    # The cancelled sleepers' timers left the wheel at once.
    assert loop.wheel_stats().pending == 0
    return loop.wheel_stats()


def test_asyncio_patterns_run_unchanged(use_uvloop: bool) -> None:
    stats = run(asyncio_patterns(), uvloop=use_uvloop)
    assert stats.wheel_timers >= 15
    assert stats.cancelled >= 10


def test_asyncio_patterns_in_virtual_time() -> None:
    with asyncio.Runner(loop_factory=VirtualLoop) as runner:
        stats = runner.run(asyncio_patterns())
    assert stats.wheel_timers >= 15


def test_asyncios_runner_takes_a_loop_maker_with_its_options_bound(use_uvloop: bool) -> None:
    # The documented way to run a main: asyncio's Runner with the loop maker as its factory,
    # options bound with functools.partial, debug the Runner's own.
    async def main() -> tuple[float, float, bool, str]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, WheelLoop)
        await asyncio.sleep(0.005)
        return loop.wheel.tick, loop.min_delay, loop.get_debug(), type(loop).__name__

    factory = functools.partial(
        new_uvloop_event_loop if use_uvloop else new_event_loop, tick=0.002, min_delay=0.01
    )
    with asyncio.Runner(loop_factory=factory, debug=True) as runner:
        tick, min_delay, debug, name = runner.run(main())
    assert (tick, min_delay, debug) == (0.002, 0.01, True)
    assert name == ("WheelUVLoop" if use_uvloop else "WheelEventLoop")


def test_websockets_keepalive_pings_go_through_the_wheel(use_uvloop: bool) -> None:
    from websockets.asyncio.client import ClientConnection, connect
    from websockets.asyncio.server import ServerConnection, serve

    pongs = {"client": 0, "server": 0}

    # Observers only: they count the pongs that answer a keepalive ping, then defer to
    # websockets. (Latency would not do: uvloop's clock counts whole milliseconds.)
    class CountingClientConnection(ClientConnection):
        def acknowledge_pings(self, data: bytes) -> None:
            pongs["client"] += data in self.pending_pings
            super().acknowledge_pings(data)

    class CountingServerConnection(ServerConnection):
        def acknowledge_pings(self, data: bytes) -> None:
            pongs["server"] += data in self.pending_pings
            super().acknowledge_pings(data)

    async def echo(websocket: ServerConnection) -> None:
        async for message in websocket:
            await websocket.send(message)

    async def main() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, WheelLoop)
        # A pong may be late on a loaded machine: the timeout only ends a dead connection.
        keepalive = {"ping_interval": 0.02, "ping_timeout": HANG}
        async with serve(
            echo, "127.0.0.1", 0, create_connection=CountingServerConnection, **keepalive
        ) as server:
            port = server.sockets[0].getsockname()[1]
            async with connect(
                f"ws://127.0.0.1:{port}",
                create_connection=CountingClientConnection,
                open_timeout=HANG,
                **keepalive,
            ) as client:
                before = loop.wheel_stats()
                # About ten ping intervals; longer only if the machine is very slow.
                give_up = loop.time() + HANG
                while min(pongs.values()) < 4 and loop.time() < give_up:
                    await asyncio.sleep(0.05)
                await client.send("hello")
                assert await client.recv() == "hello"
                after = loop.wheel_stats()
                return (
                    after.wheel_timers - before.wheel_timers,
                    after.cancelled - before.cancelled,
                )

    wheel_timers, cancelled = run(main(), uvloop=use_uvloop)
    assert pongs["client"] >= 4 and pongs["server"] >= 4
    # Each ping is a sleep and a ping timeout, on both sides; each pong cancelled a timeout.
    assert wheel_timers >= 12
    assert cancelled >= 6


def test_anyio_runs_on_the_wheel_loop(use_uvloop: bool) -> None:
    import anyio

    async def main() -> aiowheel.loop.WheelStats:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, WheelLoop)
        await anyio.sleep(0.01)
        with anyio.move_on_after(0.01) as scope:
            await anyio.sleep(10)
        assert scope.cancelled_caught
        with pytest.raises(TimeoutError), anyio.fail_after(0.01):
            await anyio.sleep(10)
        async with anyio.create_task_group() as group:
            for _ in range(5):
                group.start_soon(anyio.sleep, 0.005)
        return loop.wheel_stats()

    stats = anyio.run(
        main,
        backend="asyncio",
        backend_options={"loop_factory": new_uvloop_event_loop if use_uvloop else new_event_loop},
    )
    assert stats.wheel_timers >= 8
    assert stats.pending == 0


def test_idle_expiry_example_runs_unchanged(use_uvloop: bool) -> None:
    """examples/idle_tcp_server.py's self-test (an aiowheel.Timer on this loop, a server and
    two clients on 127.0.0.1), run as it is, on the wheel loop."""
    spec = importlib.util.spec_from_file_location(
        "idle_tcp_server", REPO / "examples" / "idle_tcp_server.py"
    )
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)

    async def main() -> tuple[int, aiowheel.loop.WheelStats]:
        # The talker's lines come timeout / 3 apart: 0.33 s of margin for a loaded machine.
        code = await example.serve(0, timeout=0.5, duration=5.0, self_test=True)
        loop = asyncio.get_running_loop()
        assert isinstance(loop, WheelLoop)
        return code, loop.wheel_stats()

    code, stats = run(main(), uvloop=use_uvloop)
    assert code == 0
    assert stats.wheel_timers > 0 and stats.pending == 0


def test_benchmark_quick_run() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_loop.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "asyncio+wheel" in result.stdout
