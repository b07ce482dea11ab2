"""The ``aiowheel demo``: an idle-expiring TCP server and a fleet of clients, checked end to end.

This package owns the demo the README leads with. In one process, on 127.0.0.1 only, it runs

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

The verdict (``judge``) is computed from what both sides recorded, in the loop's clock.
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

One concern per module: ``_config`` (the parameters and constants), ``_verdict`` (what is
recorded, and ``judge``), ``_server``, ``_fleet``, ``_run`` (the two together, and the status
line), ``_summary`` (the table) and ``_cli`` (the open-file limit, the arguments, ``main``).
"""

from aiowheel.demo._cli import main
from aiowheel.demo._config import DemoConfig
from aiowheel.demo._run import DemoReport, run_demo
from aiowheel.demo._summary import print_report
from aiowheel.demo._verdict import Verdict

# What a user of the demo from Python needs: a configuration, the run and its report, and the
# command line's own entry point. The parts (server, fleet, judge...) stay in their modules.
__all__ = ["DemoConfig", "DemoReport", "Verdict", "main", "print_report", "run_demo"]
