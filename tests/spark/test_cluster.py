"""The pipeline on a real standalone cluster, run the way docs/spark.md tells users to.

A master and two workers (one core each) are started from the ``pyspark`` package alone
(``spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``), each its own
JVM on 127.0.0.1 with free ports; the wheel of aiowheel is built as the docs say; and each
command is a ``spark-submit`` of ``aiowheel/spark/__main__.py`` with the wheel on
``--py-files`` and executors whose Python (``spark.pyspark.python``) is a bare environment:
pandas, pyarrow and protobuf (what the docs say executors need) and their dependencies, no
aiowheel. What each run writes must equal the ``local[2]`` result exactly:

* ``replay`` and ``report`` (built-in Spark SQL on the executors);
* ``stream``, with one worker's JVM killed by its pid while a task of the micro-batch runs on
  its executor: Spark reschedules, and the sink holds ``replay``'s expiries at the watermark,
  none twice, none lost;
* ``stream`` with the driver killed in a micro-batch and started again from its checkpoint.

Every process (master, workers, their executors, drivers) runs in its own process group and
is killed at the end whatever happens; their logs are kept under the test's ``tmp_path`` and
their tails are in the message of any failure. The log is small (about 2k events) but has
every case of the rule: duplicates, late arrivals, closes, reconnects and events exactly at a
deadline.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import suppress
from importlib import metadata
from pathlib import Path

import pandas as pd  # type: ignore[import-untyped]
import pyspark
import pytest
from packaging.requirements import Requirement
from pyspark.sql import DataFrame, SparkSession

import aiowheel
from aiowheel.spark import (
    Expiry,
    collect_expiries,
    generate,
    replay,
    report,
    write_stream_files,
)
from aiowheel.spark.stream import EVENT_TIME_SHIFT

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SPARK_HOME = Path(pyspark.__file__).parent
ROOT = Path(__file__).resolve().parents[2]
DRIVER_SCRIPT = Path(aiowheel.__file__).parent / "spark" / "__main__.py"
TIMEOUTS = "20,30"
TICK = 0.001
DELAY = 10.0
# What docs/spark.md says the executors' Python needs for the stream, besides aiowheel's own
# dependencies (anyio): the wheel on --py-files brings aiowheel, not what it requires.
EXECUTOR_PACKAGES = ("pandas", "pyarrow", "protobuf")
# Generous bounds for a loaded 2-core machine; each is a failure, never a wait that passes.
START_TIMEOUT = 120.0
SUBMIT_TIMEOUT = 300.0
# Every JVM here lives for seconds to a minute on tiny data: the quick JIT compiler alone and
# the serial collector cost less CPU than the optimising compiler and the parallel collector.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free ports on 127.0.0.1 (all held open at once while chosen)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return f"--- {path}: not written"
    text = path.read_text(errors="replace").splitlines()[-lines:]
    return "\n".join([f"--- {path} (last {len(text)} lines)", *text])


def _wait_for(
    what: str, ready: Callable[[], bool], timeout: float, logs: Callable[[], str]
) -> None:
    """Poll ``ready`` until it holds; fail with the logs after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not after {timeout:.0f} s\n{logs()}")
        time.sleep(0.05)


class Process:
    """A command in its own process group, its output in a log file."""

    def __init__(self, argv: Sequence[str], log: Path, env: dict[str, str]) -> None:
        self.log = log
        with log.open("wb") as out:
            # Run from the log's folder, not the checkout: a Python that Spark starts with
            # "-m" has its working directory first on its path, where ./aiowheel would shadow
            # the shipped wheel.
            self.popen = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                cwd=log.parent,
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill_group(self) -> None:
        """SIGKILL the whole group: the JVM and what it started (executors, Python workers)."""
        with suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


class Cluster:
    """A standalone master and its workers on 127.0.0.1; every JVM is killed by :meth:`stop`."""

    def __init__(self, root: Path, wheel: Path, python: Path) -> None:
        self.root = root
        self.wheel = wheel  # shipped with --py-files
        self.python = python  # the executors' Python
        self.processes: list[Process] = []
        self.workers: list[tuple[Process, Path]] = []
        self.env = {
            **os.environ,
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",
            # Wide enough that the CLI's one-line messages stay on one line in the logs.
            "COLUMNS": "250",
            "SPARK_DAEMON_JAVA_OPTS": JVM_OPTIONS,
        }
        self.env.pop("PYSPARK_PYTHON", None)
        self.env.pop("PYSPARK_DRIVER_PYTHON", None)
        port, ui = _free_ports(2)
        self.url = f"spark://127.0.0.1:{port}"
        self.master = self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)],
        )

    def _start(self, name: str, main: str, arguments: list[str]) -> Process:
        argv = [str(SPARK_HOME / "bin" / "spark-class"), main, *arguments]
        process = Process(argv, self.root / f"{name}.log", self.env)
        self.processes.append(process)
        return process

    def start_worker(self) -> Process:
        """Start a worker with one core (:meth:`ensure_workers` waits for its registration)."""
        number = len(self.workers)
        work = self.root / f"worker-{number}"
        work.mkdir()
        port, ui = _free_ports(2)
        worker = self._start(
            f"worker-{number}",
            "org.apache.spark.deploy.worker.Worker",
            [
                "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui),
                "--cores", "1", "--memory", "2g", "--work-dir", str(work), self.url,
            ],
        )  # fmt: skip
        self.workers.append((worker, work))
        return worker

    def live_workers(self) -> list[tuple[Process, Path]]:
        return [(worker, work) for worker, work in self.workers if worker.alive()]

    def ensure_workers(self, count: int) -> None:
        """Start workers (at once) until ``count`` are alive and registered with the master."""
        started = [self.start_worker() for _ in range(count - len(self.live_workers()))]
        for worker in started:
            _wait_for(
                f"{worker.log.stem} registered with the master",
                lambda worker=worker: "Successfully registered with master" in worker.output(),
                START_TIMEOUT,
                self.logs,
            )

    def submit(self, name: str, argv: Sequence[str]) -> Process:
        """Start ``spark-submit`` of the CLI's driver script, as docs/spark.md shows it."""
        command = [
            str(SPARK_HOME / "bin" / "spark-submit"),
            "--master", self.url,
            "--py-files", str(self.wheel),
            # The executors' Python: the bare environment, without aiowheel.
            "--conf", f"spark.pyspark.python={self.python}",
            # The driver's: this one (it has rich and matplotlib for the CLI and the report).
            "--conf", f"spark.pyspark.driver.python={sys.executable}",
            "--conf", "spark.sql.streaming.stateStore.providerClass="
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
            "--conf", "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled=true",
            "--conf", "spark.sql.shuffle.partitions=2",
            "--conf", "spark.executor.memory=1g",
            "--driver-java-options", JVM_OPTIONS,
            "--conf", f"spark.executor.extraJavaOptions={JVM_OPTIONS}",
            "--conf", "spark.ui.enabled=false",
            str(DRIVER_SCRIPT), *argv,
        ]  # fmt: skip
        process = Process(command, self.root / f"{name}.log", self.env)
        self.processes.append(process)
        return process

    def run(self, name: str, argv: Sequence[str]) -> str:
        """``spark-submit`` and wait; its output, or a failure with every log."""
        driver = self.submit(name, argv)
        try:
            code = driver.popen.wait(SUBMIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            driver.kill_group()
            pytest.fail(
                f"{name}: spark-submit still running after {SUBMIT_TIMEOUT:.0f} s\n{self.logs()}"
            )
        if code != 0:
            pytest.fail(f"{name}: spark-submit exited with {code}\n{self.logs()}")
        return driver.output()

    def executor_logs(self) -> list[Path]:
        return sorted(self.root.glob("worker-*/app-*/*/stderr"))

    def logs(self) -> str:
        """The tail of every log: the daemons', the drivers', the executors'."""
        paths = [process.log for process in self.processes] + self.executor_logs()
        return f"logs kept in {self.root}\n" + "\n".join(_tail(path) for path in paths)

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.kill_group()


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, pure_wheel: Path, bare_python: Path
) -> Iterator[Cluster]:
    """A master and two one-core workers; everything killed at the end whatever happens."""
    cluster = Cluster(tmp_path_factory.mktemp("cluster"), pure_wheel, bare_python)
    try:
        cluster.ensure_workers(2)
        yield cluster
    finally:
        cluster.stop()


def _distributions(names: Sequence[str]) -> list[metadata.Distribution]:
    """The installed distributions ``names`` need, dependencies included (no extras)."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        dist = metadata.distribution(name)
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in found:
            continue
        found[key] = dist
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return list(found.values())


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with aiowheel's dependencies, pandas, pyarrow, protobuf and theirs: not aiowheel.

    Made without pip or a download: the venv's site-packages holds a ``.pth`` naming one
    folder of links to exactly those distributions of this interpreter.
    """
    root = tmp_path_factory.mktemp("bare")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    linked = root / "site"
    linked.mkdir()
    own = [Requirement(text) for text in metadata.requires("aiowheel") or []]
    needed = [r.name for r in own if r.marker is None or r.marker.evaluate({"extra": ""})]
    for dist in _distributions([*needed, *EXECUTOR_PACKAGES]):
        for top in {Path(str(file)).parts[0] for file in dist.files or []}:
            target = Path(str(dist.locate_file(top)))
            if top != ".." and target.exists() and not (linked / top).exists():
                (linked / top).symlink_to(target)
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(site, "executor-packages.pth").write_text(f"{linked}\n")
    check = "import anyio, pandas, pyarrow, google.protobuf; import aiowheel"
    # From outside the checkout, whose ./aiowheel "-c" would put first on the path.
    result = subprocess.run(
        [str(python), "-c", check], capture_output=True, text=True, check=False, cwd=root
    )
    assert "No module named 'aiowheel'" in result.stderr, result.stderr
    return python


@pytest.fixture(scope="module")
def pure_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built as docs/spark.md says (pure Python), from a copy of the source, and
    renamed to ``.zip`` as the docs say."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE", "MANIFEST.in"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "aiowheel",
        source / "aiowheel",
        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.c", "*.egg-info"),
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w", str(root)],
        check=True,
        env={**os.environ, "AIOWHEEL_NO_EXTENSIONS": "1"},
    )
    (wheel,) = root.glob("aiowheel-*-py3-none-any.whl")
    # Shipped as a .zip: PySpark puts only .zip, .egg and .jar files of --py-files on the
    # executors' Python path (docs/spark.md).
    return Path(shutil.copy(wheel, root / "aiowheel.zip"))


# -- the log and the local results ------------------------------------------------------------


@pytest.fixture(scope="module")
def log(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DataFrame]:
    """About 2k events of 300 clients over 120 s, with many of every edge case, in Parquet."""
    path = tmp_path_factory.mktemp("log") / "events.parquet"
    events = generate(
        spark,
        connections=300,
        duration=120.0,
        timeout=20.0,
        tick=TICK,
        reconnect_share=0.2,
        close_share=0.2,
        duplicate_share=0.05,
        out_of_order_share=0.1,
        boundary_share=0.3,
        seed=23,
        path=str(path),
    )
    return path, events


def _timeouts() -> list[float]:
    return [float(part) for part in TIMEOUTS.split(",")]


def _expiries(spark: SparkSession, path: Path) -> tuple[set[Expiry], int]:
    """A sink's or replay's committed expiries, as a set and as a row count."""
    rows = spark.read.parquet(str(path))
    return collect_expiries(rows), rows.count()


def test_replay_on_the_cluster_equals_local(
    spark: SparkSession,
    cluster: Cluster,
    log: tuple[Path, DataFrame],
    tmp_path: Path,
) -> None:
    path, events = log
    out = tmp_path / "expiries.parquet"
    cluster.run(
        "replay",
        ["replay", "--events", str(path), "--timeouts", TIMEOUTS, "--out", str(out)],
    )
    local = collect_expiries(replay(spark, events, timeouts=_timeouts(), tick=TICK))
    assert local
    assert _expiries(spark, out) == (local, len(local)), cluster.logs()


def test_report_on_the_cluster_equals_local(
    spark: SparkSession,
    cluster: Cluster,
    log: tuple[Path, DataFrame],
    tmp_path: Path,
) -> None:
    path, events = log
    out = tmp_path / "report"
    cluster.run(
        "report",
        ["report", "--events", str(path), "--timeouts", TIMEOUTS, "--out", str(out)],
    )
    local = report(spark, events, str(tmp_path / "local"), timeouts=_timeouts(), tick=TICK)
    for name, frame in (("summary", local.summary), ("series", local.series)):
        written = pd.read_parquet(out / f"{name}.parquet")
        pd.testing.assert_frame_equal(written, frame, check_exact=True)


# -- the stream, under a worker's and a driver's death ----------------------------------------

TASK = re.compile(r"(Running|Finished) task \S+ in stage \S+ \(TID (\d+)\)")


def _running_tasks(logs: Sequence[Path]) -> set[str]:
    """The task ids an executor log shows started and not finished."""
    running: set[str] = set()
    for path in logs:
        for what, tid in TASK.findall(path.read_text(errors="replace") if path.exists() else ""):
            if what == "Running":
                running.add(tid)
            else:
                running.discard(tid)
    return running


def _new_executor_logs(work: Path, before: set[Path]) -> list[Path]:
    """The executor logs under a worker's folder that were not there ``before``."""
    return [path for path in work.glob("app-*/*/stderr") if path not in before]


def _committed_watermark(checkpoint: Path) -> float:
    """The watermark (seconds) of the query's last committed micro-batch."""
    batch = max(
        int(entry.name) for entry in (checkpoint / "commits").iterdir() if entry.name.isdigit()
    )
    offsets = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    # Spark's event time is ts moved EVENT_TIME_SHIFT seconds later (aiowheel.spark.stream).
    return float(json.loads(offsets[1])["batchWatermarkMs"] - EVENT_TIME_SHIFT * 1000) / 1000


def _final_watermark(events: DataFrame) -> float:
    """The watermark once the whole log is consumed: its latest event time (as the stream
    takes it, in whole microseconds, then milliseconds) minus the delay."""
    latest = events.agg({"ts": "max"}).first()
    assert latest is not None
    micros = int(float(latest[0]) * 1_000_000.0 // 1)
    return (micros // 1000 - round(DELAY * 1000)) / 1000


def test_stream_on_the_cluster_survives_a_worker_and_the_driver_killed(
    spark: SparkSession,
    cluster: Cluster,
    log: tuple[Path, DataFrame],
    tmp_path: Path,
) -> None:
    """Three runs on one checkpoint: the first half of the log with a worker killed while a
    task of the micro-batch runs on its executor; the second half with the driver killed in
    a micro-batch; the same command again, which goes on from the checkpoint. After the first
    and the last, the sink holds exactly replay's expiries at the watermark, each once."""
    _path, events = log
    slices = write_stream_files(events, str(tmp_path / "slices"), files=4)
    source, out, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoint"
    command = [
        "stream", "--source", str(source), "--out", str(out), "--checkpoint", str(checkpoint),
        "--timeouts", TIMEOUTS, "--delay", f"{DELAY:g}",
    ]  # fmt: skip

    def deliver(folders: Sequence[str]) -> None:
        for folder in folders:
            shutil.copytree(folder, source / Path(folder).name)

    def check_sink(what: str) -> float:
        reached = _committed_watermark(checkpoint)
        expected = collect_expiries(
            replay(spark, events, timeouts=_timeouts(), tick=TICK, horizon=reached)
        )
        emitted, rows = _expiries(spark, out)
        assert expected, what
        assert emitted == expected, f"{what}: the sink differs from replay at {reached}"
        assert rows == len(expected), f"{what}: an expiry was written twice"
        return reached

    # 1. A worker dies while a task of the micro-batch runs on its executor.
    deliver(slices[:2])
    ensure = cluster.ensure_workers
    ensure(2)
    (victim, work), _survivor = cluster.live_workers()[:2]
    before = set(work.glob("app-*/*/stderr"))
    driver = cluster.submit("stream-worker-killed", command)
    _wait_for(
        "a task running on the first worker's executor",
        lambda: bool(_running_tasks(_new_executor_logs(work, before))) or not driver.alive(),
        SUBMIT_TIMEOUT,
        cluster.logs,
    )
    killed = _running_tasks(_new_executor_logs(work, before))
    assert killed, f"the stream ended before a task ran on the first worker\n{cluster.logs()}"
    os.kill(victim.pid, signal.SIGKILL)
    victim.popen.wait()
    assert driver.popen.wait(SUBMIT_TIMEOUT) == 0, cluster.logs()
    # The tasks it was running never finished there: Spark ran them again elsewhere.
    assert not killed - _running_tasks(_new_executor_logs(work, before)), cluster.logs()
    check_sink("after the worker was killed")

    # 2. The driver dies in a micro-batch of the second half; 3. it is started again.
    deliver(slices[2:])
    before = set(cluster.executor_logs())
    driver = cluster.submit("stream-driver-killed", command)
    _wait_for(
        "a task of the second half's micro-batch running",
        lambda: (
            bool(_running_tasks(list(set(cluster.executor_logs()) - before))) or not driver.alive()
        ),
        SUBMIT_TIMEOUT,
        cluster.logs,
    )
    assert driver.alive(), f"the stream ended before the driver could be killed\n{cluster.logs()}"
    driver.kill_group()
    cluster.run("stream-restarted", command)
    reached = check_sink("after the driver was killed and restarted")
    assert reached == _final_watermark(events), "the stream did not consume the whole log"


def test_a_compiled_wheel_on_py_files_runs_the_pure_core(bare_python: Path, tmp_path: Path) -> None:
    """What docs/spark.md says of the platform wheel shipped with --py-files: Python cannot
    load its compiled core from the zip, so aiowheel falls back to the pure core, which gives
    the same deadlines. The zip is the installed package with its compiled core, as in the
    platform wheel; the path is the one Spark gives a Python worker."""
    from aiowheel import _impl
    from aiowheel.spark.replay import deadline

    if not _impl.COMPILED:
        pytest.skip("the compiled core is not built here")
    package = Path(aiowheel.__file__).parent
    shipped = tmp_path / "aiowheel.zip"
    with zipfile.ZipFile(shipped, "w") as archive:
        for path in package.rglob("*"):
            if path.suffix in (".py", ".so", ".pyd"):
                archive.write(path, Path("aiowheel") / path.relative_to(package))
        assert any(name.endswith((".so", ".pyd")) for name in archive.namelist())
    libraries = sorted(str(path) for path in (SPARK_HOME / "python" / "lib").glob("*.zip"))
    probe = (
        "import aiowheel, aiowheel._impl as twins; from aiowheel.spark.replay import deadline; "
        "print(aiowheel.__file__, twins.COMPILED, repr(deadline(1.0001, 30.0, 0.001)))"
    )
    result = subprocess.run(
        [str(bare_python), "-c", probe],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(shipped), *libraries])},
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    where, compiled, value = result.stdout.split()
    assert where.startswith(str(shipped))
    assert (compiled, value) == ("False", repr(deadline(1.0001, 30.0, 0.001)))
