"""The demo's parameters and its fixed constants."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass


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
