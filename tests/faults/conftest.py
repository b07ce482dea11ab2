"""Fault injection: what can go wrong around each public entry point, as tables, one table (or
two) per module.

Each table is one kind of fault; each row names what is done and, next to it, what must happen.
The promises of the README's guarantee table -- never early, at most once, nothing lost -- hold
in every row: after the fault the Timer either keeps working (a timer scheduled after it still
runs, nothing pending is left behind) or is closed and says so at the next use.

* :data:`RAISING` -- a callback, a job, an ``on_expire`` raising Exception, BaseException or
  CancelledError;
* :data:`INTERRUPTING` -- the same raising KeyboardInterrupt or SystemExit: on asyncio and uvloop
  the interrupt leaves the loop once and the Timer keeps working, as with ``loop.call_later``; on
  trio it ends the block that entered the Timer (bare, not in an exception group), which closes
  the Timer; next to it, a SystemExit leaves ``asyncio.Runner.run`` once;
* :data:`REENTRANT` -- calls from inside callbacks: cancel, schedule, touch, discard, close;
* :data:`LIMITS` -- ``max_pending`` reached from outside and inside the driver: new work is
  refused at the call that asks for it, the library's own re-filing never; next to it, every
  scheduling call refused with the message naming the limit, and the slots freed again;
* :data:`CLOSING` -- closing from every place a user could;
* :data:`EAGER_CLOSING` -- closing from a task that starts eagerly, in the middle of the
  driver's pass (Python 3.12's ``asyncio.eager_task_factory``): the rest of the batch never
  runs, and nothing of the library's own is reported;
* :data:`COPIES` -- copying or pickling a handle of the Timer or of the wheel loop: refused;
* :data:`BAD_STARTS` -- a virtual clock started at infinity, NaN or a non-number: refused;
* :data:`LOOP_FAULTS` -- the wheel loop used as a hostile user would (a clock patched by a test,
  an exception handler keeping handles, a loop dropped unclosed, a handle's context, numbers of
  every type, a ``min_delay`` below a tick): on each base, as the base loop itself behaves, or as
  the row says where asyncio is not the reference.

Every async row runs on asyncio in virtual time, uvloop (real time: delays of a few
milliseconds, and only order and outcome are asserted, never an upper time bound) and trio with
``MockClock``; the interrupt rows on asyncio and uvloop drive a loop by hand, because an
interrupt leaves ``run_until_complete``. No real sleeps beyond uvloop's milliseconds.
"""

from __future__ import annotations
