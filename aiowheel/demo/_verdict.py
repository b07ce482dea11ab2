"""What the demo records about each client, and the verdict computed from it."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiowheel.demo._config import DemoConfig

if TYPE_CHECKING:
    pass


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
