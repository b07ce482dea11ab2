"""The sdist and the wheel, built and installed as a user would, away from the checkout.

``python -m build`` makes the sdist from a copy of the checkout's files, then the wheel from that
sdist (so the sdist is proven to hold what building needs), compiling the Cython core in an
isolated build environment as pip would -- a minute or two. Then, each in a fresh virtual
environment outside the checkout:

* the wheel installs and the compiled core is what runs; in a fresh project with pytest and
  pytest-asyncio, a test runs in virtual time by naming ``"aiowheel-virtual"`` in its marker;
* the sdist installed with ``AIOWHEEL_NO_EXTENSIONS=1`` gives the pure-Python core.

The runtime dependencies (anyio, pytest, ...) are copied into the fresh environments from this
one, so installing needs no index; only the build environments fetch setuptools, wheel and
Cython, from pip's cache or the registry. Marked ``once``: scripts/test runs it in the compiled
run only, since it builds both kinds itself. Skipped only without a C compiler.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from aiowheel._impl import EDGE_TWINS, TWINS

REPO = Path(__file__).resolve().parent.parent
# The release's smoke test of an installed aiowheel (run on every wheel before publishing).
SMOKE = REPO / "scripts" / "smoke.py"

pytestmark = [pytest.mark.slow, pytest.mark.once, pytest.mark.timeout(1800)]

# Upper bounds, in seconds, far above what each step takes on a busy 2-core machine.
BUILD_TIMEOUT = 1200
INSTALL_TIMEOUT = 600
RUN_TIMEOUT = 180

# What each installed copy reports about itself.
PROBE = """
import importlib.metadata, importlib.util, json
import aiowheel, aiowheel._impl
from aiowheel.testing import run
from aiowheel import Timer

async def main():
    async with Timer(tick=0.001) as timer:
        job = timer.schedule(3600, lambda: "fired")
        return await job, timer.time() >= 3600

print(json.dumps({
    "file": aiowheel.__file__,
    "compiled": aiowheel._impl.COMPILED,
    "timer_core": aiowheel._impl.TimerCore.__module__,
    "extension": all(
        importlib.util.find_spec(compiled) is not None
        for _, _, compiled, _ in aiowheel._impl.TWINS
    ),
    "run": run(main()),
    "pytest11": sorted(
        f"{ep.name}={ep.value}"
        for ep in importlib.metadata.entry_points(group="pytest11")
        if ep.name == "aiowheel"
    ),
}))
"""

# The fresh project of the "done when": pytest + pytest-asyncio + the installed aiowheel.
FRESH_PROJECT_TEST = """
import asyncio
import time

import pytest


@pytest.mark.asyncio(loop_factories=["aiowheel-virtual"])
async def test_an_hour_in_virtual_time(virtual_clock):
    started = time.monotonic()
    await asyncio.sleep(3600)
    assert virtual_clock.time() == 3600.0
    assert time.monotonic() - started < 60
"""


def _missing_compiler() -> str | None:
    cc = sysconfig.get_config_var("CC") or ""
    if not cc or shutil.which(shlex.split(cc)[0]) is None:
        return f"no C compiler ({cc or 'CC'!r} not found): the compiled wheel cannot be built"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        return "no Python headers (Python.h): the compiled wheel cannot be built"
    return None


def _env(**changes: str) -> dict[str, str]:
    """This process's environment, without what would make a check pass for the wrong reason."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"AIOWHEEL_NO_EXTENSIONS", "AIOWHEEL_EXPECT_IMPLEMENTATION", "PYTHONPATH"}
    }
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", **changes)
    return env


def _run(
    args: list[str], *, timeout: float, cwd: Path, env: dict[str, str], log: Path | None = None
) -> str:
    """Run ``args``; its standard output. ``log``: where to keep its whole output too."""
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    output = done.stdout + done.stderr
    if log is not None:
        log.write_text(output)
    assert done.returncode == 0, f"{shlex.join(args)} failed:\n{output[-6000:]}"
    return done.stdout


def _source_files() -> list[str]:
    """The checkout's files as a commit of the working tree would have them (tracked or new,
    not ignored): no build products, no virtual environment."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"the sources are taken from git, and this is not a git checkout: {exc}")
    return [name for name in listed.decode().split("\0") if name and (REPO / name).is_file()]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("packaging")


@pytest.fixture(scope="module")
def dists(workdir: Path) -> tuple[Path, Path]:
    """(sdist, wheel): the sdist built from a copy of the checkout, the wheel from the sdist."""
    reason = _missing_compiler()
    if reason:
        pytest.skip(reason)
    source = workdir / "source"
    for name in _source_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    out = workdir / "dist"
    _run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(source)],
        timeout=BUILD_TIMEOUT,
        cwd=workdir,
        env=_env(),
        log=workdir / "build.log",
    )
    (sdist,) = out.glob("aiowheel-*.tar.gz")
    (wheel,) = out.glob("aiowheel-*.whl")
    return sdist, wheel


def _distributions(*names: str) -> list[metadata.Distribution]:
    """The installed distributions ``names`` and what they need at run time, from this
    environment's metadata (markers evaluated for this interpreter, no extras), except aiowheel
    itself, which is what gets installed."""
    todo = list(names)
    found: dict[str, metadata.Distribution] = {}
    while todo:
        name = canonicalize_name(todo.pop())
        if name in found:
            continue
        dist = found[name] = metadata.distribution(name)
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return [dist for name, dist in found.items() if name != "aiowheel"]


def _fresh_venv(path: Path, *packages: str) -> Path:
    """A new virtual environment (no pip: this one's pip installs into it), with ``packages`` and
    their dependencies but aiowheel copied in from this environment. Returns its python."""
    _run(
        [sys.executable, "-m", "venv", "--without-pip", str(path)],
        timeout=RUN_TIMEOUT,
        cwd=path.parent,
        env=_env(),
    )
    python = path / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            timeout=RUN_TIMEOUT,
            cwd=path,
            env=_env(),
        ).strip()
    )
    for dist in _distributions(*packages):
        for file in dist.files or []:
            # Skip console scripts (outside site-packages) and bytecode.
            if file.parts[0] == ".." or "__pycache__" in file.parts:
                continue
            target = purelib / file
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(str(dist.locate_file(file))), target)
    return python


def _pip_install(python: Path, *args: str, env: dict[str, str]) -> None:
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", *args],
        timeout=INSTALL_TIMEOUT,
        cwd=python.parent,
        env=env,
    )


def _probe(python: Path, cwd: Path) -> dict[str, object]:
    report: dict[str, object] = json.loads(
        _run([str(python), "-c", PROBE], timeout=RUN_TIMEOUT, cwd=cwd, env=_env())
    )
    return report


def _package_files() -> set[str]:
    """The files the sdist and the wheel must both carry: every source of the package, named as
    the checkout, the sdist and the wheel all name them (``aiowheel/...``)."""
    suffixes = {".py", ".pyx", ".pxi", ".pxd", ".pyi"}
    return {
        name
        for name in _source_files()
        if name.startswith("aiowheel/")
        and (Path(name).suffix in suffixes or name.endswith("py.typed"))
    }


# -- the Pythons claimed ---------------------------------------------------------------------


def test_every_claimed_python_is_built_for_release_and_tested() -> None:
    """The classifiers, requires-python, the release's wheel builds and the test command's
    Pythons name the same CPythons: a claim without a build or a test run fails here."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    prefix = "Programming Language :: Python :: 3."
    claimed = {
        int(c.removeprefix(prefix))
        for c in project["project"]["classifiers"]
        if c.startswith(prefix) and c.removeprefix(prefix).isdigit()
    }
    assert project["project"]["requires-python"] == f">=3.{min(claimed)}"
    built = {
        int(b.removeprefix("cp3").removesuffix("-*"))
        for b in project["tool"]["cibuildwheel"]["build"]
    }
    assert built == claimed
    script = (REPO / "scripts" / "test").read_text()
    (listed,) = re.findall(r"^claimed=\(([\d. ]+)\)$", script, re.MULTILINE)
    assert {int(v.removeprefix("3.")) for v in listed.split()} == claimed
    assert "test-command" in project["tool"]["cibuildwheel"]
    assert "scripts/smoke.py compiled" in project["tool"]["cibuildwheel"]["test-command"]


# -- the artifacts -----------------------------------------------------------------------------


def test_the_sdist_holds_the_package_sources_and_nothing_else(dists: tuple[Path, Path]) -> None:
    sdist, _ = dists
    with tarfile.open(sdist) as archive:
        top = f"{sdist.name.removesuffix('.tar.gz')}/"
        names = {
            member.name.removeprefix(top) for member in archive.getmembers() if member.isfile()
        }
    sources = {name for name in names if name.startswith("aiowheel/")}
    package = sources
    assert package == _package_files()
    assert {
        "aiowheel/_cwheel.pyx",
        "aiowheel/_cwheel.pxd",
        "aiowheel/_cticks.pxi",
        "aiowheel/_ccpython.pxd",
        "aiowheel/_ctimercore.pyi",
    } <= package
    metadata_files = {name for name in names if name.startswith("aiowheel.egg-info/")}
    assert names - sources - metadata_files == {
        "LICENSE",
        "MANIFEST.in",
        "PKG-INFO",
        "README.md",
        "pyproject.toml",
        "setup.cfg",
        "setup.py",
    }


def test_the_wheel_is_compiled_and_holds_no_build_leftovers(dists: tuple[Path, Path]) -> None:
    _, wheel = dists
    assert not wheel.name.endswith("-none-any.whl"), wheel.name  # a platform wheel
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    package = {name for name in names if name.startswith("aiowheel/")}
    extensions = {name for name in package if name.endswith((".so", ".pyd"))}
    # One compiled part per compiled home of the twin tables, each built once.
    homes = {compiled for _, _, compiled, _ in (*TWINS, *EDGE_TWINS)}
    assert len(extensions) == len(homes)
    assert {name.partition(".")[0].replace("/", ".") for name in extensions} == homes
    assert package - extensions == _package_files()
    assert not any(name.endswith((".c", ".pyc")) for name in names)


# Cython's warnings ("warning: aiowheel/x.pyx:1:2: ...") and the C compiler's ("x.c:1:2: warning:
# ..."); not setuptools' own notes ("warning: no previously-included files matching ...").
BUILD_WARNING = re.compile(r"^warning: \S+\.(pyx|pxd|pxi):\d+:\d+: |\.[ch]:\d+:\d+: warning: ")


def test_the_compiled_parts_build_without_a_warning(
    dists: tuple[Path, Path], workdir: Path
) -> None:
    """Regression (issue 27, item 12): Cython warned of negative indices under wraparound=False
    in the loop core, and gcc of an array subscript -1 in its C: every index of the compiled
    parts is defined for every input, and the build says nothing to doubt it."""
    log = (workdir / "build.log").read_text()
    assert "_cloopcore" in log  # the compiled parts were built here, and the log shows it
    warnings = [line for line in log.splitlines() if BUILD_WARNING.search(line)]
    assert warnings == []


# -- installed ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wheel_venv(dists: tuple[Path, Path], workdir: Path) -> Iterator[Path]:
    """A fresh environment with the wheel, pytest and pytest-asyncio installed: its python."""
    _, wheel = dists
    python = _fresh_venv(workdir / "wheel-venv", "aiowheel", "pytest", "pytest-asyncio")
    # No index: every dependency is already there, so this only installs the wheel.
    _pip_install(python, "--no-index", str(wheel), env=_env())
    yield python


def test_the_installed_wheel_runs_the_compiled_core(wheel_venv: Path, workdir: Path) -> None:
    report = _probe(wheel_venv, cwd=workdir)
    assert Path(str(report["file"])).is_relative_to(workdir / "wheel-venv")  # not the checkout
    assert report["compiled"] is True
    assert report["timer_core"] == "aiowheel._ctimercore"
    assert report["extension"] is True
    assert report["run"] == ["fired", True]
    assert report["pytest11"] == ["aiowheel=aiowheel.pytest_plugin"]


def test_the_release_smoke_test_passes_on_the_wheel_and_refuses_the_other_implementation(
    wheel_venv: Path, workdir: Path
) -> None:
    """scripts/smoke.py, which the release workflow runs on every wheel before publishing."""
    output = _run(
        [str(wheel_venv), str(SMOKE), "compiled"], timeout=RUN_TIMEOUT, cwd=workdir, env=_env()
    )
    assert "compiled implementation" in output
    assert "smoke test passed" in output
    refused = subprocess.run(
        [str(wheel_venv), str(SMOKE), "pure"],
        cwd=workdir,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert refused.returncode == 1
    assert "smoke test: expected the pure implementation, but" in refused.stderr
    assert "loaded the compiled one" in refused.stderr


def test_a_fresh_project_runs_a_test_in_virtual_time_by_naming_the_factory(
    wheel_venv: Path, workdir: Path
) -> None:
    project = workdir / "fresh-project"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nasyncio_default_fixture_loop_scope = "function"\n'
    )
    (project / "test_virtual.py").write_text(FRESH_PROJECT_TEST)
    output = _run(
        [str(wheel_venv), "-m", "pytest", "-p", "no:cacheprovider", "-v"],
        timeout=RUN_TIMEOUT,
        cwd=project,
        env=_env(),
    )
    assert "aiowheel-0.1.0" in output  # pytest lists the plugin, loaded from its entry point
    assert "test_virtual.py::test_an_hour_in_virtual_time PASSED" in output
    assert "1 passed" in output


def test_the_sdist_installed_without_extensions_runs_the_pure_core(
    dists: tuple[Path, Path], workdir: Path
) -> None:
    sdist, _ = dists
    python = _fresh_venv(workdir / "sdist-venv", "aiowheel")
    # pip builds the sdist itself; its build environment fetches setuptools, wheel and Cython.
    _pip_install(python, str(sdist), env=_env(AIOWHEEL_NO_EXTENSIONS="1"))
    report = _probe(python, cwd=workdir)  # run without the variable: the install itself is pure
    assert Path(str(report["file"])).is_relative_to(workdir / "sdist-venv")
    assert report["compiled"] is False
    assert report["timer_core"] == "aiowheel._timercore"
    assert report["extension"] is False
    assert report["run"] == ["fired", True]
    output = _run([str(python), str(SMOKE), "pure"], timeout=RUN_TIMEOUT, cwd=workdir, env=_env())
    assert "pure implementation" in output


# -- no C compiler -----------------------------------------------------------------------------

NO_COMPILER = "/nonexistent/cc"  # setuptools compiles with $CC: a compiler that is not there


def _pip_wheel(sdist: Path, out: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """pip's own build of ``sdist`` into ``out`` (no cache: the build itself is under test)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-cache-dir",
            "--quiet",
            "--wheel-dir",
            str(out),
            str(sdist),
        ],
        cwd=sdist.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )


def test_the_sdist_built_without_a_compiler_gives_a_wheel_tagged_pure(
    dists: tuple[Path, Path], workdir: Path
) -> None:
    sdist, _ = dists
    out = workdir / "no-compiler"
    done = _pip_wheel(sdist, out, _env(CC=NO_COMPILER))
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = out.glob("aiowheel-*.whl")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name  # not cp3XX-cp3XX-<platform>
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (wheel_file,) = (name for name in names if name.endswith(".dist-info/WHEEL"))
        tags = archive.read(wheel_file).decode()
    assert not any(name.endswith((".so", ".pyd")) for name in names)
    assert "Root-Is-Purelib: true" in tags
    assert "Tag: py3-none-any" in tags


def test_the_sdist_built_without_a_compiler_fails_when_the_compiled_core_is_required(
    dists: tuple[Path, Path], workdir: Path
) -> None:
    sdist, _ = dists
    out = workdir / "no-compiler-required"
    done = _pip_wheel(sdist, out, _env(CC=NO_COMPILER, AIOWHEEL_REQUIRE_EXTENSIONS="1"))
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "aiowheel's compiled core was not built" in output
    assert "AIOWHEEL_REQUIRE_EXTENSIONS is set" in output
    assert not list(out.glob("*.whl"))
