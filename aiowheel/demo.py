"""The ``aiowheel demo``: an idle-expiring TCP server and a fleet of clients, checked end to end.

This module owns the demo the README leads with. In one process, on 127.0.0.1 only, it runs

* the **server**: an asyncio streams server whose connections are tracked by one
  :class:`~aiowheel.idle.IdleTimeouts` on one :class:`~aiowheel.Timer`. Every line a client
  sends is a touch; a connection idle for ``timeout`` seconds is expired and the server closes
  it. A clean close by the client is a ``discard``;
* the **fleet**: simulated clients that connect at a steady rate (``CONNECT_RATE``, faster only
  if that would take more than a quarter of the run, slower if the event loop cannot keep up:
  at most ``CONNECTS_IN_FLIGHT`` at a time), say ``hello <id>`` (the server answers
  ``welcome``), then send a keepalive line about every ``keepalive`` seconds (uniformly within
  ``±jitter`` of it). A share of them goes silent at a random time -- stops sending but keeps
  its socket open, as a crashed peer behind a NAT does -- and waits for the server to close it.
  Who goes silent and when is a function of the seed. The clients' keepalive timers are plain
  loop timers, independent of the Timer under test.

While it runs, a status line shows connections, touches per second, expiries, the Timer's
lateness and the event loop's own lag; at the end a summary table, and a verdict.

The verdict (:func:`judge`) is computed from what both sides recorded, in the loop's clock.
Real time is involved, so each rule says exactly what it compares:

* **never early** -- every expiry happens at least ``timeout`` after the last touch the server
  made for that key (``last_touch`` is read just *before* ``touch()``, so this holds exactly,
  with no tolerance: the wheel rounds deadlines up and never fires before them);
* **talking clients are never expired** -- a client that never goes silent must not be expired
  before the demo's end. The configuration guarantees the margin: the longest keepalive
  interval, ``keepalive * (1 + jitter)``, must be at most half the timeout, so only an event
  loop stalled for more than the other half could expire one; the summary shows the loop's
  worst lag to tell the two apart;
* **silent clients are never missed** -- a silent client whose last packet went out at least
  ``timeout + tolerance`` before the end must have been expired within ``timeout + tolerance``
  of that packet. One that went silent later may or may not have been expired by the end; it is
  counted, not judged;
* **once** -- no key is expired twice (the server closes it on the first expiry);
* **the close arrives** -- a client the server expired at least ``tolerance`` before the end
  has seen its connection closed by the end; and no connection is closed by the server
  without an expiry;
* **everyone connected** -- a client that could not connect, or was still waiting to when the
  run ended, is a failure of the run.

Lifecycle. Before it starts, the open-file limit is checked (two descriptors per client): the
soft limit is raised to the hard limit if needed, and the fleet is scaled down, with a warning,
if even that is too low; the listen backlog is sized for the fleet. After ``duration`` seconds
the server stops tracking (``IdleTimeouts.close()``) and the clients stop, with no await in
between, so nothing expires during the teardown; then every socket and task is closed, each
wait bounded by ``TEARDOWN_TIMEOUT``. The demo needs ``rich`` (the ``cli`` extra) for its
output, and ``uvloop`` (the ``uvloop`` extra) only with ``--uvloop``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import random
import sys
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from aiowheel.idle import IdleTimeouts
from aiowheel.timer import Timer, TimerStats

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

__all__ = [
    "ClientRecord",
    "DemoConfig",
    "DemoReport",
    "Fleet",
    "IdleServer",
    "Verdict",
    "add_arguments",
    "config_from_args",
    "ensure_fd_limit",
    "judge",
    "main",
    "plan_clients",
    "print_report",
    "run_demo",
    "summary_table",
]

HOST = "127.0.0.1"
#: The server's answer to a client's hello, the only thing it ever sends.
WELCOME = b"welcome\n"
#: Clients connect at this rate (per second), or faster if the ramp would exceed a quarter of
#: the run: a burst of thousands of SYNs at once would overflow the listen backlog.
CONNECT_RATE = 500.0
#: At most this many connects are under way at once. On a machine too loaded for the rate, the
#: ramp slows down to what the loop completes, instead of piling up connects whose work then
#: stalls the loop (and every keepalive with it) for seconds.
CONNECTS_IN_FLIGHT = 256
#: How long one client may take to connect before it counts as a failure, in seconds.
CONNECT_TIMEOUT = 10.0
#: Each client costs two descriptors in this process: its own socket and the server's.
FDS_PER_CLIENT = 2
#: Descriptors kept free for stdio, the selector, the loop's self-pipe and the listener.
FD_HEADROOM = 64
#: Bound on each teardown wait, in seconds: the demo ends even if a peer misbehaves.
TEARDOWN_TIMEOUT = 5.0
#: How often the status line is refreshed, in seconds.
STATUS_PERIOD = 0.25
#: How often the event loop's lag is sampled, in seconds.
LAG_PERIOD = 0.05
#: Without a terminal (piped, in CI) the status is printed as a line this often instead.
PLAIN_STATUS_PERIOD = 2.0
#: At most this many failures are listed one by one; the rest are counted.
FAILURES_SHOWN = 10


# -- configuration ---------------------------------------------------------------------------


@dataclass(frozen=True)
class DemoConfig:
    """The demo's parameters; :meth:`check` explains any combination that cannot work."""

    clients: int = 2000
    """Simulated clients, each one TCP connection."""
    duration: float = 20.0
    """Seconds from the first connect until the clients stop."""
    timeout: float = 3.0
    """The server's idle timeout, in seconds."""
    keepalive: float = 1.0
    """Mean interval between a talking client's packets, in seconds."""
    jitter: float = 0.2
    """Each interval is drawn uniformly from ``keepalive * [1 - jitter, 1 + jitter]``."""
    silent_share: float = 0.1
    """Share of the clients that go silent at a random time."""
    tolerance: float = 1.5
    """How late an expiry (and the client's seeing the close) may be, in seconds."""
    tick: float = 0.001
    """The Timer's tick, in seconds."""
    seed: int | None = None
    """Seed of the plan (who goes silent, when); None picks one, printed in the summary."""
    uvloop: bool = False
    """Run on uvloop instead of asyncio's default loop."""

    def check(self) -> None:
        """Raise ValueError naming the first parameter that is out of range."""
        if self.clients < 1:
            raise ValueError(f"clients must be at least 1, got {self.clients}")
        for name in ("duration", "timeout", "keepalive", "tolerance", "tick"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"jitter must be in [0, 1), got {self.jitter!r}")
        if not 0 <= self.silent_share <= 1:
            raise ValueError(f"silent_share must be in [0, 1], got {self.silent_share!r}")
        if self.longest_interval > self.timeout / 2:
            raise ValueError(
                f"the longest keepalive interval, keepalive * (1 + jitter) = "
                f"{self.longest_interval:g} s, must be at most half the idle timeout "
                f"({self.timeout:g} s) so that a talking client is never expired; lower "
                f"--keepalive or --jitter, or raise --timeout"
            )
        if self.duration <= self.ramp + self.timeout + self.tolerance:
            raise ValueError(
                f"duration ({self.duration:g} s) must be longer than the connect ramp "
                f"({self.ramp:g} s) + timeout ({self.timeout:g} s) + tolerance "
                f"({self.tolerance:g} s), or no silent client could be judged"
            )

    @property
    def longest_interval(self) -> float:
        """The longest gap between two packets of a talking client, in seconds."""
        return self.keepalive * (1 + self.jitter)

    @property
    def ramp(self) -> float:
        """Seconds over which the clients' connects are spread."""
        return min(self.clients / CONNECT_RATE, self.duration / 4)


# -- what the demo records, and the verdict --------------------------------------------------


@dataclass(slots=True)
class ClientRecord:
    """Everything known about one simulated client, in the loop's clock (``loop.time()``).

    The client side writes ``connect_error``, ``last_sent`` and ``close_seen_at``; the server
    side writes ``last_touch``, ``expired_at`` and ``expiries``.
    """

    key: int
    connect_at: float
    """When the client starts connecting."""
    silent_at: float
    """From this time on the client sends nothing more; ``inf`` for a talking client."""
    connect_error: str | None = None
    last_sent: float | None = None
    """When the client wrote its last packet."""
    last_touch: float | None = None
    """When the server last touched this key (read just before ``touch()``)."""
    expired_at: float | None = None
    """When the server's ``on_expire`` first ran for this key."""
    expiries: int = 0
    close_seen_at: float | None = None
    """When the client saw the server close its connection."""

    @property
    def talking(self) -> bool:
        """True for a client that never goes silent."""
        return self.silent_at == math.inf


@dataclass(frozen=True)
class Verdict:
    """The outcome of :func:`judge`: counts for the summary and every failure found."""

    talking: int
    silent: int
    connected: int
    unconnected: int
    """Clients that had not connected (nor failed to) when the run ended."""
    talking_expired: int
    silent_due: int
    """Silent clients that went silent early enough to be judged."""
    silent_due_expired: int
    """... of which expired within ``timeout + tolerance``."""
    silent_not_due: int
    """Silent clients that went silent too close to the end to be judged."""
    silent_not_due_expired: int
    early: int
    expiries: int
    closes_seen: int
    idle_at_expiry: tuple[float, float] | None
    """The shortest and longest ``expired_at - last_touch`` over all expiries."""
    failures: tuple[str, ...] = field(default=())

    @property
    def passed(self) -> bool:
        """True if no rule was broken."""
        return not self.failures


def judge(
    records: Iterable[ClientRecord], *, timeout: float, tolerance: float, end: float
) -> Verdict:
    """Check what the server and the clients recorded against the rules in the module docstring.

    ``end`` is the loop time at which the clients stopped. Pure: no clock, no I/O.
    """
    failures: list[str] = []
    talking = silent = connected = talking_expired = 0
    silent_due = silent_due_expired = silent_not_due = silent_not_due_expired = 0
    early = expiries = closes_seen = 0
    idle_times: list[float] = []
    unconnected: list[int] = []
    for record in records:
        key = record.key
        if record.talking:
            talking += 1
        else:
            silent += 1
        if record.connect_error is not None:
            failures.append(f"client {key} could not connect: {record.connect_error}")
            continue
        if record.last_sent is None:
            unconnected.append(key)
            continue
        connected += 1
        expired_at = record.expired_at
        if record.close_seen_at is not None:
            closes_seen += 1
        if expired_at is None:
            if record.close_seen_at is not None:
                failures.append(f"client {key}: the server closed it without an expiry")
        else:
            expiries += 1
            if record.expiries > 1:
                failures.append(f"client {key} was expired {record.expiries} times")
            if record.last_touch is not None:
                idle = expired_at - record.last_touch
                idle_times.append(idle)
                if expired_at < record.last_touch + timeout:
                    early += 1
                    failures.append(
                        f"client {key} was expired early: {idle:.6f} s after its last packet "
                        f"reached the server, the timeout is {timeout:g} s"
                    )
            if expired_at + tolerance <= end and record.close_seen_at is None:
                failures.append(
                    f"client {key} was expired at least {tolerance:g} s before the end but had "
                    f"not seen the close by then"
                )
        if record.talking:
            if expired_at is not None and expired_at < end:
                talking_expired += 1
                failures.append(
                    f"talking client {key} was expired at {expired_at - record.connect_at:.3f} s "
                    f"after its start, {expired_at - record.last_sent:.3f} s after its last packet"
                )
            continue
        due_by = record.last_sent + timeout + tolerance
        if due_by <= end:
            silent_due += 1
            if expired_at is not None and expired_at <= due_by:
                silent_due_expired += 1
            elif expired_at is None:
                failures.append(
                    f"silent client {key} was missed: not expired {end - record.last_sent:.3f} s "
                    f"after its last packet (timeout {timeout:g} s + tolerance {tolerance:g} s)"
                )
            else:
                failures.append(
                    f"silent client {key} was expired late: "
                    f"{expired_at - record.last_sent:.3f} s after its last packet "
                    f"(timeout {timeout:g} s + tolerance {tolerance:g} s)"
                )
        else:
            silent_not_due += 1
            if expired_at is not None:
                silent_not_due_expired += 1
    if unconnected:
        shown = ", ".join(map(str, unconnected[:5])) + (", …" if len(unconnected) > 5 else "")
        failures.append(
            f"{len(unconnected):,} client(s) had not connected when the run ended ({shown})"
        )
    return Verdict(
        talking=talking,
        silent=silent,
        connected=connected,
        unconnected=len(unconnected),
        talking_expired=talking_expired,
        silent_due=silent_due,
        silent_due_expired=silent_due_expired,
        silent_not_due=silent_not_due,
        silent_not_due_expired=silent_not_due_expired,
        early=early,
        expiries=expiries,
        closes_seen=closes_seen,
        idle_at_expiry=(min(idle_times), max(idle_times)) if idle_times else None,
        failures=tuple(failures),
    )


def plan_clients(config: DemoConfig, rng: random.Random, start: float) -> list[ClientRecord]:
    """One record per client: connects spread evenly over the ramp, a random silent share
    going silent at a uniformly random time between its connect and the end."""
    count = config.clients
    ramp = config.ramp
    silent = set(rng.sample(range(count), round(count * config.silent_share)))
    records = []
    for key in range(count):
        connect_at = start + ramp * key / count
        silent_at = rng.uniform(connect_at, start + config.duration) if key in silent else math.inf
        records.append(ClientRecord(key=key, connect_at=connect_at, silent_at=silent_at))
    return records


# -- the server ------------------------------------------------------------------------------


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


# -- the fleet -------------------------------------------------------------------------------


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


# -- running it ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DemoReport:
    """What :func:`run_demo` hands to the summary."""

    config: DemoConfig
    seed: int
    loop_name: str
    verdict: Verdict
    touches: int
    max_connections: int
    timer: TimerStats
    max_loop_lag: float
    elapsed: float


class _Status:
    """The status line: the event loop's worst lag, the touch rate over the last second, and
    the counters of the server, the fleet and the Timer."""

    def __init__(
        self, config: DemoConfig, timer: Timer, server: IdleServer, fleet: Fleet, silent: int
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._config = config
        self._timer = timer
        self._server = server
        self._fleet = fleet
        self._silent = silent
        self._start = self._loop.time()
        self.max_lag = 0.0
        # (time, touches so far), trimmed to the last second or so.
        self._samples: deque[tuple[float, int]] = deque()

    async def watch_lag(self) -> None:
        """Sleep LAG_PERIOD at a time, forever, keeping the worst oversleep."""
        loop = self._loop
        while True:
            before = loop.time()
            await asyncio.sleep(LAG_PERIOD)
            self.max_lag = max(self.max_lag, loop.time() - before - LAG_PERIOD)

    def _touch_rate(self) -> float:
        now = self._loop.time()
        touches = self._server.touches
        samples = self._samples
        samples.append((now, touches))
        while len(samples) > 2 and now - samples[1][0] >= 1.0:
            samples.popleft()
        first_time, first_touches = samples[0]
        span = now - first_time
        return (touches - first_touches) / span if span > 0 else 0.0

    def lines(self) -> tuple[str, str]:
        """The status now, in two short lines (also samples the touch rate)."""
        config = self._config
        server = self._server
        elapsed = min(self._loop.time() - self._start, config.duration)
        lateness = self._timer.stats().max_lateness
        return (
            f"{elapsed:4.1f}/{config.duration:g} s   "
            f"open connections {server.connections:,} (of {self._fleet.connected:,} made)   "
            f"touches/s {self._touch_rate():,.0f}",
            f"expired {server.expiries:,} ({self._silent:,} clients go silent)   "
            f"timer lateness max {lateness * 1000:.1f} ms   "
            f"loop lag max {self.max_lag * 1000:.0f} ms",
        )


async def run_demo(config: DemoConfig, console: Console) -> DemoReport:
    """Run the server and the fleet for ``config.duration`` seconds and judge the outcome."""
    config.check()
    seed = config.seed if config.seed is not None else random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    loop = asyncio.get_running_loop()
    began = time.monotonic()
    async with Timer(tick=config.tick) as timer:
        start = loop.time()
        records = plan_clients(config, rng, start)
        silent_total = sum(not record.talking for record in records)
        server = IdleServer(timer, config.timeout, records)
        port = await server.start(backlog=min(max(config.clients, 128), 65535))
        fleet = Fleet(records, port, config, rng)
        status = _Status(config, timer, server, fleet, silent_total)
        lag_task = loop.create_task(status.watch_lag(), name="demo loop lag")
        end = start + config.duration
        try:
            fleet.start()
            await _show_status(console, status, end)
            # The run is over: take its counters, then stop tracking and stop the clients at
            # once (no await in between), so that nothing expires and no client mistakes the
            # teardown for the server closing it.
            end = loop.time()
            stats = timer.stats()
            max_lag = status.max_lag
        finally:
            server.stop_tracking()
            fleet.stop()
            lag_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await lag_task
            await fleet.wait_closed()
            await server.close()
    verdict = judge(records, timeout=config.timeout, tolerance=config.tolerance, end=end)
    return DemoReport(
        config=config,
        seed=seed,
        loop_name=type(loop).__module__.split(".")[0],
        verdict=verdict,
        touches=server.touches,
        max_connections=server.max_connections,
        timer=stats,
        max_loop_lag=max_lag,
        elapsed=time.monotonic() - began,
    )


async def _show_status(console: Console, status: _Status, end: float) -> None:
    """Refresh the status until the loop's clock reaches ``end``: live on a terminal, as a
    plain line every PLAIN_STATUS_PERIOD seconds otherwise."""
    from rich.live import Live
    from rich.text import Text

    loop = asyncio.get_running_loop()
    if console.is_terminal:
        with Live(Text("\n".join(status.lines())), console=console, auto_refresh=False) as live:
            while loop.time() < end:
                await asyncio.sleep(min(STATUS_PERIOD, max(0.0, end - loop.time())))
                live.update(Text("\n".join(status.lines())), refresh=True)
        return
    next_line = loop.time() + PLAIN_STATUS_PERIOD
    while loop.time() < end:
        await asyncio.sleep(min(STATUS_PERIOD, max(0.0, end - loop.time())))
        lines = status.lines()  # sampled every STATUS_PERIOD, for the touch rate
        if loop.time() >= next_line:
            console.print("   ".join(lines), soft_wrap=True)
            next_line += PLAIN_STATUS_PERIOD
    console.print("   ".join(status.lines()), soft_wrap=True)


# -- the summary -----------------------------------------------------------------------------


def summary_table(report: DemoReport) -> Table:
    """The end-of-run table: what ran, what was checked, and whether each check passed."""
    from rich.table import Table

    config = report.config
    verdict = report.verdict
    ok, bad = "[green]ok[/]", "[bold red]FAIL[/]"

    def check(passed: bool) -> str:
        return ok if passed else bad

    due_after = config.timeout + config.tolerance
    table = Table(
        title="aiowheel demo",
        title_justify="left",
        caption=(
            f"* due: went silent at least timeout + tolerance ({due_after:g} s) before the "
            f"end, so it must have been expired within that time"
        ),
        caption_justify="left",
    )
    table.add_column("")
    table.add_column("")
    table.add_column("check")
    table.add_row("event loop", report.loop_name, "")
    table.add_row(
        "clients", f"{config.clients:,}: {verdict.talking:,} talking, {verdict.silent:,} silent", ""
    )
    table.add_row("connected", f"{verdict.connected:,}", check(verdict.connected == config.clients))
    table.add_row("most open at once", f"{report.max_connections:,}", "")
    rate = report.touches / config.duration
    table.add_row("touches", f"{report.touches:,} ({rate:,.0f}/s)", "")
    table.add_row("expiries", f"{verdict.expiries:,}", "")
    table.add_row(
        "talking clients expired",
        f"{verdict.talking_expired:,}",
        check(not verdict.talking_expired),
    )
    table.add_row(
        "silent clients due*",
        f"{verdict.silent_due:,}, {verdict.silent_due_expired:,} expired in time",
        check(verdict.silent_due_expired == verdict.silent_due),
    )
    table.add_row(
        "silent, not yet due*",
        f"{verdict.silent_not_due:,}, {verdict.silent_not_due_expired:,} expired",
        "not judged",
    )
    table.add_row("early expiries", f"{verdict.early:,}", check(not verdict.early))
    if verdict.idle_at_expiry is not None:
        shortest, longest = verdict.idle_at_expiry
        table.add_row(
            "idle time at expiry",
            f"{shortest:.3f} s to {longest:.3f} s",
            f"timeout {config.timeout:g} s",
        )
    table.add_row(
        "closes seen by clients", f"{verdict.closes_seen:,} of {verdict.expiries:,} expired", ""
    )
    stats = report.timer
    table.add_row(
        "timer",
        f"{stats.fired:,} fired, {stats.driver_wakeups:,} wake-ups",
        f"tick {config.tick * 1000:g} ms",
    )
    table.add_row("timer lateness max", f"{stats.max_lateness * 1000:.1f} ms", "")
    table.add_row("event loop lag max", f"{report.max_loop_lag * 1000:.0f} ms", "")
    table.add_row("seed", str(report.seed), "")
    table.add_row("run time", f"{report.elapsed:.1f} s", "")
    return table


def print_report(report: DemoReport, console: Console) -> None:
    """Print the summary table, the failures (if any) and a one-line verdict."""
    from rich.markup import escape

    config = report.config
    verdict = report.verdict
    console.print(summary_table(report))
    for failure in verdict.failures[:FAILURES_SHOWN]:
        console.print(f"  [red]✗[/] {escape(failure)}")
    if len(verdict.failures) > FAILURES_SHOWN:
        console.print(f"  … and {len(verdict.failures) - FAILURES_SHOWN:,} more")
    # A talking client can only be expired if the loop stalled longer than its margin.
    margin = config.timeout - config.longest_interval
    if verdict.talking_expired and report.max_loop_lag >= margin:
        console.print(
            f"  [yellow]the event loop stalled for {report.max_loop_lag:.2f} s, longer than "
            f"the keepalive margin ({margin:.2f} s): the machine is too loaded for "
            f"{config.clients:,} clients; try fewer --clients or a longer --timeout[/]"
        )
    if verdict.unconnected:
        console.print(
            f"  [yellow]{verdict.unconnected:,} clients were still waiting to connect at the "
            f"end: the machine is too loaded for {config.clients:,} clients; try fewer "
            f"--clients or a longer --duration[/]"
        )
    if verdict.passed:
        console.print(
            f"[bold green]PASS[/]: {verdict.connected:,} clients, no talking client expired, "
            f"{verdict.silent_due_expired:,}/{verdict.silent_due:,} due silent clients expired "
            f"in time, none early",
            soft_wrap=True,
        )
    else:
        console.print(f"[bold red]FAIL[/]: {len(verdict.failures):,} problem(s)")


# -- the command line ------------------------------------------------------------------------


def ensure_fd_limit(clients: int) -> tuple[int, str | None]:
    """Make room for ``clients`` connections (two descriptors each) under the open-file limit.

    Raises the soft limit to the hard limit if it is too low. Returns the number of clients
    that fit, and a message saying what was changed or why fewer clients fit (None if
    nothing needed saying).
    """
    needed = FDS_PER_CLIENT * clients + FD_HEADROOM
    try:
        import resource
    except ImportError:  # Windows: no RLIMIT_NOFILE to check
        return clients, None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return clients, None
    target = needed if hard == resource.RLIM_INFINITY else hard
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        if target >= needed:
            return clients, f"raised the open-file limit from {soft:,} to {target:,}"
        soft = target
    fitting = max(0, (soft - FD_HEADROOM) // FDS_PER_CLIENT)
    return fitting, (
        f"the open-file limit ({soft:,}) allows only {fitting:,} of {clients:,} clients "
        f"(each needs {FDS_PER_CLIENT} descriptors)"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the demo's description and options to ``parser``."""
    parser.description = (
        "Run an idle-expiring TCP server on 127.0.0.1 (aiowheel.IdleTimeouts on a Timer) "
        "against a fleet of simulated clients in the same process: most send a keepalive "
        "about every --keepalive seconds, a --silent-share of them goes silent at a random "
        "time. Shows a live status, then a summary, and checks that no talking client was "
        "expired and that every silent client was, never early and within --tolerance."
    )
    parser.epilog = "Exit status: 0 if every check passed, 1 if one failed, 2 if it could not run."
    default = DemoConfig()
    parser.add_argument(
        "--clients", type=int, default=default.clients, help="simulated clients (%(default)s)"
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=default.duration,
        help="seconds the clients run (%(default)s)",
    )
    parser.add_argument(
        "--timeout", type=float, default=default.timeout, help="idle timeout, s (%(default)s)"
    )
    parser.add_argument(
        "--keepalive",
        type=float,
        default=default.keepalive,
        help="mean keepalive interval of a talking client, s (%(default)s)",
    )
    parser.add_argument(
        "--jitter",
        type=float,
        default=default.jitter,
        help="keepalive intervals vary by ± this share (%(default)s)",
    )
    parser.add_argument(
        "--silent-share",
        type=float,
        default=default.silent_share,
        help="share of clients that go silent at a random time (%(default)s)",
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        default=default.tolerance,
        help="how late an expiry may be, s (%(default)s)",
    )
    parser.add_argument(
        "--tick", type=float, default=default.tick, help="the Timer's tick, s (%(default)s)"
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of the plan (random)")
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop")


def config_from_args(args: argparse.Namespace) -> DemoConfig:
    """The :class:`DemoConfig` the parsed options describe (checked)."""
    config = DemoConfig(
        clients=args.clients,
        duration=args.duration,
        timeout=args.timeout,
        keepalive=args.keepalive,
        jitter=args.jitter,
        silent_share=args.silent_share,
        tolerance=args.tolerance,
        tick=args.tick,
        seed=args.seed,
        uvloop=args.uvloop,
    )
    config.check()
    return config


def main(config: DemoConfig) -> int:
    """Run the demo and print its summary; 0 if every check passed, 1 if not, 2 if it could
    not run (a missing optional dependency, no descriptors)."""
    try:
        from rich.console import Console
    except ImportError:
        print(
            "aiowheel demo needs rich for its output: pip install 'aiowheel[cli]'",
            file=sys.stderr,
        )
        return 2
    console = Console(highlight=False)
    loop_factory = asyncio.new_event_loop
    if config.uvloop:
        try:
            import uvloop
        except ImportError:
            print(
                "aiowheel demo --uvloop needs uvloop: pip install 'aiowheel[uvloop]'",
                file=sys.stderr,
            )
            return 2
        loop_factory = uvloop.new_event_loop
    clients, note = ensure_fd_limit(config.clients)
    if clients < 1:
        print(f"aiowheel demo: {note}; cannot run", file=sys.stderr)
        return 2
    if clients < config.clients:
        print(f"aiowheel demo: warning: {note}", file=sys.stderr)
        config = replace(config, clients=clients)
    elif note is not None:
        console.print(note)
    console.print(
        f"aiowheel demo: {config.clients:,} clients on {HOST} for {config.duration:g} s, "
        f"keepalive {config.keepalive:g} s ± {config.jitter:.0%}, "
        f"{config.silent_share:.0%} go silent, idle timeout {config.timeout:g} s",
        soft_wrap=True,
    )
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        report = runner.run(run_demo(config, console))
    print_report(report, console)
    return 0 if report.verdict.passed else 1
