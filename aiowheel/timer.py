"""The Timer: one hierarchical wheel bound to a running event loop.

This module owns the single driver coroutine, the jobs (:class:`Job`), the Timer's lifecycle and
its statistics. The hot path -- ``call_later``/``call_at``, the handles they return
(:class:`TimerHandle`), cancellation and the dispatch of a due batch -- is the Timer's core, which
the Timer holds (one per Timer) and drives through the core's public methods: pure Python in
:mod:`aiowheel._timercore`, with a compiled twin; :mod:`aiowheel._impl` declares both, and a
Timer runs the selected implementation unless told otherwise (``implementation=``). What
differs between event loops (reading the clock, sleeping, spawning a task, reporting an error)
lives in :mod:`aiowheel._backends`, one small adapter per loop. The features built on the Timer
(idle expiry, timeouts) use it through :class:`TimerHost`, the few public methods listed there.

How the driver works: it sleeps until the wheel's earliest non-empty bucket expires, advances the
wheel to the loop's current time, runs what is due in (deadline, scheduling order), and sleeps
again. On asyncio and uvloop each such pass runs from the callback of the loop timer armed for
it, in the loop iteration it fires in (callbacks run outside any task, as ``loop.call_at``'s
do), while the driver coroutine sleeps until the Timer closes; on trio the coroutine runs them.
Adding a timer re-arms the driver's wake-up only when the timer is earlier than the time
already armed, so re-arming costs one loop timer, not one per timer, and nothing ticks
periodically: with every timer an hour away the driver does not wake at all. The loop may wake
the driver early (asyncio by up to its clock resolution, uvloop by up to about a millisecond);
the wheel only releases what is due at the loop's current time, so nothing ever runs early.

Guarantees:

* never early: a callback never runs before its ``when()``;
* due callbacks run in (deadline, scheduling order), cascaded or not;
* at most once: a handle runs once, or never if cancelled first -- also when an earlier callback
  of the same batch cancels it;
* a cancelled timer leaves the wheel at once, and its callback and arguments are released (so
  are a callback's once it has run);
* callbacks scheduled from a callback run in a later pass, even when already due, so a callback
  that schedules itself cannot starve the loop;
* an error stops nothing: a callback's (any BaseException but an interrupt, as asyncio's
  ``Handle._run``) goes to the exception handler, a job's to whoever awaits the job;
* an interrupt (KeyboardInterrupt, SystemExit) from a callback, a job or the exception handler
  leaves the event loop once, as from a loop callback, and the Timer keeps working: on asyncio
  and uvloop the driver is re-armed as the interrupt leaves, and the rest of its batch (due at
  once) and every later timer run when the application carries on. trio has no loop to carry
  on: the interrupt ends the block that entered the Timer (bare, not in an exception group),
  which closes the Timer;
* ``max_pending`` refuses new work at the call that asks for it (PendingLimitError); the feature
  layers' own re-filing of work already accepted (idle keys, timeouts moved later) is never
  refused, so it may take the count past the limit by a bounded number of entries;
* ``aclose()`` works from any task of the loop and never cancels the block that entered the
  Timer; from inside the driver's pass (a task started eagerly, with Python 3.12's
  ``asyncio.eager_task_factory``, runs there) it also cancels the rest of the pass's batch:
  nothing of the Timer runs once it is closed.

Not thread-safe, like the event loop itself: from another thread use
``loop.call_soon_threadsafe(timer.call_later, delay, callback)``.

Close every Timer (leave its ``async with`` block, or ``await timer.aclose()``): with the compiled
core, pending handles are not tracked by the garbage collector, so a Timer dropped while running
and never closed keeps what its pending callbacks reference alive until the interpreter exits.
(``asyncio.run`` cancels leftover tasks, which closes their Timers.)
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import math
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass
from functools import partial
from types import CoroutineType, TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    Generic,
    Literal,
    NoReturn,
    SupportsFloat,
    SupportsIndex,
    TypeVar,
    final,
)

import anyio

from aiowheel import _impl
from aiowheel._backends import Backend, Cancellable, current_backend
from aiowheel._checks import (
    CLOSED,
    NOT_RUNNING,
    check_count,
    check_deadline,
    deadline_after,
    not_copyable,
    not_running,
)
from aiowheel._defaults import DEFAULT_TICK, DEFAULT_WHEEL_SIZE
from aiowheel._impl import TimerHandle
from aiowheel._lateness import LATENESS_BOUNDS
from aiowheel.timeouts import Timeout

if TYPE_CHECKING:
    from aiowheel._backends import CancelScope
    from aiowheel._contract import TimerCore

__all__ = [
    "Job",
    "LatenessHistogram",
    "Timer",
    "TimerHandle",
    "TimerStats",
]

T = TypeVar("T")

logger = logging.getLogger("aiowheel")


@dataclass(frozen=True, slots=True)
class LatenessHistogram:
    """How late the Timer's callbacks started, counted in fixed buckets: ``Timer.stats().lateness``.

    A callback's lateness is the Timer's clock as the callback is about to start, minus its
    ``when()``: never negative (never early), under a tick from the wheel's side, more when the
    event loop was busy elsewhere or earlier callbacks of the same pass took long. Every callback
    and job the Timer started is counted once (``count`` equals ``TimerStats.fired``).

    The buckets are the same for every Timer, whatever its tick: 1-2-5 per decade from 10 µs to
    10 s, then one for everything beyond, so that histograms of several Timers or processes add
    up. The clock is read when the driver's pass starts and again before every 16th callback of
    it, not before each: a callback held up by earlier ones of its pass is measured from a reading
    at most 15 callbacks old, so its lateness may be understated by the time those took.
    """

    buckets: tuple[tuple[float, int], ...]
    """``(upper bound in seconds, count)`` per bucket, ascending; the last bound is ``math.inf``.
    A bucket counts the lateness above the previous bound and at most its own (the first: at
    most its own). The counts are per bucket, not cumulative: see :meth:`cumulative`."""
    sum: float
    """The sum of every counted lateness, in seconds (with ``count``, the mean)."""

    @property
    def count(self) -> int:
        """Callbacks counted: the sum of the buckets' counts."""
        return sum(count for _, count in self.buckets)

    def cumulative(self) -> tuple[tuple[float, int], ...]:
        """``(upper bound, callbacks at most that late)`` per bucket: Prometheus' ``le`` buckets,
        the last (``math.inf``) being ``count``."""
        total = 0
        result = []
        for bound, count in self.buckets:
            total += count
            result.append((bound, total))
        return tuple(result)

    def quantile(self, q: float) -> float:
        """The upper bound of the bucket holding the ``q``-quantile of lateness (0 <= q <= 1): at
        least the fraction ``q`` of the callbacks were at most this late. ``math.inf`` if that
        bucket is the last; NaN when nothing was counted. ValueError for another ``q``."""
        if isinstance(q, bool) or not isinstance(q, int | float) or not 0 <= q <= 1:
            raise ValueError(f"q must be a number from 0 to 1, got {q!r}")
        total = self.count
        if not total:
            return math.nan
        for bound, at_most in self.cumulative():
            if at_most >= q * total and at_most:
                return bound
        raise AssertionError("the last bucket holds every callback")  # pragma: no cover

    def __str__(self) -> str:
        """The non-empty buckets in a line: ``"<=1 ms: 90, <=5 ms: 9, >10 s: 1"``."""
        shown = []
        finite = self.buckets[-2][0]
        for bound, count in self.buckets:
            if count:
                label = f"<={_seconds(bound)}" if bound <= finite else f">{_seconds(finite)}"
                shown.append(f"{label}: {count:,}")
        return ", ".join(shown) or "nothing counted"


def _seconds(bound: float) -> str:
    """A bucket bound, in the unit that makes it a whole number: 10 µs, 2 ms, 5 s."""
    for unit, scale in (("s", 1), ("ms", 1e3), ("µs", 1e6)):
        if bound * scale >= 1:
            return f"{bound * scale:.3g} {unit}"
    return f"{bound:g} s"


@dataclass(frozen=True, slots=True)
class TimerStats:
    """A snapshot of a Timer's counters, from ``Timer.stats()``.

    The facts a Timer shares with a wheel-backed loop come first and have the same names and
    meaning as in :class:`aiowheel.loop.WheelStats` (``pending``, ``fired``, ``cancelled``,
    ``driver_wakeups``, ``levels``); the rest is the Timer's own.
    """

    pending: int
    """Timers and jobs waiting now, not cancelled."""
    fired: int
    """Timers and jobs run (callbacks called, jobs started) since the Timer started."""
    cancelled: int
    """Timers and jobs cancelled before they ran, since the Timer started."""
    driver_wakeups: int
    """Times the driver woke to advance the wheel, since the Timer started."""
    levels: int
    """Levels the wheel has grown so far."""
    max_lateness: float
    """Largest lateness of a callback started, in seconds (see :class:`LatenessHistogram`)."""
    lateness: LatenessHistogram
    """How late each callback started, counted in buckets."""
    pending_per_level: tuple[int, ...]
    """Timers and jobs waiting on each wheel level, level 0 first (``levels`` numbers, adding up
    to ``pending``); those already due count on level 0."""


# A Job's states, in order: in the wheel; running (a plain fn in its call, a coroutine as a task);
# running as a task that cancel() asked to cancel; then done: finished (fn returned, or raised
# what result() has raised since or what is no Exception), failed (fn raised an Exception that
# result() has not raised yet: reported if the job dies so, as asyncio does for a task), or
# cancelled. One field for what would otherwise be three (the cancel request, whether result()
# was called): a pending job is two objects the cyclic collector walks, each field a reference
# it visits, and __del__ reads one field (1,050 instructions fewer per job, 3 %, in
# bench_timer's schedule on the pure core).
_PENDING, _RUNNING, _CANCELLING, _FINISHED, _FAILED, _CANCELLED = range(6)


@final
class Job(Generic[T]):
    """A function scheduled with ``Timer.schedule``; await it for the function's result.

    ``fn`` may be a plain function (called in the driver's pass) or a coroutine function (its
    coroutine runs as a task the Timer owns). ``await job`` returns fn's result or raises its
    exception. ``job.cancel()`` before the job fires makes awaiting it raise the backend's
    cancellation (``asyncio.CancelledError``, or :class:`~aiowheel.JobCancelled` on trio); on a
    running coroutine job it cancels the task. Cancelling a task while it awaits a job cancels the
    job, as awaiting an asyncio future does. Like a TimerHandle, it cannot be copied or pickled.
    """

    __slots__ = ("_done", "_fn", "_fn_args", "_handle", "_outcome", "_owner", "_state", "_task")

    _fn: Callable[..., Any]
    _fn_args: tuple[Any, ...]
    # The wheel entry that starts the job, filed by the Timer's call_at (its callback is
    # _start); spent once the job started or was cancelled.
    _handle: TimerHandle
    # The Timer, to spawn and report.
    _owner: Timer
    # _PENDING in the wheel, _RUNNING (_CANCELLING once cancel() asked its task to stop), then
    # _FINISHED, _FAILED or _CANCELLED (see their definition).
    _state: int
    # fn's result or exception once finished or failed.
    _outcome: Any
    # Set when the job is done; created by the first awaiter.
    _done: anyio.Event | None
    _task: Cancellable | None

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], timer: Timer):
        # Filed by the Timer once made (schedule, schedule_at), which sets _handle.
        self._fn = fn
        self._fn_args = args
        self._owner = timer
        self._state = _PENDING
        self._outcome = None
        self._done = None
        self._task = None

    def _start(self) -> None:
        # Called by the wheel entry, as Job._start(job). Running from here on: a plain fn that
        # cancels its own job cannot undo its call.
        self._state = _RUNNING
        try:
            result = self._fn(*self._fn_args)
        except BaseException as exc:
            self._fail(exc)
            if isinstance(exc, (SystemExit, KeyboardInterrupt)):
                raise
            return
        if isinstance(result, CoroutineType):  # inspect.iscoroutine, without its frame
            self._task = self._owner._backend.spawn(
                partial(self._run, result), contextvars.copy_context()
            )
            return
        # self._finish(_FINISHED, result), inline: every plain job ends here.
        self._state = _FINISHED
        self._outcome = result
        self._fn = _nothing
        self._fn_args = ()
        if self._done is not None:
            self._done.set()

    async def _run(self, coro: Coroutine[Any, Any, T]) -> None:
        try:
            result = await coro
        except self._owner._backend.cancelled_exc_class:
            self._finish(_CANCELLED, None)
            raise
        except BaseException as exc:
            self._fail(exc)
            if isinstance(exc, (SystemExit, KeyboardInterrupt)):
                raise
        else:
            self._finish(_FINISHED, result)

    def _fail(self, exc: BaseException) -> None:
        """fn raised ``exc``: an Exception is reported if nobody retrieves it (see _FAILED)."""
        self._finish(_FAILED if isinstance(exc, Exception) else _FINISHED, exc)

    def _finish(self, state: int, outcome: Any) -> None:
        # Cancelled also when aclose() cancelled its task; not when a cancel request came too
        # late or the coroutine swallowed it and returned, as a Task reports it.
        self._state = state
        self._outcome = outcome
        self._fn = _nothing
        self._fn_args = ()
        self._task = None
        if self._done is not None:
            self._done.set()

    def when(self) -> float:
        """The time (in the loop's clock) the job is scheduled to start at."""
        return self._handle.when()

    def cancel(self) -> None:
        """Cancel the job: remove it from the wheel if pending, cancel its task if running.
        Does nothing once the job is done."""
        state = self._state
        if state == _PENDING:
            self._handle.cancel()
            self._finish(_CANCELLED, None)
        elif state in (_RUNNING, _CANCELLING) and self._task is not None:
            self._state = _CANCELLING
            self._task.cancel()

    def cancelled(self) -> bool:
        """True if the job was cancelled: before it started, or as a running task (unless
        the coroutine swallowed the cancellation and returned)."""
        return self._state in (_CANCELLING, _CANCELLED)

    def done(self) -> bool:
        """True once the job finished, failed or was cancelled."""
        return self._state >= _FINISHED

    def result(self) -> T:
        """fn's result. Raises fn's exception, the cancellation if the job was cancelled, or
        RuntimeError if the job is not done yet."""
        state = self._state
        if state == _CANCELLED:
            raise self._owner._backend.job_cancelled()
        if state < _FINISHED:
            raise RuntimeError("Job is not done yet")
        self._state = _FINISHED  # retrieved: not reported when the job dies
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        return self._outcome  # type: ignore[no-any-return]

    def __await__(self) -> Generator[Any, None, T]:
        return self._wait().__await__()

    async def _wait(self) -> T:
        if self._state < _FINISHED:
            if self._done is None:
                self._done = anyio.Event()
            try:
                await self._done.wait()
            except BaseException:
                self.cancel()
                raise
        return self.result()

    def __reduce_ex__(self, protocol: SupportsIndex, /) -> NoReturn:
        """Refused: ``copy.copy``, ``copy.deepcopy`` and ``pickle`` raise TypeError, as for a
        TimerHandle."""
        raise not_copyable(type(self).__name__)

    def __del__(self) -> None:
        # As asyncio does for a task: a failure nobody looked at must not vanish silently.
        if self._state == _FAILED:
            self._owner._report(
                None, (), self._outcome, self, message="Job exception was never retrieved"
            )

    def __repr__(self) -> str:
        state = ("pending", "running", "running", "finished", "finished", "cancelled")[self._state]
        return f"<Job when={self.when()!r} {state} {self._fn!r}>"


# What a Job's wheel entry calls, with the job as its argument.
_START_JOB = Job._start

# Job(...) in two steps, for schedule's hot path: type.__call__'s dispatch to __init__ costs as
# much as the Python call itself in CPython 3.11 (the cores make their handles the same way).
_new_job = object.__new__
_init_job = Job.__init__


def _nothing(*args: Any) -> None:
    return None


# One text per method: the ones the core's own bound methods stand in for (or that forward to
# it) take the pure Timer core's docstrings.
@_impl.documented_by(_impl.PURE.timer.TimerCore, "call_later", "call_at", "__len__")
class Timer:
    """A hierarchical timing wheel driven on the running event loop.

    Use it as ``async with aiowheel.Timer() as timer:``; leaving the block (or ``aclose()``)
    cancels pending timers, cancels and waits for running jobs, and wakes awaiters of pending jobs
    with their cancellation. Its clock is the loop's (``loop.time()`` on asyncio and uvloop,
    ``trio.current_time()`` on trio).

    Args:
        tick: width of a level-0 slot, in seconds; a timer fires at most one tick late. A
            finite real number > 0, kept as an int or else as the nearest float
            (``timer.tick``).
        wheel_size: slots per wheel level, a whole number from 2 to ``2**40``.
        max_pending: if set, a whole number >= 1: scheduling while this many timers are pending
            raises :class:`PendingLimitError` (Netty's ``maxPendingTimeouts``). It limits new
            work; re-filing by :class:`~aiowheel.IdleTimeouts` and timeouts is never refused.
        exception_handler: called with asyncio's context dict (``message``, ``exception``,
            ``handle``) when a callback raises. Default: ``loop.call_exception_handler`` on
            asyncio, the ``aiowheel`` logger on trio.
        implementation: which implementation of the core runs the wheel and the dispatch,
            ``"compiled"`` or ``"pure"``; None (the default): :data:`aiowheel.IMPLEMENTATION`,
            the compiled one if it was built. Both behave the same; a test may run on each.
            ``"compiled"`` raises RuntimeError when it is not built (or
            ``AIOWHEEL_NO_EXTENSIONS`` is set).

    A Timer is the :class:`~aiowheel.TimerHost` of the features built on it (idle expiry,
    timeouts): the methods they use are public and listed there.
    """

    _backend: Backend

    def __init__(
        self,
        tick: SupportsFloat = DEFAULT_TICK,
        wheel_size: SupportsIndex = DEFAULT_WHEEL_SIZE,
        *,
        max_pending: SupportsIndex | None = None,
        exception_handler: Callable[[dict[str, Any]], object] | None = None,
        implementation: Literal["compiled", "pure"] | None = None,
    ) -> None:
        limit = None
        if max_pending is not None:
            limit = check_count(max_pending, "max_pending", 1, optional=True)
        twins = _impl.implementation_named(implementation)
        timer_core: TimerCore = twins.timer.TimerCore(tick, wheel_size, limit)
        self._implementation = twins.name
        self._core = timer_core
        self._max_pending = limit
        # As the wheel checked and converted them.
        self.tick: float = timer_core.tick
        self.wheel_size: int = timer_core.wheel_size
        self.exception_handler = exception_handler
        self._wakeups = 0
        # True once entered: _backend is set and aclose() must stop it.
        self._entered = False
        # The hot path without a frame of the Timer's: the core's methods (C methods on the
        # compiled twin), bound on the instance, stand in for the class's ones (documented by
        # the core's: see the decorator);
        # `time` is the loop's clock itself once the Timer starts.
        vars(self).update(
            call_later=timer_core.call_later,
            call_at=timer_core.call_at,
            refile_at=timer_core.refile_at,
            time=not_running,
        )

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> Timer:
        core = self._core
        if core.closed:
            raise RuntimeError("Timer is closed; create a new one")
        if core.running:
            raise RuntimeError("Timer is already running")
        backend = current_backend()
        self._backend = backend
        core.start(backend.time, backend.arm, self._report)
        vars(self)["time"] = backend.time
        self._entered = True
        await backend.start(self._drive, self._pass)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Cancel pending timers and jobs, cancel running jobs and wait for them. Idempotent.

        May be called from any task of the loop, not only the one that entered the Timer: a
        sibling task, or a coroutine job of this Timer (every other job is cancelled and waited
        for; the calling one runs on, and is cancelled only if still running when the block
        that entered the Timer is left). It never cancels that block, which runs on; on trio,
        leaving it exits the Timer's nursery. Called in the middle of the driver's pass (from a
        task started eagerly), it cancels the rest of that pass's batch with the pending timers.
        """
        for callback, args in self._core.close():
            if callback is _START_JOB:
                args[0]._finish(_CANCELLED, None)
        if self._entered:
            # Every call, not only the first: on trio only the entering task can exit the
            # nursery, after a close from another task.
            await self._backend.stop()

    @property
    def max_pending(self) -> int | None:
        """The limit on pending timers given to the constructor (None: no limit)."""
        return self._max_pending

    @property
    def closed(self) -> bool:
        """True once the Timer was closed."""
        return bool(self._core.closed)

    @property
    def implementation(self) -> Literal["compiled", "pure"]:
        """Which implementation this Timer's core is: ``"compiled"`` or ``"pure"``."""
        return self._implementation

    def _check_running(self) -> NoReturn:
        raise RuntimeError(CLOSED if self._core.closed else NOT_RUNNING)

    # -- scheduling ---------------------------------------------------------------------------

    def time(self) -> float:
        """The Timer's clock: the running loop's time. RuntimeError before the Timer starts."""
        return self._core.time()

    def call_later(
        self,
        delay: SupportsFloat,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> TimerHandle:
        return self._core.call_later(delay, callback, *args, context=context)  # type: ignore[return-value]  # either side's handle

    def call_at(
        self,
        when: SupportsFloat,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> TimerHandle:
        return self._core.call_at(when, callback, *args, context=context)  # type: ignore[return-value]  # either side's handle

    def schedule(self, delay: SupportsFloat, fn: Callable[..., Any], *args: Any) -> Job[Any]:
        """Run ``fn(*args)`` in ``delay`` seconds and return a :class:`Job` to await its result.

        ``fn`` may be a coroutine function: its coroutine then runs as a task the Timer owns.
        ``result = await timer.schedule(5, fetch)`` waits five seconds, then returns fetch's
        result. ``delay`` is any real number, as for :meth:`call_later`.
        """
        if not self._core.running:
            self._check_running()
        if not callable(fn):
            raise TypeError(f"a callable object was expected by schedule(), got {fn!r}")
        # Job(fn, args, self), its __init__ inline: the hot path of jobs.
        job: Job[Any] = _new_job(Job)
        job._fn = fn
        job._fn_args = args
        job._owner = self
        job._state = _PENDING
        job._outcome = job._done = job._task = None
        # New work, which max_pending may refuse (the job is then dropped unseen). The entry's
        # callback is the plain function Job._start with the job as its argument: no bound
        # method to make, and how aclose() tells jobs' entries.
        job._handle = self.call_later(delay, _START_JOB, job)
        return job

    def schedule_at(self, when: SupportsFloat, fn: Callable[..., Any], *args: Any) -> Job[Any]:
        """Like :meth:`schedule` with an absolute loop time (any real number, as for
        :meth:`call_at`)."""
        if not self._core.running:
            self._check_running()
        if not callable(fn):
            raise TypeError(f"a callable object was expected by schedule_at(), got {fn!r}")
        job: Job[Any] = _new_job(Job)
        _init_job(job, fn, args, self)
        job._handle = self.call_at(when, _START_JOB, job)  # as in schedule
        return job

    async def sleep(self, delay: SupportsFloat) -> None:
        """Sleep ``delay`` seconds on the wheel (never less; at most one tick more)."""
        if not self._core.running:
            self._check_running()
        await self.sleep_until(deadline_after(self.time(), delay))

    async def sleep_until(self, when: SupportsFloat) -> None:
        """Sleep until loop time ``when`` on the wheel. A time in the past still yields once.

        If the Timer closes first, raises what awaiting a pending job then raises
        (``asyncio.CancelledError``, or :class:`~aiowheel.JobCancelled` on trio).
        """
        deadline = check_deadline(when, "when")
        if not self._core.running:
            self._check_running()
        await self.schedule_at(deadline, _nothing)

    def __len__(self) -> int:
        return len(self._core)

    # -- timeouts -----------------------------------------------------------------------------
    # Entry points to aiowheel.timeouts (part of this layer; it does not import this module),
    # named as asyncio and anyio name them.

    def timeout(self, delay: SupportsFloat | None) -> Timeout:
        """``async with timer.timeout(delay):`` cancels the block ``delay`` seconds from now and
        raises TimeoutError, like ``asyncio.timeout``; None: no deadline. The deadline is an
        entry on this Timer's wheel. See :class:`aiowheel.timeouts.Timeout`."""
        return Timeout(self, self._time_after(delay), fail=True)

    def timeout_at(self, when: SupportsFloat | None) -> Timeout:
        """Like :meth:`timeout` with a deadline in the Timer's clock, like
        ``asyncio.timeout_at``."""
        return Timeout(self, when, fail=True)

    def move_on_after(self, delay: SupportsFloat | None) -> Timeout:
        """Like :meth:`timeout` but without raising: the block just ends (anyio's and trio's
        ``move_on_after``); ``cancelled_caught`` tells whether the deadline cut it short."""
        return Timeout(self, self._time_after(delay), fail=False)

    def move_on_at(self, when: SupportsFloat | None) -> Timeout:
        """Like :meth:`move_on_after` with a deadline in the Timer's clock."""
        return Timeout(self, when, fail=False)

    def _time_after(self, delay: SupportsFloat | None) -> float | None:
        if delay is None:
            return None
        if not self._core.running:
            self._check_running()
        return deadline_after(self.time(), delay)

    # -- for the features built on the Timer: the TimerHost interface -------------------------

    def refile_at(
        self,
        when: SupportsFloat,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> TimerHandle:
        """``call_at`` for a feature's own bookkeeping, which ``max_pending`` never refuses.

        For filing again work the Timer already accepted, when the entry standing for it fires
        early: an idle key touched since its entry was filed, a Timeout whose deadline moved
        later (:mod:`aiowheel.idle`, :mod:`aiowheel.timeouts`). The limit refuses new work at
        the call that asks for it; refused here, inside the driver's pass, the work would be
        lost. Checks and errors as for :meth:`call_at`, without PendingLimitError.
        """
        return self._core.refile_at(when, callback, *args, context=context)  # type: ignore[return-value]  # either side's handle

    def run_now(self, callback: Callable[..., object], args: tuple[Any, ...]) -> None:
        """Call ``callback(*args)`` now, as the driver calls a due callback: its error is
        reported like a timer callback's, never raised. If it returns a coroutine (it is a
        coroutine function), the coroutine runs as a task the Timer owns, cancelled when the
        Timer closes, and its error is reported the same way -- any BaseException but an
        interrupt (KeyboardInterrupt, SystemExit, which propagate) and the task's cancellation.
        RuntimeError for a coroutine once the Timer is closed (it is closed unawaited).
        """
        try:
            result = callback(*args)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:  # as asyncio's Handle._run
            self._report(callback, args, exc)
            return
        if inspect.iscoroutine(result):
            if not self._core.running:
                result.close()
                self._check_running()
            self._backend.spawn(
                partial(self._await_reporting, result, callback, args),
                contextvars.copy_context(),
            )

    def open_cancel_scope(self) -> CancelScope:
        """Enter a cancel scope in the calling task: what a timeout cancels (see
        :mod:`aiowheel.timeouts`). RuntimeError if the Timer is not running or outside a task."""
        if not self._core.running:
            self._check_running()
        return self._backend.open_cancel_scope()

    # -- the driver ---------------------------------------------------------------------------

    async def _drive(self) -> None:
        # The one sleeping coroutine: on trio it runs every pass; on asyncio the passes run from
        # the loop timer the backend arms, and this only sleeps until the Timer closes.
        backend = self._backend
        while True:
            await backend.wait()
            self._pass()

    def _pass(self) -> None:
        """One wake of the driver: advance the wheel, run what is due, re-arm."""
        self._wakeups += 1
        core = self._core
        try:
            core.run_due()
        except (SystemExit, KeyboardInterrupt) as exc:
            # From a callback; the rest of its batch is back in the wheel, due at once. It
            # leaves the event loop as a loop callback's would, and the driver lives on,
            # re-armed as the interrupt leaves (until then the core counts as dispatching, so
            # nothing scheduled meanwhile arms it: the remainder of the batch cannot run before
            # the interrupt has left). A driver that died here would leave the Timer accepting
            # timers it never runs.
            self._backend.interrupt(exc, core.rearm)
        except BaseException:
            # Not a callback's error (those are reported, never raised): the clock's, say. The
            # rest of the batch is back in the wheel; re-arm so the Timer carries on, and let
            # the error reach the loop's exception handler (trio: end the driver's nursery).
            core.rearm()
            raise
        else:
            core.rearm()

    def _report(
        self,
        callback: object,
        args: tuple[Any, ...],
        exc: BaseException,
        handle: TimerHandle | Job[Any] | None = None,
        message: str | None = None,
    ) -> None:
        """Send the error of ``callback(*args)`` to the exception_handler or the backend, in
        asyncio's context dict shape."""
        if message is None:
            try:
                name = getattr(callback, "__qualname__", None) or repr(callback)
                message = f"Exception in callback {name}{args!r}"
            except Exception:  # a repr that raises must not lose the report
                message = f"Exception in callback {object.__repr__(callback)} (repr failed)"
        context: dict[str, Any] = {"message": message, "exception": exc}
        if handle is not None:
            context["handle"] = handle
        handler = self.exception_handler
        if handler is None:
            self._backend.report(context)
            return
        try:
            handler(context)
        except Exception:
            logger.exception("Exception in aiowheel exception_handler")

    async def _await_reporting(
        self, coro: Coroutine[Any, Any, object], callback: object, args: tuple[Any, ...]
    ) -> None:
        try:
            await coro
        except (SystemExit, KeyboardInterrupt):
            raise  # leaves the loop once, as from a plain callback (or ends the block on trio)
        except self._backend.cancelled_exc_class:
            raise  # the task's cancellation (the Timer closing): a task's own business
        except BaseException as exc:  # as a plain callback's, as asyncio's Handle._run
            self._report(callback, args, exc)

    # -- observability ------------------------------------------------------------------------

    def stats(self) -> TimerStats:
        """Counters since the Timer started, as an immutable snapshot.

        Cheap enough for a dashboard's scrape: O(levels * wheel_size) for ``pending_per_level``
        (a few hundred list lengths on the default wheel); counting goes on in every pass.
        """
        started, lateness_sum, max_lateness, cancelled = self._core.counters()
        pending_per_level = self._core.pending_per_level()
        return TimerStats(
            pending=len(self._core),
            fired=sum(started),  # per callback, also within a pass
            cancelled=cancelled,
            driver_wakeups=self._wakeups,
            levels=len(pending_per_level),
            max_lateness=max_lateness,
            lateness=LatenessHistogram(
                tuple(zip((*LATENESS_BOUNDS, math.inf), started, strict=True)),
                float(lateness_sum),
            ),
            pending_per_level=pending_per_level,
        )

    def __repr__(self) -> str:
        core = self._core
        state = "closed" if core.closed else "running" if core.running else "idle"
        return (
            f"<Timer tick={self.tick!r} wheel_size={self.wheel_size} {state} pending={len(self)}>"
        )
