"""aiowheel: an asyncio-native timer service on a hierarchical timing wheel.

Layers, each importing only from the ones above it in this list:

* :mod:`aiowheel.wheel` -- the pure data structure (:class:`HierarchicalWheel`);
* :mod:`aiowheel.timer` -- one wheel bound to a running event loop (:class:`Timer`);
* features built on the Timer (idle expiry, timeouts, the wheel-backed event loop);
* edges: the command line, examples, benchmarks and the Spark pipeline.
"""

from aiowheel.exceptions import JobCancelled, PendingLimitError
from aiowheel.timer import Job, Timer, TimerHandle, TimerStats
from aiowheel.wheel import Entry, HierarchicalWheel

__all__ = [
    "Entry",
    "HierarchicalWheel",
    "Job",
    "JobCancelled",
    "PendingLimitError",
    "Timer",
    "TimerHandle",
    "TimerStats",
]
__version__ = "0.1.0"
