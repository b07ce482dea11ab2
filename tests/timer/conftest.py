"""The Timer's tests (:mod:`aiowheel.timer` and the core it holds), one concept per module.

Every async test runs three times (see ``tests/conftest.py``): asyncio on a virtual clock, uvloop
in real time, trio on ``MockClock``; and each module runs on both implementations (the
``implementation`` fixture). In virtual time the assertions are exact: a callback due at
``when`` with tick ``t`` sees ``when <= timer.time() < when + t``. On uvloop (real time) the
tests use delays of at most 50 ms and assert only order, never-early and completion, never an
upper time bound; tests that need long waits or exact times ask for the ``virtual_time``
fixture.

A handy synchronisation point: ``await timer.sleep_until(when)`` returns only after every timer
due at or before ``when`` and scheduled before the sleep has run, because the sleep is itself a
wheel timer and due timers run in (deadline, scheduling order).

The modules: ``test_core.py`` (the Timer core alone, driven by hand, and the rule it arms its
driver by), ``test_callbacks.py`` (on time, in order, from other callbacks), ``test_context.py``
(contexts and errors), ``test_cancel.py``, ``test_sleep.py``, ``test_input.py`` (what is
refused), ``test_jobs.py`` (``schedule``), ``test_lifecycle.py`` (entering and closing),
``test_driver.py`` (when the driver wakes), ``test_stats.py`` (stats, len, repr);
``tests/test_backends.py`` has what differs by backend and ``tests/faults/`` the
interrupts and ``max_pending`` limits, as fault tables.
"""
