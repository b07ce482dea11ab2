"""The command line: the open-file limit, the arguments, and ``main``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from dataclasses import replace
from typing import TYPE_CHECKING

from aiowheel.demo._config import FD_HEADROOM, FDS_PER_CLIENT, HOST, DemoConfig
from aiowheel.demo._run import run_demo
from aiowheel.demo._summary import print_report

if TYPE_CHECKING:
    pass


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
    # A value out of range is a usage error of this command: reported by its own parser, with
    # its usage line and the flag's name (config_from_args).
    parser.set_defaults(demo_usage_error=parser.error)


def _as_flags(message: str) -> str:
    """``message`` from :meth:`DemoConfig.check`, with the parameter it starts with (a Python
    name, ``silent_share``) named as its command-line flag (``--silent-share``)."""
    name, _, rest = message.partition(" ")
    if name in DemoConfig.__dataclass_fields__:
        return f"--{name.replace('_', '-')} {rest}"
    return message


def config_from_args(args: argparse.Namespace) -> DemoConfig:
    """The :class:`DemoConfig` the parsed options describe (checked): a combination that cannot
    work is a usage error of the parser :func:`add_arguments` filled (it exits, status 2, naming
    the flags), or a ValueError naming them for options parsed elsewhere."""
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
    try:
        config.check()
    except ValueError as exc:
        usage_error = getattr(args, "demo_usage_error", None)
        if usage_error is None:
            raise ValueError(_as_flags(str(exc))) from None
        usage_error(_as_flags(str(exc)))
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
