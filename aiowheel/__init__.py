"""aiowheel: an asyncio-native timer service on a hierarchical timing wheel.

Layers, each importing only from the ones above it in this list:

* :mod:`aiowheel.wheel` -- the pure data structure (:class:`HierarchicalWheel`);
* :mod:`aiowheel.timer` -- one wheel bound to a running event loop (:class:`Timer`);
* features built on the Timer (idle expiry, timeouts, the wheel-backed event loop);
* edges: the command line, examples, benchmarks and the Spark pipeline.
"""

from aiowheel._impl import Entry, HierarchicalWheel
from aiowheel.exceptions import JobCancelled, PendingLimitError
from aiowheel.idle import IdleTimeouts
from aiowheel.loop import WheelLoop, WheelStats, loop_factory, new_event_loop, run
from aiowheel.timeouts import Timeout
from aiowheel.timer import Job, Timer, TimerHandle, TimerStats

__all__ = [
    "Entry",
    "HierarchicalWheel",
    "IdleTimeouts",
    "Job",
    "JobCancelled",
    "PendingLimitError",
    "Timeout",
    "Timer",
    "TimerHandle",
    "TimerStats",
    "WheelLoop",
    "WheelStats",
    "loop_factory",
    "new_event_loop",
    "run",
]
__version__ = "0.1.0"
