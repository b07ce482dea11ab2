"""Tests of the demo (aiowheel.demo) and the command line that runs it (aiowheel.__main__).

The demo's verdict is a pure function of what was recorded (:func:`aiowheel.demo.judge`), so its
rules are tested on hand-made records with exact times. The demo itself runs on real sockets in
real time; it is run end to end a few times, small and short: as the command a user types (on
asyncio and on uvloop), and in-process with a server whose timeout is deliberately too short, to
see the demo catch it. Those runs assert the verdict, never a duration.
"""

from __future__ import annotations

import asyncio
import io
import math
import platform
import random
import re
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import aiowheel
import aiowheel.demo
from aiowheel import __main__ as cli
from aiowheel.demo import (
    ClientRecord,
    DemoConfig,
    IdleServer,
    Verdict,
    ensure_fd_limit,
    judge,
    plan_clients,
    run_demo,
)

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 3.0
TOLERANCE = 1.0
END = 100.0
# Small and short, with margins a loaded machine keeps (the demo runs in real time, and a stalled
# process sends its keepalives, expires and sees closes late): the longest keepalive gap is
# 0.3 s against a 2 s timeout, and an expiry or a close may be 4 s late. The duration must exceed
# the connect ramp + timeout + tolerance, so that some silent clients are judged.
SMALL = [
    "--clients=50",
    "--duration=7",
    "--timeout=2",
    "--keepalive=0.25",
    "--tolerance=4",
    "--silent-share=0.2",
    "--seed=7",
]


def talking(key: int = 1, **fields: Any) -> ClientRecord:
    """A talking client that connected at 0 and sent its last packet at END - 0.5."""
    values: dict[str, Any] = {"last_sent": END - 0.5, "last_touch": END - 0.5}
    values.update(fields)
    return ClientRecord(key=key, connect_at=0.0, silent_at=math.inf, **values)


def silent(key: int = 2, last: float = 10.0, **fields: Any) -> ClientRecord:
    """A client that went silent after its packet at ``last`` and was expired on time."""
    values: dict[str, Any] = {
        "last_sent": last,
        "last_touch": last,
        "expired_at": last + TIMEOUT,
        "expiries": 1,
    }
    values.update(fields)
    if "close_seen_at" not in values and values["expired_at"] is not None:
        values["close_seen_at"] = values["expired_at"] + 0.001
    return ClientRecord(key=key, connect_at=0.0, silent_at=last + 0.5, **values)


def verdict(*records: ClientRecord) -> Verdict:
    return judge(records, timeout=TIMEOUT, tolerance=TOLERANCE, end=END)


# -- the verdict ---------------------------------------------------------------------------


def test_judge_passes_a_clean_run() -> None:
    result = verdict(talking(1), silent(2), silent(3, last=50.0, expired_at=53.5))
    assert result.passed
    assert (result.talking, result.silent, result.connected) == (1, 2, 3)
    assert (result.silent_due, result.silent_due_expired, result.early) == (2, 2, 0)
    assert result.idle_at_expiry == (3.0, 3.5)


def test_judge_fails_when_a_talking_client_was_expired() -> None:
    result = verdict(talking(1, expired_at=END - 1, expiries=1, close_seen_at=END - 1))
    assert not result.passed
    assert result.talking_expired == 1
    assert any("talking client 1 was expired" in failure for failure in result.failures)


def test_judge_ignores_talking_clients_expired_after_the_end() -> None:
    # Once the clients stop, a talking client is silent too: its expiry is correct.
    result = verdict(talking(1, expired_at=END + 2.5, expiries=1, last_touch=END - 0.5))
    assert result.passed
    assert result.talking_expired == 0


def test_judge_fails_when_a_due_silent_client_was_missed() -> None:
    result = verdict(silent(2, expired_at=None, expiries=0, close_seen_at=None))
    assert not result.passed
    assert result.silent_due == 1
    assert result.silent_due_expired == 0
    assert "silent client 2 was missed" in result.failures[0]


def test_judge_fails_when_a_silent_client_was_expired_late() -> None:
    late = 10.0 + TIMEOUT + TOLERANCE + 0.01
    result = verdict(silent(2, expired_at=late, close_seen_at=late))
    assert not result.passed
    assert "expired late" in result.failures[0]


def test_judge_accepts_an_expiry_exactly_at_the_limits() -> None:
    assert verdict(silent(2, expired_at=10.0 + TIMEOUT)).passed
    assert verdict(silent(2, expired_at=10.0 + TIMEOUT + TOLERANCE)).passed


def test_judge_does_not_require_a_silent_client_that_went_silent_near_the_end() -> None:
    last = END - TIMEOUT - TOLERANCE + 0.01
    pending = silent(2, last=last, expired_at=None, expiries=0, close_seen_at=None)
    expired = silent(3, last=last)
    result = verdict(pending, expired)
    assert result.passed
    assert (result.silent_due, result.silent_not_due, result.silent_not_due_expired) == (0, 2, 1)


def test_judge_fails_an_early_expiry() -> None:
    # The server touched the key at 10.5 (a packet the client sent at 10.0 arrived late).
    result = verdict(silent(2, last_touch=10.5, expired_at=13.4999))
    assert not result.passed
    assert result.early == 1
    assert "expired early" in result.failures[0]


def test_judge_fails_a_double_expiry() -> None:
    result = verdict(silent(2, expiries=2))
    assert result.failures == ("client 2 was expired 2 times",)


def test_judge_fails_a_client_that_could_not_connect() -> None:
    result = verdict(talking(1, connect_error="ConnectionRefusedError: refused", last_sent=None))
    assert result.failures == ("client 1 could not connect: ConnectionRefusedError: refused",)
    assert result.connected == 0


def test_judge_fails_a_client_that_had_not_connected_by_the_end() -> None:
    never = [talking(key, last_sent=None, last_touch=None) for key in range(7)]
    result = verdict(*never)
    assert result.failures == (
        "7 client(s) had not connected when the run ended (0, 1, 2, 3, 4, …)",
    )


def test_judge_fails_when_the_client_did_not_see_the_close() -> None:
    assert not verdict(silent(2, close_seen_at=None)).passed
    assert verdict(silent(2, close_seen_at=END - 0.01)).passed  # late, but by the end
    # Expired less than `tolerance` before the end: the close may still be on its way.
    near_end = END - TOLERANCE / 2
    assert verdict(silent(2, last=near_end - TIMEOUT, close_seen_at=None)).passed


def test_judge_fails_a_close_without_expiry() -> None:
    result = verdict(talking(1, close_seen_at=50.0))
    assert result.failures == ("client 1: the server closed it without an expiry",)


# -- configuration, plan, descriptors --------------------------------------------------------


def test_default_config_is_valid_and_sized_for_the_readme() -> None:
    config = DemoConfig()
    config.check()
    assert config.clients == 2000
    assert config.longest_interval <= config.timeout / 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"clients": 0}, "clients must be at least 1, got 0"),
        ({"duration": -1.0}, "duration must be a finite number > 0, got -1.0"),
        ({"timeout": math.nan}, "timeout must be a finite number > 0, got nan"),
        ({"jitter": 1.0}, "jitter must be in [0, 1), got 1.0"),
        ({"silent_share": 1.5}, "silent_share must be in [0, 1], got 1.5"),
        ({"keepalive": 1.5}, "must be at most half the idle timeout"),
        ({"duration": 5.0}, "duration (5 s) must be longer than the connect ramp (1.25 s)"),
    ],
)
def test_config_check_names_the_bad_value(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        DemoConfig(**change).check()


def test_plan_is_deterministic_for_a_seed() -> None:
    config = DemoConfig(clients=200, silent_share=0.25, duration=10.0)
    first = plan_clients(config, random.Random(3), start=100.0)
    assert first == plan_clients(config, random.Random(3), start=100.0)
    assert sum(not record.talking for record in first) == 50
    for record in first:
        assert 100.0 <= record.connect_at < 100.0 + config.ramp
        if not record.talking:
            assert record.connect_at <= record.silent_at <= 110.0


class FakeResource:
    """Stands in for the ``resource`` module: a soft and a hard RLIMIT_NOFILE."""

    RLIMIT_NOFILE = 7
    RLIM_INFINITY = -1

    def __init__(self, soft: int, hard: int, settable: bool = True) -> None:
        self.limits = (soft, hard)
        self.settable = settable

    def getrlimit(self, which: int) -> tuple[int, int]:
        return self.limits

    def setrlimit(self, which: int, limits: tuple[int, int]) -> None:
        if not self.settable:
            raise ValueError("not allowed")
        self.limits = limits


@pytest.fixture
def fake_resource(monkeypatch: pytest.MonkeyPatch) -> Callable[..., FakeResource]:
    """Install a FakeResource(soft, hard, settable) as the ``resource`` module."""

    def install(soft: int, hard: int, settable: bool = True) -> FakeResource:
        fake = FakeResource(soft, hard, settable)
        monkeypatch.setitem(sys.modules, "resource", fake)
        return fake

    return install


def test_fd_limit_enough(fake_resource: Callable[..., FakeResource]) -> None:
    fake_resource(10_000, 10_000)
    assert ensure_fd_limit(2000) == (2000, None)


def test_fd_limit_raises_the_soft_limit_to_the_hard_limit(
    fake_resource: Callable[..., FakeResource],
) -> None:
    fake = fake_resource(1024, 65536)
    clients, note = ensure_fd_limit(2000)
    assert clients == 2000
    assert fake.limits == (65536, 65536)
    assert note == "raised the open-file limit from 1,024 to 65,536"


def test_fd_limit_scales_down_when_the_hard_limit_is_too_low(
    fake_resource: Callable[..., FakeResource],
) -> None:
    fake_resource(256, 1024)
    clients, note = ensure_fd_limit(2000)
    assert clients == (1024 - 64) // 2
    assert note is not None and "allows only 480 of 2,000 clients" in note


def test_fd_limit_scales_down_when_it_cannot_be_raised(
    fake_resource: Callable[..., FakeResource],
) -> None:
    fake_resource(256, FakeResource.RLIM_INFINITY, settable=False)
    clients, note = ensure_fd_limit(2000)
    assert clients == (256 - 64) // 2
    assert note is not None and "allows only" in note


# -- the command line ----------------------------------------------------------------------


def test_cli_rejects_a_keepalive_too_close_to_the_timeout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["demo", "--timeout=2", "--keepalive=1.5"])
    assert exit_info.value.code == 2
    assert "at most half the idle timeout" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--silent-share=1.5"], "aiowheel demo: error: --silent-share must be in [0, 1], got 1.5"),
        (["--clients=0"], "aiowheel demo: error: --clients must be at least 1, got 0"),
        (["--tick=nan"], "aiowheel demo: error: --tick must be a finite number > 0, got nan"),
        (["--duration=5"], "aiowheel demo: error: --duration (5 s) must be longer than"),
    ],
)
def test_cli_range_errors_name_the_flag_under_the_demos_usage(
    capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["demo", *flags])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.startswith("usage: aiowheel demo ")  # the command's usage, not the top level's
    assert "silent_share" not in err


def test_cli_without_a_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "demo" in capsys.readouterr().err


def test_cli_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    python = f"{platform.python_implementation()} {platform.python_version()}"
    assert (
        capsys.readouterr().out
        == f"aiowheel {aiowheel.__version__} ({aiowheel.CORE} core, {python})\n"
    )


def test_cli_hands_spark_commands_to_the_spark_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def spark_main(argv: list[str]) -> int:
        seen.append(argv)
        return 3

    fake = types.ModuleType("aiowheel.spark.cli")
    fake.main = spark_main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "aiowheel.spark.cli", fake)
    assert cli.main(["spark", "replay", "--help"]) == 3
    assert seen == [["replay", "--help"]]


def test_cli_spark_without_pyspark_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [name for name in sys.modules if name.startswith("aiowheel.spark")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delattr(aiowheel, "spark", raising=False)
    monkeypatch.setitem(sys.modules, "pyspark", None)
    assert cli.main(["spark", "generate"]) == 2
    assert "pip install 'aiowheel[spark]'" in capsys.readouterr().err


@pytest.mark.parametrize(("module", "extra"), [("rich.console", "cli"), ("uvloop", "uvloop")])
def test_demo_without_an_optional_dependency_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], module: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)
    assert aiowheel.demo.main(DemoConfig(uvloop=True)) == 2
    captured = capsys.readouterr()
    assert f"pip install 'aiowheel[{extra}]'" in captured.out + captured.err


# -- end to end ----------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aiowheel", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,  # only stops a hang
        check=False,
    )


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_demo_passes_its_own_check(loop: str) -> None:
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    result = run_cli("demo", *SMALL, *(["--uvloop"] if loop == "uvloop" else []))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASS: 50 clients, no talking client expired" in result.stdout
    assert re.search(rf"event loop\W+{loop}\b", result.stdout)
    assert "early expiries" in result.stdout
    # The Timer's lateness histogram and where its timers sit, from stats().
    assert re.search(r"timer lateness\W+p50 <= [\d.]+ ms, p99 <= [\d.]+ ms", result.stdout)
    assert re.search(r"lateness histogram\W+<=[\d.]+ [µm]?s: [\d,]+", result.stdout)
    assert re.search(r"pending per level\W+L0: [\d,]+", result.stdout)
    # The status lines count open and accepted connections on one side at one moment.
    counts = re.findall(r"open connections ([\d,]+) \(of ([\d,]+) accepted\)", result.stdout)
    assert counts, result.stdout
    for open_now, accepted in counts:
        assert int(open_now.replace(",", "")) <= int(accepted.replace(",", ""))
    assert result.stderr == ""


def test_demo_catches_a_server_that_expires_talking_clients(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A broken server: it expires after a tenth of the configured timeout, well inside the
    # clients' keepalive interval, so talking clients get closed and early expiries happen.
    original = IdleServer.__init__

    def broken_init(self: IdleServer, timer: Any, timeout: float, records: Any) -> None:
        original(self, timer, timeout / 10, records)

    monkeypatch.setattr(IdleServer, "__init__", broken_init)
    config = DemoConfig(clients=20, duration=1.5, timeout=1.0, keepalive=0.3, tolerance=0.3, seed=1)
    output = io.StringIO()
    console = Console(file=output, width=200)
    report = asyncio.run(run_demo(config, console))
    assert not report.verdict.passed
    assert report.verdict.talking_expired > 0
    assert report.verdict.early > 0
    aiowheel.demo.print_report(report, console)
    assert "FAIL" in output.getvalue()
    assert "talking client" in output.getvalue()
