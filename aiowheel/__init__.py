"""aiowheel: an asyncio-native timer service on a hierarchical timing wheel.

Layers, each importing only from itself and the ones above it in this list, with no import
cycle (``tests/test_layers.py`` checks it, and holds the layer of every module):

* the shared contract: :mod:`aiowheel._checks` (every check of a user's input and its message),
  :mod:`aiowheel._defaults` (the default tick and wheel size), :mod:`aiowheel._lateness` (the
  lateness histogram's buckets) and :mod:`aiowheel.exceptions`;
* the twins: the pure wheel :mod:`aiowheel._wheel` (:class:`HierarchicalWheel`) and cores
  (:mod:`aiowheel._timercore`, ``_loopcore``, ``_idlecore``), their compiled twins (one
  extension each: :mod:`aiowheel._cwheel`, ``_ctimercore``, ``_cloopcore``, ``_cidlecore``; see
  :data:`aiowheel._impl.TWINS`), the event-loop adapters of :mod:`aiowheel._backends`, and the
  host interface :class:`TimerHost` (:mod:`aiowheel._host`: what a feature may ask of its
  Timer), and the twins' contract :mod:`aiowheel._contract` (one Protocol per twin, which mypy
  holds both twins to);
* :mod:`aiowheel._impl`, which selects one implementation (compiled or pure); every layer below
  reaches the twins through it;
* the Timer layer: :mod:`aiowheel.timer` -- one wheel bound to a running event loop
  (:class:`Timer`) -- and :mod:`aiowheel.timeouts`, the Timer's timeouts;
* features built on the Timer: idle expiry (:mod:`aiowheel.idle`) and the wheel-backed event loop
  (:mod:`aiowheel.loop`);
* edges: the command line, the demo, test support and the Spark pipeline (and, outside the
  package, examples and benchmarks).

The public API is this package's ``__all__`` and three modules of their own: :mod:`aiowheel.loop`
(the wheel-backed event loop, not imported here), :mod:`aiowheel.testing` and
:mod:`aiowheel.spark`; each public name has one home (``tests/test_public_api.py`` pins them).

:data:`IMPLEMENTATION` names the implementation this process runs: ``"compiled"`` (the Cython
extensions, built at install time where a C compiler is found) or ``"pure"`` (the pure-Python
twins: no compiler at install time, or ``AIOWHEEL_NO_EXTENSIONS`` set). Both behave the same;
quote it in bug reports (``python -m aiowheel --version`` prints it).
"""

from aiowheel._host import TimerHost
from aiowheel._impl import IMPLEMENTATION, Entry, HierarchicalWheel
from aiowheel.exceptions import JobCancelled, PendingLimitError
from aiowheel.idle import IdleTimeouts
from aiowheel.timeouts import Timeout
from aiowheel.timer import Job, LatenessHistogram, Timer, TimerHandle, TimerStats

__all__ = [
    "IMPLEMENTATION",
    "Entry",
    "HierarchicalWheel",
    "IdleTimeouts",
    "Job",
    "JobCancelled",
    "LatenessHistogram",
    "PendingLimitError",
    "Timeout",
    "Timer",
    "TimerHandle",
    "TimerHost",
    "TimerStats",
]
__version__ = "0.1.0"
