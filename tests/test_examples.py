"""Every script in examples/ runs as written and does what its docstring says.

Each example runs in a subprocess, as a user would run it, with small parameters, on 127.0.0.1
only. The examples check their own timing-sensitive outcomes (a silent client closed no earlier
than the timeout, a talking one never); these tests assert exit codes and output, never a
duration. An example whose output says which of two real-time deadlines came first (a block that
ends 90 ms before its timeout, say) runs unchanged but in virtual time (:data:`VIRTUAL_TIME`): on
a loaded machine a stall can put any two deadlines in one pass. A new example without a case
here fails :func:`test_every_example_has_a_case`.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
# Upper bound on one example's run: only stops a hang; these take a few seconds at most.
RUN_TIMEOUT = 120

# Example -> (arguments, lines its output must contain).
CASES: dict[str, tuple[list[str], list[str]]] = {
    "delayed_jobs.py": (
        [],
        [
            "1. await job -> 5",
            "2. await job -> 'report: 42 rows'",
            "3. jobs ran in deadline order: ['a', 'b', 'c']",
            "4. cancelled job: done=True, never ran",
            "5. await job raised ValueError('the job failed')",
            "6. after the Timer closed, the leftover job is done=True",
        ],
    ),
    "timeouts.py": (
        [],
        [
            "1. the slow call timed out after 0.1 s",
            "2. the fast call finished, expired=False",
            "3. within the budget: ['fast', 'medium'], cut short=True",
            "4. received [0, 1, 2, 3, 4], then the stream was idle for 0.1 s",
            "5. inner expired=True, outer expired=False",
            "6. 1000 timeouts were pending on the wheel at once, all released in time",
        ],
    ),
    "idle_tcp_server.py": (
        ["--self-test", "--timeout=1"],
        [
            "talker: talked for 3 s and was never closed",
            "quiet: the server said b'idle timeout, bye\\n'",
            "self-test passed",
        ],
    ),
    "websocket_idle.py": (
        ["--timeout=1", "--talkers=2", "--silent=2"],
        [
            "talker 0: talked for 3 s, never closed by the server",
            "talker 1: talked for 3 s, never closed by the server",
            "code 1000, reason 'idle timeout'",
            "all clients behaved as expected",
        ],
    ),
}


#: Examples run in virtual time: the script as written, with ``asyncio.run`` replaced by
#: :func:`aiowheel.testing.run`, so that their deadlines keep their order on a loaded machine.
VIRTUAL_TIME = {"timeouts.py"}
VIRTUAL_RUNNER = """
import asyncio, runpy, sys
import aiowheel.testing
asyncio.run = aiowheel.testing.run
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_every_example_has_a_case() -> None:
    assert sorted(path.name for path in EXAMPLES.glob("*.py")) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_runs(name: str) -> None:
    if name == "websocket_idle.py":
        pytest.importorskip("websockets")
    args, expected = CASES[name]
    runner = ["-c", VIRTUAL_RUNNER] if name in VIRTUAL_TIME else []
    result = subprocess.run(
        [sys.executable, *runner, str(EXAMPLES / name), *args],
        cwd=EXAMPLES.parent,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for line in expected:
        assert line in result.stdout
    assert result.stderr == ""


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_has_a_docstring_saying_how_to_run_it(name: str) -> None:
    source = (EXAMPLES / name).read_text()
    assert source.startswith('"""')
    assert f"python examples/{name}" in source


def test_idle_tcp_server_serves_a_real_client_then_stops_by_itself() -> None:
    """The interactive mode: a client's line is echoed, its silence ends the connection, and
    the server exits after --duration."""
    server = subprocess.Popen(
        [
            sys.executable,
            "-u",
            str(EXAMPLES / "idle_tcp_server.py"),
            "--timeout=0.3",
            "--duration=3",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        first = server.stdout.readline()
        match = re.match(r"serving on 127\.0\.0\.1:(\d+)", first)
        assert match, first
        port = int(match.group(1))

        async def client() -> tuple[bytes, bytes, bytes]:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"ping\n")
            echo = await reader.readline()
            goodbye = await reader.readline()
            rest = await reader.read()
            writer.close()
            await writer.wait_closed()
            return echo, goodbye, rest

        echo, goodbye, rest = asyncio.run(asyncio.wait_for(client(), RUN_TIMEOUT))
        assert (echo, goodbye, rest) == (b"ping\n", b"idle timeout, bye\n", b"")
        out, err = server.communicate(timeout=RUN_TIMEOUT)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert server.returncode == 0, out + err
    assert "idle for 0.3 s, closing" in out
    assert err == ""
