"""The shape of the package: layers point down, twins share one contract, nobody peeks.

``LAYERS`` declares a layer for every module of the package (a module missing from it fails
``test_every_module_has_a_layer``). Every ``aiowheel`` import anywhere in a module -- at top
level, under ``if TYPE_CHECKING:``, inside a function; a Cython ``cimport`` too -- must point to
a module of the same or a lower layer, and the imports must form no cycle. The checker is also
run on made-up sources (``test_the_checker_fails_on_...``) to show that an upward import, a
cycle, an unknown module, a layer above reaching a pure twin directly, and an upward or
undeclared ``cimport`` between compiled parts are each caught.

Each compiled part is a node of its own: ``_c<name>.pyx`` with its ``_c<name>.pxd`` (what it
exports to the parts above) and the ``.pxi`` files it includes. A ``.pxd`` without a ``.pyx`` is
C plumbing the parts share (``_cint64.pxd``, ``_ccpython.pxd``, ``_ccontext.pxd``), a node of
layer 0. ``COMPILED_ARROWS`` is the one list of the cimports between compiled parts.

The layers, lowest first (``aiowheel/__init__.py`` states the same):

0. the shared contract: :mod:`aiowheel.exceptions`, :mod:`aiowheel._checks` (every check of a
   user's input and its message) and :mod:`aiowheel._lateness` (the lateness histogram's
   buckets);
   The compiled parts' shared C plumbing is here too.
1. the wheel twins -- :mod:`aiowheel._wheel` and the compiled :mod:`aiowheel._cwheel` --, the
   event-loop adapters :mod:`aiowheel._backends`, the host interface :mod:`aiowheel._host`
   (what a feature may ask of its Timer) and the twins' contract :mod:`aiowheel._contract`;
2. the Timer core twins :mod:`aiowheel._timercore` and :mod:`aiowheel._ctimercore`, the loop
   core twins :mod:`aiowheel._loopcore` and :mod:`aiowheel._cloopcore`, and the idle core twins
   :mod:`aiowheel._idlecore` and :mod:`aiowheel._cidlecore` (each over its side's wheel, see
   ``COMPILED_ARROWS``; the idle cores talk to their Timer through :mod:`aiowheel._host`);
3. the selector :mod:`aiowheel._impl`;
4. the Timer layer: :mod:`aiowheel.timer` and :mod:`aiowheel.timeouts`;
5. features on the Timer: :mod:`aiowheel.idle`, the event loop :mod:`aiowheel.loop` (a package:
   one module per base loop);
6. edges: the package itself, the CLI, the demo, test support and the Spark pipeline.

From layer 4 up, the twins are reached only through :mod:`aiowheel._impl`: importing
:mod:`aiowheel._wheel`, :mod:`aiowheel._timercore` or :mod:`aiowheel._cwheel` there fails.
Optional third-party imports (uvloop, trio, pyspark) are not aiowheel's and are not checked.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from aiowheel._impl import EDGE_TWINS
from aiowheel._impl import TWINS as TWIN_TABLE

PACKAGE = Path(__file__).resolve().parent.parent / "aiowheel"

LAYERS: dict[str, int] = {
    "aiowheel.exceptions": 0,
    "aiowheel._checks": 0,
    "aiowheel._lateness": 0,
    "aiowheel._defaults": 0,
    "aiowheel._cint64": 0,
    "aiowheel._ccpython": 0,
    "aiowheel._ccontext": 0,
    "aiowheel._wheel": 1,
    "aiowheel._snapshot": 1,  # the pure cores' shared context snapshots
    "aiowheel._cwheel": 1,
    "aiowheel._chandle": 1,  # what the compiled handles over the wheel share (cimports it)
    "aiowheel._backends": 1,
    "aiowheel._backends._asyncio": 1,
    "aiowheel._backends._trio": 1,
    "aiowheel._host": 1,
    "aiowheel._contract": 1,
    "aiowheel._timercore": 2,
    "aiowheel._ctimercore": 2,
    "aiowheel._loopcore": 2,
    "aiowheel._cloopcore": 2,
    "aiowheel._idlecore": 2,
    "aiowheel._cidlecore": 2,
    "aiowheel._impl": 3,
    "aiowheel.timeouts": 4,
    "aiowheel.timer": 4,
    "aiowheel.idle": 5,
    "aiowheel.loop": 5,
    "aiowheel.loop._wheelloop": 5,
    "aiowheel.loop._selector": 5,
    "aiowheel.loop._uvloop": 5,
    "aiowheel": 6,
    "aiowheel.__main__": 6,
    "aiowheel.demo.*": 6,  # the demo package, one concern per module
    "aiowheel.testing": 6,
    "aiowheel.pytest_plugin": 6,
    "aiowheel.spark.*": 6,  # the Spark pipeline, every module of it: an edge
}

# The twins, both homes of every row of the twin table: above the selector, reached only through
# aiowheel._impl.
TWINS = {home for _, pure, compiled, _ in TWIN_TABLE for home in (pure, compiled)}
SELECTOR_LAYER = LAYERS["aiowheel._impl"]

# The compiled parts, and the compiled parts each may cimport: the wheel, the layer below. (The
# idle core talks to its Timer through the host interface, aiowheel._host, and cimports no Timer
# core.) Any other arrow between them fails.
COMPILED_ARROWS: dict[str, set[str]] = {
    "aiowheel._cwheel": set(),
    "aiowheel._ctimercore": {"aiowheel._cwheel"},
    "aiowheel._cloopcore": {"aiowheel._cwheel"},
    "aiowheel._cidlecore": {"aiowheel._cwheel"},
    # An edge's twin (aiowheel._impl.EDGE_TWINS): cimports no other part, imports its edge's
    # modules (the pure twin's types, the rule's constants and its fallback arithmetic).
    "aiowheel.spark._ckeystate": {
        "aiowheel.spark",
        "aiowheel.spark._keystate",
        "aiowheel.spark.events",
        "aiowheel.spark.replay",
    },
    # The shard's visit: what a shard stores and how, from the neutral module both twins import;
    # it cimports the compiled rule, one layer down, to visit keys as C records.
    "aiowheel.spark._cvisit": {"aiowheel.spark._shard", "aiowheel.spark._ckeystate"},
}
# What a compiled part may import besides: the shared contract and the shared C plumbing.
COMPILED_MAY_USE = {
    "aiowheel._checks",
    "aiowheel._defaults",
    "aiowheel._lateness",
    "aiowheel.exceptions",
    "aiowheel._cint64",
    "aiowheel._ccpython",
    "aiowheel._ccontext",
    "aiowheel._chandle",
}

# Known exceptions, each to be removed when it is fixed (the test fails when one is obsolete).
EXCEPTIONS: set[tuple[str, str]] = set()


def layer_of(module: str) -> int | None:
    if module in LAYERS:
        return LAYERS[module]
    for pattern, layer in LAYERS.items():
        package = pattern.removesuffix(".*")
        if pattern != package and (module == package or module.startswith(f"{package}.")):
            return layer
    return None


# -- reading the imports ------------------------------------------------------------------------


_INCLUDE = re.compile(r"""^\s*include\s+["']([\w.]+)["']""", re.M)


def module_name(path: Path, root: Path, includes: dict[str, str]) -> str:
    """The module a source file (under ``root``) is part of: a ``.pxi`` belongs to the part that
    includes it (``includes``: file name -> module); a ``.pxd`` to the ``.pyx`` of its name, or
    else it is a module of its own (C plumbing)."""
    if path.suffix == ".pxi":
        return includes.get(path.name, f"{path.name} (included by no part)")
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def sources(package: Path = PACKAGE) -> dict[str, list[tuple[Path, str]]]:
    """Every source file of ``package``, grouped by the module it is part of."""
    paths = [
        path
        for path in sorted(package.rglob("*"))
        if path.suffix in (".py", ".pyx", ".pxi", ".pxd") and "__pycache__" not in path.parts
    ]
    texts = {path: path.read_text() for path in paths}
    includes = {
        name: module_name(path, package.parent, {})
        for path in paths
        if path.suffix == ".pyx"
        for name in _INCLUDE.findall(texts[path])
    }
    found: dict[str, list[tuple[Path, str]]] = {}
    for path in paths:
        found.setdefault(module_name(path, package.parent, includes), []).append(
            (path, texts[path])
        )
    return found


def python_imports(module: str, text: str, is_package: bool) -> Iterator[str]:
    """The aiowheel modules ``text`` imports, wherever the import statement is."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module if is_package else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}".rstrip(".")
            for alias in node.names:
                # `from aiowheel import _wheel` imports the submodule aiowheel._wheel.
                yield f"{base}.{alias.name}"


_CYTHON_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+c?import|c?import\s+([\w.]+))", re.M)


def cython_imports(text: str) -> Iterator[str]:
    for match in _CYTHON_IMPORT.finditer(text):
        yield match.group(1) or match.group(2)


def resolve(name: str, modules: set[str]) -> str | None:
    """The package module ``name`` refers to: itself, or the longest module it starts with."""
    if not (name == "aiowheel" or name.startswith("aiowheel.")):
        return None
    while name not in modules and "." in name:
        name = name.rpartition(".")[0]
    return name if name in modules else None


def import_graph(files: dict[str, list[tuple[Path, str]]]) -> dict[str, set[str]]:
    modules = set(files)
    graph: dict[str, set[str]] = {}
    for module, parts in files.items():
        targets = graph.setdefault(module, set())
        for path, text in parts:
            if path.suffix == ".py":
                names = python_imports(module, text, path.name == "__init__.py")
            else:
                names = cython_imports(text)
            for name in names:
                target = resolve(name, modules)
                if target is not None and target != module:
                    targets.add(target)
    return graph


# -- the rules ----------------------------------------------------------------------------------


def violations(graph: dict[str, set[str]]) -> list[str]:
    """Every broken rule in ``graph`` (module -> the package modules it imports)."""
    found = [
        f"{module} has no layer: add it to LAYERS in tests/test_layers.py"
        for module in sorted(graph)
        if layer_of(module) is None
    ]
    for module, targets in sorted(graph.items()):
        source = layer_of(module)
        for target in sorted(targets):
            goal = layer_of(target)
            if source is None or goal is None or (module, target) in EXCEPTIONS:
                continue
            if goal > source:
                found.append(f"{module} (layer {source}) imports {target} (layer {goal})")
            elif target in TWINS and source > SELECTOR_LAYER:
                found.append(f"{module} imports the twin {target}: use aiowheel._impl")
    found.extend(f"import cycle: {' -> '.join(cycle)}" for cycle in cycles(graph))
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected group of modules that import each other."""
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                found.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    return found


# -- the package --------------------------------------------------------------------------------


def test_every_module_has_a_layer() -> None:
    unknown = sorted(module for module in sources() if layer_of(module) is None)
    assert not unknown, f"add these to LAYERS in tests/test_layers.py: {unknown}"
    declared = {name for name in LAYERS if not name.endswith(".*")}
    assert not declared - set(sources()), "LAYERS names modules that do not exist"


def test_imports_point_down_and_form_no_cycle() -> None:
    assert violations(import_graph(sources())) == []


def test_known_exceptions_still_exist() -> None:
    """An exception that no longer happens is removed from EXCEPTIONS, so it cannot return."""
    graph = import_graph(sources())
    for module, target in EXCEPTIONS:
        assert target in graph.get(module, set()), f"remove {(module, target)} from EXCEPTIONS"


def compiled_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a compiled part that ``COMPILED_ARROWS`` and ``COMPILED_MAY_USE`` do not
    allow, and every allowed arrow between parts that is missing (the table is kept true)."""
    found = []
    for part, allowed in COMPILED_ARROWS.items():
        if part not in graph:  # a made-up package without it (the real one has every part)
            continue
        targets = graph[part]
        found += [
            f"{part} imports {target}: not in COMPILED_ARROWS"
            for target in sorted(targets - allowed - COMPILED_MAY_USE)
        ]
        found += [
            f"{part} no longer imports {target}: remove it from COMPILED_ARROWS"
            for target in sorted(allowed - targets)
        ]
    return found


def test_every_compiled_part_is_a_node_of_its_own() -> None:
    """The twin tables' compiled homes are exactly the parts here, each with its .pxd: a core,
    or an edge's part that another part cimports (the compiled visit cimports the compiled
    rule); an edge's part no part cimports has none."""
    cores = {compiled for _, _, compiled, _ in TWIN_TABLE}
    edges = {compiled for _, _, compiled, _ in EDGE_TWINS}
    assert cores | edges == set(COMPILED_ARROWS)
    cimported = set().union(*COMPILED_ARROWS.values()) & set(COMPILED_ARROWS)
    files = sources()
    for part in COMPILED_ARROWS:
        names = {path.name for path, _ in files[part]}
        stem = part.rpartition(".")[2]
        assert (
            {f"{stem}.pyx", f"{stem}.pxd"} <= names
            if part in cores or part in cimported
            else (f"{stem}.pyx" in names and f"{stem}.pxd" not in names)
        ), part


def test_the_compiled_parts_cimport_only_the_layer_below() -> None:
    assert compiled_violations(import_graph(sources())) == []


# -- the checker catches what it must -----------------------------------------------------------


def made_up(**modules: str) -> dict[str, set[str]]:
    """The import graph of made-up sources, ``module_name=source`` (dots as double underscores)."""
    files = {
        name.replace("__", "."): [(Path(f"{name}.py"), text)] for name, text in modules.items()
    }
    return import_graph(files)


def test_the_checker_fails_on_an_upward_import_inside_a_function() -> None:
    graph = made_up(
        aiowheel___wheel="def f():\n    from aiowheel.timer import Timer\n",
        aiowheel__timer="from aiowheel._impl import TimerCore\n",
        aiowheel___impl="",
    )
    assert violations(graph) == ["aiowheel._wheel (layer 1) imports aiowheel.timer (layer 4)"]


def test_the_checker_fails_on_an_upward_type_checking_import() -> None:
    graph = made_up(
        aiowheel___checks="if TYPE_CHECKING:\n    from aiowheel import idle\n",
        aiowheel__idle="",
    )
    assert violations(graph) == ["aiowheel._checks (layer 0) imports aiowheel.idle (layer 5)"]


def test_the_checker_fails_on_a_cycle_within_a_layer() -> None:
    graph = made_up(
        aiowheel__timer="import aiowheel.timeouts\n",
        aiowheel__timeouts="from aiowheel.timer import Timer\n",
    )
    assert violations(graph) == [
        "import cycle: aiowheel.timeouts -> aiowheel.timer -> aiowheel.timeouts"
    ]


def test_the_checker_fails_on_a_module_without_a_layer() -> None:
    graph = made_up(aiowheel__utils="")
    assert violations(graph) == [
        "aiowheel.utils has no layer: add it to LAYERS in tests/test_layers.py"
    ]


@pytest.mark.parametrize("twin", sorted(TWINS))
def test_the_checker_fails_on_a_layer_above_reaching_a_twin(twin: str) -> None:
    name = twin.replace(".", "__")
    graph = made_up(aiowheel__idle=f"from {twin} import X\n", **{name: ""})
    assert violations(graph) == [f"aiowheel.idle imports the twin {twin}: use aiowheel._impl"]


def made_up_package(tmp_path: Path, **files: str) -> dict[str, set[str]]:
    """The import graph of a made-up package ``aiowheel`` of ``file_name=source`` files."""
    package = tmp_path / "aiowheel"
    package.mkdir()
    for name, text in files.items():
        (package / name).write_text(text)
    return import_graph(sources(package))


def test_the_checker_fails_on_an_upward_cimport(tmp_path: Path) -> None:
    graph = made_up_package(
        tmp_path,
        **{
            "_cwheel.pyx": 'include "_cticks.pxi"\n',
            "_cwheel.pxd": "cdef class Entry:\n    pass\n",
            "_cticks.pxi": "from aiowheel._ctimercore cimport TimerCore\n",
            "_ctimercore.pyx": "from aiowheel._cwheel cimport Entry\n",
            "_ctimercore.pxd": "from aiowheel._cwheel cimport Entry\n",
        },
    )
    assert graph["aiowheel._cwheel"] == {"aiowheel._ctimercore"}  # the .pxi is the wheel's
    assert violations(graph) == [
        "aiowheel._cwheel (layer 1) imports aiowheel._ctimercore (layer 2)",
        "import cycle: aiowheel._ctimercore -> aiowheel._cwheel -> aiowheel._ctimercore",
    ]


def test_the_checker_fails_on_a_cimport_between_parts_not_declared(tmp_path: Path) -> None:
    graph = made_up_package(
        tmp_path,
        **{
            "_cwheel.pyx": "",
            "_ctimercore.pyx": "from aiowheel._cidlecore cimport IdleCore\n",
            "_cloopcore.pyx": "from aiowheel._cwheel cimport Entry\n",
            "_cidlecore.pxd": "from aiowheel._ctimercore cimport TimerCore\n",
            "_cidlecore.pyx": "from aiowheel._cwheel cimport _to_ticks\n",
        },
    )
    assert violations(graph) == [
        "import cycle: aiowheel._cidlecore -> aiowheel._ctimercore -> aiowheel._cidlecore"
    ]
    assert compiled_violations(graph) == [
        "aiowheel._ctimercore imports aiowheel._cidlecore: not in COMPILED_ARROWS",
        "aiowheel._ctimercore no longer imports aiowheel._cwheel: remove it from COMPILED_ARROWS",
        # The idle core holds its Timer through the host interface: no arrow to a Timer core.
        "aiowheel._cidlecore imports aiowheel._ctimercore: not in COMPILED_ARROWS",
    ]


def test_the_checker_fails_on_a_part_include_of_no_part(tmp_path: Path) -> None:
    graph = made_up_package(tmp_path, **{"_cwheel.pyx": "", "_csort.pxi": ""})
    assert violations(graph) == [
        "_csort.pxi (included by no part) has no layer: add it to LAYERS in tests/test_layers.py"
    ]


def test_the_checker_reads_cython_imports() -> None:
    text = "cimport cython\nfrom aiowheel.timer import Timer\ninclude 'x.pxi'\n"
    assert list(cython_imports(text)) == ["cython", "aiowheel.timer"]


# -- nobody peeks into the wheel's entries ------------------------------------------------------

# The entry fields only the wheel twins may touch; a layer asks the wheel's public methods.
PRIVATE_ENTRY_FIELDS = re.compile(r"\._(bucket|index|ticks|seq)\b")
# The wheel twins' own sources: the pure wheel and the compiled wheel's parts (not the Timer core).
WHEEL_SOURCES = {
    "_wheel.py",
    "_cwheel.pyx",
    "_cwheel.pxd",
    "_cchecks.pxi",
    "_cticks.pxi",
    "_centry.pxi",
    "_csort.pxi",
}


def test_no_module_outside_the_wheel_touches_an_entrys_private_fields() -> None:
    offenders = []
    for parts in sources().values():
        for path, text in parts:
            if path.name in WHEEL_SOURCES:
                continue
            for number, line in enumerate(text.splitlines(), 1):
                if PRIVATE_ENTRY_FIELDS.search(line):
                    offenders.append(f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}")
    assert offenders == []


def test_the_wheel_sources_named_here_exist() -> None:
    assert {path.name for path in PACKAGE.iterdir()} >= WHEEL_SOURCES


# -- one home per fact --------------------------------------------------------------------------

# asyncio's messages that the cores repeat, and the defaults of a wheel's shape: each written in
# one file, which every layer and both twins import (the constants' names are used elsewhere).
FACT_HOMES = {
    '"delay must not be None"': "_checks.py",
    '"when cannot be None"': "_checks.py",
    "DEFAULT_TICK: Final = 0.001": "_defaults.py",
    "DEFAULT_WHEEL_SIZE: Final = 64": "_defaults.py",
}
# A default tick or wheel size written as a literal in a signature (the Spark pipeline and the
# demo have options of their own).
LITERAL_DEFAULT = re.compile(r"\b(tick|wheel_size)\s*(:[^=\n]*)?=\s*(0\.001|64)\b")


def core_sources() -> list[Path]:
    return [
        path
        for path in PACKAGE.rglob("*")
        if path.suffix in {".py", ".pyx", ".pxd", ".pxi", ".pyi"}
        and not {"spark", "demo"} & set(path.relative_to(PACKAGE).parts)
    ]


@pytest.mark.parametrize(("fact", "home"), FACT_HOMES.items())
def test_each_shared_message_and_default_is_written_in_one_file(fact: str, home: str) -> None:
    assert [path.name for path in core_sources() if fact in path.read_text()] == [home]


def test_no_signature_repeats_the_default_tick_or_wheel_size() -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}"
        for path in core_sources()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if LITERAL_DEFAULT.search(line)
    ]
    assert found == []
