"""Real servers on the four loops, side by side: uvicorn under a keep-alive client fleet, and a
websockets server holding idle connections with keepalive pings.

    python benchmarks/bench_servers.py            # 10 000 connections, 3 rounds (~20 min)
    python benchmarks/bench_servers.py --quick    # a smoke run: 200 connections, 1 round (~30 s)
    python benchmarks/bench_servers.py --connections 2000 --rounds 5 --scenarios uvicorn

(Times on a shared 2-core machine: one round at 2 000 connections took 3.5 min there, most of it
the websockets scenario's idle windows and the client fleet's own CPU.)

Two scenarios, each run once per variant and round with the server in a fresh process of its
own (this script with ``--serve``) and the client fleet in another (``_fleet.py``), over
127.0.0.1:

* ``uvicorn``: uvicorn serving a trivial ASGI app (``Hello, world!``), the loop chosen the way
  a user chooses it (``uvicorn.Config(loop=...)``, what ``--loop`` sets). The fleet opens
  ``--connections`` keep-alive connections and makes one request on each; then every
  connection makes ``--requests`` more, one after the other, all connections at once. Each
  request arms uvicorn's keep-alive timer and the next one cancels it: the churn of timers a
  wheel is for. Reported: the server's CPU time per request over the request phase, and its
  RSS per connection (after every connection made its first request: each holds a pending
  keep-alive timer).
* ``websockets``: a ``websockets.asyncio.server.serve`` server whose handler only waits for the
  connection to close, with ``--ping-interval`` keepalive pings. The fleet opens
  ``--connections`` connections and answers every ping; the server is then watched for
  ``--window`` seconds. Reported: its CPU time per second of that window, and its RSS per
  connection (each holds a keepalive task sleeping on a timer).

Variants: asyncio's selector loop, the same with the wheel (``aiowheel.loop:new_event_loop``),
uvloop, and uvloop with the wheel (``aiowheel.loop:new_uvloop_event_loop``). The order of the
variants rotates from one round to the next; the tables show medians and the min-max range over
the rounds. CPU is the server process's user + system time from ``/proc/<pid>/stat`` over the
measured phase; RSS is ``VmRSS`` from ``/proc/<pid>/status``, after the connections minus
before them (the first :data:`_fleet.WARM` connections are opened before the baseline, so the
server's code paths are already warm). Both processes raise their open-file limit to the hard
limit, and the run reports how many connections it reached. The load average of the machine at
each measurement is reported with it: on a shared machine, compare variants within one run,
never absolute figures across runs. Nothing here passes or fails on speed.

Linux only (``/proc``). A full run writes ``servers.md``, ``servers.json`` and ``servers.png``
(matplotlib, if installed) to ``benchmarks/results``; a ``--quick`` run, or one narrowed with
``--scenarios``, writes only where ``--out`` says. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import importlib.metadata
import json
import os
import platform
import select
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from pathlib import Path
from typing import IO, Any

from _fleet import raise_open_file_limit
from _report import markdown_table, ratio, ratio_text

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
SCENARIOS = ["uvicorn", "websockets"]
VARIANTS = ["asyncio", "asyncio+wheel", "uvloop", "uvloop+wheel"]
PAIRS = [("asyncio", "asyncio+wheel"), ("uvloop", "uvloop+wheel")]
#: What a user passes to uvicorn's ``--loop`` (``uvicorn.Config(loop=...)``) for each variant.
UVICORN_LOOP = {
    "asyncio": "asyncio",
    "asyncio+wheel": "aiowheel.loop:new_event_loop",
    "uvloop": "uvloop",
    "uvloop+wheel": "aiowheel.loop:new_uvloop_event_loop",
}
#: The servers' listen backlog: Linux caps it at net.core.somaxconn.
BACKLOG = 4096
#: Longest wait for any one step of a run (a server starting, the fleet connecting, ...).
STEP_TIMEOUT = 900.0

QUICK = {"connections": 200, "requests": 3, "window": 1.5, "ping_interval": 0.25, "rounds": 1}


# -- the server process -------------------------------------------------------------------------


async def hello(
    scope: MutableMapping[str, Any],
    receive: Callable[[], Awaitable[MutableMapping[str, Any]]],
    send: Callable[[MutableMapping[str, Any]], Awaitable[None]],
) -> None:
    """The trivial ASGI app."""
    if scope["type"] != "http":
        return
    headers = [(b"content-type", b"text/plain"), (b"content-length", b"13")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"Hello, world!"})


def loop_stats() -> dict[str, Any]:
    """The running loop's class and, on a wheel loop, its wheel counters (else None)."""
    from aiowheel.loop import WheelLoop, WheelStats

    loop = asyncio.get_running_loop()
    stats: dict[str, Any] = {"loop": type(loop).__name__}
    for field in dataclasses.fields(WheelStats):
        stats[field.name] = None
    if isinstance(loop, WheelLoop):
        stats.update(dataclasses.asdict(loop.wheel_stats()))
    return stats


def stop_on_stdin_eof() -> asyncio.Event:
    """An event set when stdin reaches end of file: the benchmark's signal to stop."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def readable() -> None:
        if not os.read(sys.stdin.fileno(), 4096):
            loop.remove_reader(sys.stdin.fileno())
            stop.set()

    loop.add_reader(sys.stdin.fileno(), readable)
    return stop


def announce(result: dict[str, Any]) -> None:
    print(json.dumps(result), flush=True)


async def serve_uvicorn(args: argparse.Namespace) -> None:
    import uvicorn

    config = uvicorn.Config(
        hello,
        host="127.0.0.1",
        port=0,
        loop=UVICORN_LOOP[args.serve_variant],
        http=args.http,
        lifespan="off",
        log_config=None,
        access_log=False,
        timeout_keep_alive=args.keep_alive,
        backlog=BACKLOG,
    )
    server = uvicorn.Server(config)
    stop = stop_on_stdin_eof()
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            serving.result()  # it failed to start: raise why
            raise SystemExit("uvicorn did not start")
        await asyncio.sleep(0.01)
    announce({"port": server.servers[0].sockets[0].getsockname()[1]})
    await stop.wait()
    server.should_exit = True
    await serving
    announce(loop_stats())


async def serve_websockets(args: argparse.Namespace) -> None:
    from websockets.asyncio.server import ServerConnection, serve

    async def hold(connection: ServerConnection) -> None:
        await connection.wait_closed()

    stop = stop_on_stdin_eof()
    async with serve(
        hold,
        "127.0.0.1",
        0,
        ping_interval=args.ping_interval,
        ping_timeout=args.ping_timeout,
        compression=None,
        backlog=BACKLOG,
    ) as server:
        announce({"port": server.sockets[0].getsockname()[1]})
        await stop.wait()
        server.close()  # its connections are the fleet's, closed by now
        await server.wait_closed()
        announce(loop_stats())


def serve(args: argparse.Namespace) -> None:
    """The server process: serve until stdin closes, then print the loop's counters."""
    raise_open_file_limit()
    if args.serve == "uvicorn":
        import uvicorn

        # uvicorn resolves the loop: the names of its own loops, or module:callable.
        factory = uvicorn.Config(hello, loop=UVICORN_LOOP[args.serve_variant]).get_loop_factory()
        main: Callable[[argparse.Namespace], Coroutine[Any, Any, None]] = serve_uvicorn
    else:
        factory = make_loop_factory(args.serve_variant)
        main = serve_websockets
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main(args))


def make_loop_factory(variant: str) -> Callable[[], asyncio.AbstractEventLoop]:
    if variant == "asyncio":
        return asyncio.SelectorEventLoop
    if variant == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    import aiowheel.loop

    if variant == "asyncio+wheel":
        return aiowheel.loop.new_event_loop
    return aiowheel.loop.new_uvloop_event_loop


# -- measuring a process through /proc ---------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    # After the command name: state is field 3, utime 14 and stime 15 (1-based, see proc(5)).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def load_average() -> float:
    with open("/proc/loadavg") as loadavg:
        return float(loadavg.read().split()[0])


# -- one run: a server, its fleet, the measurements ---------------------------------------------


def read_json_line(process: subprocess.Popen[str], what: str) -> dict[str, Any]:
    """The next JSON line ``process`` prints, waiting at most :data:`STEP_TIMEOUT`. (``select``
    before a buffered ``readline`` is safe here: each process prints one line per step and
    waits for the next step, so no second line is ever buffered unseen.)"""
    assert process.stdout is not None
    readable, _, _ = select.select([process.stdout], [], [], STEP_TIMEOUT)
    line = process.stdout.readline() if readable else ""
    if not line:
        raise RuntimeError(f"{what}: no answer (exit status {process.poll()})")
    result: dict[str, Any] = json.loads(line)
    return result


def step(fleets: list[subprocess.Popen[str]], command: str) -> list[dict[str, Any]]:
    """Send ``command`` to every fleet process at once; their answers."""
    for fleet in fleets:
        assert fleet.stdin is not None
        fleet.stdin.write(command + "\n")
        fleet.stdin.flush()
    return [read_json_line(fleet, f"fleet, {command}") for fleet in fleets]


def start(command: list[str], log: IO[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
    )


def finish(process: subprocess.Popen[str]) -> None:
    """Close its stdin (its signal to stop), if not yet, and wait for it; kill it if it hangs."""
    assert process.stdin is not None
    process.stdin.close()
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    assert process.stdout is not None
    process.stdout.close()


def run_one(scenario: str, variant: str, args: argparse.Namespace) -> dict[str, Any]:
    """One server of ``scenario`` on ``variant`` under its fleet: the figures of that run."""
    serve_command = [sys.executable, __file__, "--serve", scenario, "--serve-variant", variant]
    serve_command += ["--http", args.http, "--keep-alive", str(args.keep_alive)]
    serve_command += ["--ping-interval", str(args.ping_interval)]
    serve_command += ["--ping-timeout", str(args.ping_timeout)]
    with tempfile.TemporaryFile("w+") as log:
        server = start(serve_command, log)
        fleets: list[subprocess.Popen[str]] = []
        try:
            port = read_json_line(server, f"{scenario} server on {variant}")["port"]
            kind = "http" if scenario == "uvicorn" else "ws"
            for share in split(args.connections, args.clients):
                fleet_command = [sys.executable, str(HERE / "_fleet.py"), kind]
                fleet_command += ["--port", str(port), "--connections", str(share)]
                fleet_command += ["--requests", str(args.requests)]
                fleets.append(start(fleet_command, log))
            warmed = sum(answer["connections"] for answer in step(fleets, "warm"))
            rss_before = rss_kib(server.pid)
            connected = step(fleets, "connect")
            rss_after = rss_kib(server.pid)
            connections = sum(answer["connections"] for answer in connected)
            result: dict[str, Any] = {
                "connections": connections,
                "connect_errors": sum(answer["errors"] for answer in connected),
                "rss_kib_per_connection": (rss_after - rss_before) / max(connections - warmed, 1),
                "rss_mib": rss_after / 1024,
                "load": load_average(),
            }
            cpu_before = cpu_seconds(server.pid)
            if scenario == "uvicorn":
                ran = step(fleets, "run")
                cpu = cpu_seconds(server.pid) - cpu_before
                requests = sum(answer["requests"] for answer in ran)
                seconds = max(answer["seconds"] for answer in ran)
                result |= {
                    "requests": requests,
                    "request_errors": sum(answer["errors"] for answer in ran),
                    "cpu_us_per_request": cpu / requests * 1e6,
                    "requests_per_s": requests / seconds,
                    "cpu_share": cpu / seconds,
                }
            else:
                pongs_before = sum(answer["pongs"] for answer in step(fleets, "report"))
                started = time.monotonic()
                cpu_before = cpu_seconds(server.pid)
                time.sleep(args.window)
                cpu = cpu_seconds(server.pid) - cpu_before
                seconds = time.monotonic() - started
                reported = step(fleets, "report")
                pongs = sum(answer["pongs"] for answer in reported) - pongs_before
                result |= {
                    "cpu_ms_per_s": cpu / seconds * 1e3,
                    "pings_per_s": pongs / seconds,
                    "alive": sum(answer["alive"] for answer in reported),
                }
            result["load_after"] = load_average()
        except BaseException:
            for process in [*fleets, server]:
                process.kill()
            log.seek(0)
            sys.stderr.write(log.read()[-4000:])
            raise
        for fleet in fleets:
            finish(fleet)
        assert server.stdin is not None
        server.stdin.close()  # its signal to stop: it prints its loop's counters, then exits
        result["stats"] = read_json_line(server, f"{scenario} server on {variant}, stopping")
        finish(server)
    return result


def split(total: int, parts: int) -> list[int]:
    """``total`` connections shared among ``parts`` fleet processes as evenly as can be."""
    return [total // parts + (1 if index < total % parts else 0) for index in range(parts)]


# -- rounds, medians and the report --------------------------------------------------------------

#: The figures of each scenario, as (key in a run's result, column title, digits). The first two
#: are the scenario's cost figures: shown with their min-max range over the rounds and their
#: ratio to the same loop without the wheel. The third is context (how hard the fleet pushed).
FIGURES = {
    "uvicorn": [
        ("cpu_us_per_request", "CPU µs/request", 1),
        ("rss_kib_per_connection", "RSS KiB/connection", 2),
        ("requests_per_s", "requests/s", 0),
    ],
    "websockets": [
        ("cpu_ms_per_s", "CPU ms/s idle", 2),
        ("rss_kib_per_connection", "RSS KiB/connection", 2),
        ("pings_per_s", "pings/s", 0),
    ],
}
TITLES = {
    "uvicorn": "uvicorn: a trivial ASGI app under a keep-alive client fleet",
    "websockets": "websockets: idle connections with keepalive pings",
}


def median_row(scenario: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One variant's figures over its rounds: medians, the cost figures' min-max ranges, the
    fewest connections any round reached, and the wheel counters of the last round."""
    row: dict[str, Any] = {"rounds": len(runs)}
    for key, _, _ in FIGURES[scenario]:
        values = [run[key] for run in runs]
        row[key] = statistics.median(values)
        row[f"{key}_range"] = [min(values), max(values)]
    row["connections"] = min(run["connections"] for run in runs)
    row["connect_errors"] = max(run["connect_errors"] for run in runs)
    if scenario == "uvicorn":
        row["request_errors"] = max(run["request_errors"] for run in runs)
    else:
        row["alive"] = min(run["alive"] for run in runs)
    row["load"] = statistics.median(run["load"] for run in runs)
    row["stats"] = runs[-1]["stats"]
    return row


def plain_of(variant: str) -> str:
    """The loop a variant runs on without the wheel: its ratios are against that one."""
    return variant.removesuffix("+wheel")


def scenario_table(scenario: str, rows: dict[str, dict[str, Any]]) -> str:
    """The variants side by side: each cost figure, its range and its ratio to the same loop
    without the wheel (below 1: the wheel is cheaper)."""
    (cost, cost_title, cost_digits), (rss, rss_title, rss_digits), (rate, rate_title, _) = FIGURES[
        scenario
    ]
    headers = ["variant", "connections", cost_title, "(min-max)", "vs no wheel"]
    headers += [rss_title, "vs no wheel", rate_title, "load"]
    lines = []
    for variant, row in rows.items():
        plain = rows.get(plain_of(variant), {})
        low, high = row[f"{cost}_range"]
        lines.append(
            [
                variant,
                f"{row['connections']:,}",
                f"{row[cost]:,.{cost_digits}f}",
                f"({low:,.{cost_digits}f}-{high:,.{cost_digits}f})",
                ratio_text(ratio(row[cost], plain.get(cost))),
                f"{row[rss]:,.{rss_digits}f}",
                ratio_text(ratio(row[rss], plain.get(rss))),
                f"{row[rate]:,.0f}",
                f"{row['load']:.1f}",
            ]
        )
    return markdown_table(headers, lines)


def wheel_lines(rows: dict[str, dict[str, Any]]) -> list[str]:
    """What went on the wheel in the wheel variants' last round: proof that it was used."""
    lines = []
    for variant, row in rows.items():
        stats = row["stats"]
        if stats["wheel_timers"] is not None:
            lines.append(
                f"{variant} ({stats['loop']}): {stats['wheel_timers']:,} timers on the wheel, "
                f"{stats['base_timers']:,} on the base loop, {stats['cancelled']:,} cancelled, "
                f"{stats['fired']:,} fired, {stats['driver_wakeups']:,} driver passes"
            )
    return lines


def scenario_notes(scenario: str, rows: dict[str, dict[str, Any]], wanted: int) -> list[str]:
    notes = []
    for variant, row in rows.items():
        if row["connections"] < wanted:
            notes.append(
                f"{variant}: {row['connections']:,} of {wanted:,} connections "
                f"({row['connect_errors']:,} failed to open)"
            )
        if row.get("request_errors"):
            notes.append(f"{variant}: {row['request_errors']:,} connections failed a request")
        if scenario == "websockets" and row["alive"] < row["connections"]:
            notes.append(f"{variant}: only {row['alive']:,} connections alive at the end")
    return notes


def report_markdown(results: dict[str, Any], plotted: bool) -> str:
    environment = ", ".join(f"{key} {value}" for key, value in results["environment"].items())
    settings = ", ".join(f"{key} {value}" for key, value in results["settings"].items())
    parts = [
        "# Real servers on the four loops",
        f"`{results['command']}`: {environment}; {settings}; "
        f"{results['runtime']:.0f} s. Medians over the rounds; ratios are each variant's figure "
        "over the same loop's without the wheel (below 1: the wheel is cheaper). Compare within "
        "this run only: the machine is shared.",
    ]
    for scenario, rows in results["scenarios"].items():
        parts.append(f"## {TITLES[scenario]}\n\n{scenario_table(scenario, rows)}")
        listed = wheel_lines(rows) + results["notes"].get(scenario, [])
        if listed:
            parts.append("\n".join(f"- {line}" for line in listed))
    if plotted:
        parts.append("![CPU and RSS per variant](servers.png)")
    return "\n\n".join(parts) + "\n"


def plot(results: dict[str, Any], path: Path) -> bool:
    """Bars of each scenario's two cost figures per variant, the min-max range as error bars.
    Needs matplotlib (the ``spark`` extra); without it, no plot and False."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    scenarios = list(results["scenarios"])
    figure, axes = plt.subplots(2, len(scenarios), figsize=(5.5 * len(scenarios), 8), squeeze=False)
    for column, scenario in enumerate(scenarios):
        rows = results["scenarios"][scenario]
        variants = list(rows)
        for line, (key, title, _) in enumerate(FIGURES[scenario][:2]):
            values = [rows[variant][key] for variant in variants]
            ranges = [rows[variant][f"{key}_range"] for variant in variants]
            low = [value - least for value, (least, _) in zip(values, ranges, strict=True)]
            high = [most - value for value, (_, most) in zip(values, ranges, strict=True)]
            colors = [
                "tab:red" if variant.endswith("+wheel") else "tab:blue" for variant in variants
            ]
            panel = axes[line][column]
            panel.bar(variants, values, yerr=[low, high], color=colors, capsize=4)
            panel.set(title=f"{scenario}: {title}", ylabel=title)
            panel.tick_params(axis="x", labelsize=8)
            panel.grid(True, axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def have_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401 - only whether it imports
    except ImportError:
        return False
    return True


def version_of(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def environment() -> dict[str, str]:
    import aiowheel

    return {
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "python": platform.python_version(),
        "cpus": str(os.cpu_count()),
        "uvicorn": version_of("uvicorn"),
        "websockets": version_of("websockets"),
        "uvloop": version_of("uvloop"),
        "wheel": "compiled" if aiowheel.IMPLEMENTATION == "compiled" else "pure Python",
    }


def progress(started: float, message: str) -> None:
    print(f"[{time.monotonic() - started:6.0f} s] {message}", file=sys.stderr, flush=True)


def measure(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    """Every scenario on every variant, ``--rounds`` times, the variants' order rotating."""
    variants = VARIANTS if have_uvloop() else VARIANTS[:2]
    notes = [] if have_uvloop() else ["uvloop is not installed: its two variants were skipped"]
    started = time.monotonic()
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        scenario: {variant: [] for variant in variants} for scenario in args.scenarios
    }
    for round_ in range(args.rounds):
        order = variants[round_ % len(variants) :] + variants[: round_ % len(variants)]
        for scenario in args.scenarios:
            for variant in order:
                progress(started, f"round {round_ + 1}/{args.rounds}: {scenario} on {variant}")
                runs[scenario][variant].append(run_one(scenario, variant, args))
    rows = {
        scenario: {variant: median_row(scenario, runs[scenario][variant]) for variant in variants}
        for scenario in args.scenarios
    }
    settings: dict[str, Any] = {"connections": args.connections, "rounds": args.rounds}
    if "uvicorn" in args.scenarios:
        settings |= {"requests per connection": args.requests, "keep-alive s": args.keep_alive}
        settings["http"] = args.http
    if "websockets" in args.scenarios:
        settings |= {"window s": args.window, "ping interval s": args.ping_interval}
        settings["ping timeout s"] = args.ping_timeout
    return {
        "command": " ".join(["python benchmarks/bench_servers.py", *argv]),
        "environment": environment(),
        "settings": settings,
        "connections": args.connections,
        "scenarios": rows,
        "notes": {
            scenario: notes + scenario_notes(scenario, rows[scenario], args.connections)
            for scenario in args.scenarios
        },
        "runs": runs,
        "runtime": time.monotonic() - started,
    }


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=10_000, help="per run (10 000)")
    parser.add_argument(
        "--requests", type=int, default=5, help="uvicorn: requests per connection, measured (5)"
    )
    parser.add_argument(
        "--keep-alive",
        type=float,
        default=300.0,
        help="uvicorn's timeout_keep_alive, s (300: longer than a run, so no connection is "
        "closed under the fleet; every request still arms and cancels the timer)",
    )
    parser.add_argument(
        "--http", choices=["h11", "httptools"], default="h11", help="uvicorn's HTTP parser (h11)"
    )
    parser.add_argument(
        "--window", type=float, default=20.0, help="websockets: idle window measured, s (20)"
    )
    parser.add_argument(
        "--ping-interval", type=float, default=5.0, help="websockets: keepalive interval, s (5)"
    )
    parser.add_argument(
        "--ping-timeout", type=float, default=20.0, help="websockets: pong timeout, s (20)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="runs of every variant (3)")
    parser.add_argument("--clients", type=int, default=2, help="fleet processes (2)")
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=SCENARIOS)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: "
        + ", ".join(f"{key.replace('_', ' ')} {value}" for key, value in QUICK.items()),
    )
    parser.add_argument("--out", type=Path, help="directory for servers.md, .json and .png")
    parser.add_argument("--serve", choices=SCENARIOS, help=argparse.SUPPRESS)
    parser.add_argument("--serve-variant", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    if args.connections < 1 or args.rounds < 1 or args.clients < 1:
        parser.error("--connections, --rounds and --clients must be at least 1")
    args.clients = min(args.clients, args.connections)
    return args


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    args = parse(given)
    if args.serve:
        serve(args)
        return 0
    raise_open_file_limit()
    results = measure(args, given)
    for scenario, rows in results["scenarios"].items():
        print(f"\n## {TITLES[scenario]}\n\n{scenario_table(scenario, rows)}")
        for line in wheel_lines(rows) + results["notes"][scenario]:
            print(f"- {line}")
    narrowed = args.quick or args.scenarios != SCENARIOS
    out: Path | None = args.out if args.out is not None else None if narrowed else RESULTS
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        plotted = plot(results, out / "servers.png")
        (out / "servers.md").write_text(report_markdown(results, plotted))
        (out / "servers.json").write_text(json.dumps(results, indent=1, ensure_ascii=False))
        print(f"\nwrote servers.md, servers.json{', servers.png' if plotted else ''} to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
