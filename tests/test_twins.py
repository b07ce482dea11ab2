"""The twins keep one contract: every check here is generated from :data:`aiowheel._impl.TWINS`
and :data:`aiowheel._impl.EDGE_TWINS` (an edge's rows are skipped where its optional dependency,
pyspark for the Spark rule, is not installed).

For each twin the table lists, both homes exist and export exactly the listed names; each name
has, in both twins, the same public attributes, docstrings and parameters (names, kinds,
defaults); the examples in its docstrings run on each implementation with its own names. The
build and the package agree with the table: every compiled part in the source tree is a row of
it. A twin added to the table is covered here without a line of this module changing.

What the twins *do* alike is tested elsewhere, on both implementations in one process (the
``twins`` and ``implementation`` fixtures of ``conftest.py``): ``tests/wheel/``,
``tests/timer/``, ``tests/idle/``, ``tests/loop/``, and ``test_impl.py``'s random operations
compared step by step.
"""

from __future__ import annotations

import difflib
import doctest
import importlib
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import aiowheel
from aiowheel import _impl

# Parity of the twins: part of what a build of the compiled code must pass.
pytestmark = pytest.mark.implementations

COMPILED = _impl.compiled_implementation()
needs_compiled = pytest.mark.skipif(
    COMPILED is None, reason="the compiled implementation is not built"
)

#: Every (twin, name) the table lists.
NAMES = [(twin, name) for twin, _, _, names in _impl.TWINS for name in names]
#: Every (twin, name) the edges' table lists.
EDGE_NAMES = [(twin, name) for twin, _, _, names in _impl.EDGE_TWINS for name in names]


def public_names(obj: object) -> set[str]:
    return {name for name in dir(obj) if not name.startswith("_")}


def parameters(func: Callable[..., Any], *, method: bool) -> list[tuple[str, Any, Any]]:
    """Names, kinds and defaults of the parameters (after ``self`` for a method, which a
    compiled method makes positional-only); compiled functions carry no annotations."""
    params = list(inspect.signature(func).parameters.values())
    if method:
        params = params[1:]
    return [(p.name, p.kind, p.default) for p in params]


@pytest.mark.parametrize(("twin", "pure", "compiled", "names"), _impl.TWINS, ids=lambda v: v)
def test_each_home_exports_exactly_the_twins_names(
    twin: str, pure: str, compiled: str, names: tuple[str, ...]
) -> None:
    homes = [pure] if COMPILED is None else [pure, compiled]
    for home in homes:
        module = importlib.import_module(home)
        assert set(names) <= set(module.__all__), home
        for name in names:
            assert getattr(module, name) is getattr(
                getattr(_impl.PURE if home == pure else COMPILED, twin), name
            )
    if COMPILED is not None:
        assert sorted(importlib.import_module(compiled).__all__) == sorted(names), compiled


@needs_compiled
@pytest.mark.parametrize(("twin", "name"), NAMES)
def test_the_same_names_docstrings_and_parameters(twin: str, name: str) -> None:
    assert COMPILED is not None
    same_surface(getattr(getattr(_impl.PURE, twin), name), getattr(getattr(COMPILED, twin), name))


def edge_homes(twin: str) -> tuple[Any, Any]:
    """The pure and the compiled module of an edge's twin; skips the test without the edge's
    optional dependency or the compiled part."""
    pytest.importorskip("pyspark")
    try:
        return _impl.edge_twin(twin, "pure"), _impl.edge_twin(twin, "compiled")
    except RuntimeError as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize(("twin", "pure", "compiled", "names"), _impl.EDGE_TWINS, ids=lambda v: v)
def test_each_edge_home_exports_exactly_the_twins_names(
    twin: str, pure: str, compiled: str, names: tuple[str, ...]
) -> None:
    pure_home, compiled_home = edge_homes(twin)
    assert (pure_home.__name__, compiled_home.__name__) == (pure, compiled)
    assert set(names) <= set(pure_home.__all__)
    assert sorted(compiled_home.__all__) == sorted(names)


@pytest.mark.parametrize(("twin", "name"), EDGE_NAMES)
def test_the_edge_twins_have_the_same_names_docstrings_and_parameters(twin: str, name: str) -> None:
    pure_home, compiled_home = edge_homes(twin)
    same_surface(getattr(pure_home, name), getattr(compiled_home, name))


def same_surface(pure: Any, compiled: Any) -> None:
    """The same docstrings and parameters; for a class, the same public attributes, each
    with the same docstring and parameters."""
    # getdoc: a compiled method's docstring comes dedented.
    assert inspect.getdoc(compiled) == inspect.getdoc(pure)
    if not isinstance(pure, type):
        assert parameters(compiled, method=False) == parameters(pure, method=False)
        return
    compiled_names = public_names(compiled)
    entry = _impl.PURE.wheel.Entry
    if not issubclass(pure, entry) and COMPILED is not None:
        # A compiled handle that is its own wheel entry where the pure one holds an entry: the
        # entry's fields are how it keeps its place on the wheel, the twin's own.
        compiled_names -= public_names(COMPILED.wheel.Entry) - public_names(pure)
    assert compiled_names == public_names(pure)
    for attr in sorted(public_names(pure)):
        pure_attr, compiled_attr = getattr(pure, attr), getattr(compiled, attr)
        assert inspect.getdoc(compiled_attr) == inspect.getdoc(pure_attr), attr
        if inspect.isfunction(pure_attr):
            assert parameters(compiled_attr, method=True) == parameters(pure_attr, method=True), (
                attr
            )


def test_the_examples_in_the_twins_docstrings_run_on_each_implementation(
    twins: _impl.Implementation,
) -> None:
    globs = {name: getattr(getattr(twins, twin), name) for twin, name in NAMES}
    finder = doctest.DocTestFinder(exclude_empty=True)
    ran = 0
    for twin, name in NAMES:
        for test in finder.find(getattr(getattr(twins, twin), name), name, module=False, globs={}):
            test.globs = dict(globs)
            report: list[str] = []
            result = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS).run(
                test, out=report.append
            )
            assert result.failed == 0, "".join(report)
            ran += result.attempted
    # HierarchicalWheel's example, at least: a test that runs nothing proves nothing.
    assert ran >= 6


def test_every_compiled_part_in_the_tree_is_a_row_of_the_table() -> None:
    """A .pyx nobody lists would be built by no one (setup.py builds what the table names)."""
    root = Path(aiowheel.__file__).parent
    parts = {
        ".".join(path.relative_to(root.parent).with_suffix("").parts)
        for path in root.rglob("*.pyx")
    }
    rows = (*_impl.TWINS, *_impl.EDGE_TWINS)
    assert parts == {compiled for _, _, compiled, _ in rows}
    for _, pure, _, _ in rows:
        assert (root.parent / Path(*pure.split("."))).with_suffix(".py").is_file(), pure


@pytest.mark.parametrize("table", ["TWINS", "EDGE_TWINS"])
def test_the_table_is_a_literal_the_build_can_read(table: str) -> None:
    """setup.py reads the tables with ast, without importing the package (no anyio at build
    time)."""
    import ast

    tree = ast.parse(Path(_impl.__file__).read_text())
    (value,) = [
        node.value
        for node in tree.body
        if isinstance(node, ast.AnnAssign | ast.Assign)
        and any(
            isinstance(target, ast.Name) and target.id == table
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        )
    ]
    assert ast.literal_eval(value) == getattr(_impl, table)


# -- one text per method: the layers that hold a core --------------------------------------------

#: Each layer that holds a core, with its core's class (the pure twin's, whose text the compiled
#: twin's carries).
LAYERS = [
    (aiowheel.Timer, _impl.PURE.timer.TimerCore),
    (aiowheel.IdleTimeouts, _impl.PURE.idle.IdleCore),
]


def docstring(text: str | None) -> str:
    return inspect.cleandoc(text or "")


@pytest.mark.parametrize(("layer", "core_class"), LAYERS, ids=lambda v: v.__name__)
def test_a_layers_member_named_as_its_cores_is_documented_once(
    layer: type, core_class: type
) -> None:
    # A member the layer shares with its core either takes the core's very docstring (the
    # decorator _impl.documented_by), and then has the core's parameters, or says something
    # else: no copy of the text to drift.
    shared = {name for name in vars(layer) if name in vars(core_class) and name != "__init__"}
    assert {"__len__", "closed"} <= shared
    for name in shared:
        member, cores_member = vars(layer)[name], vars(core_class)[name]
        mine, cores = member.__doc__, cores_member.__doc__
        if mine is cores:
            if inspect.isfunction(member):  # one text, so one signature too
                assert parameters(member, method=True) == parameters(cores_member, method=True)
            continue
        similar = difflib.SequenceMatcher(None, docstring(mine), docstring(cores)).ratio()
        assert similar < 0.6, (
            f"{layer.__name__}.{name} copies {core_class.__name__}.{name}'s docstring"
        )


def test_documented_by_refuses_a_member_with_a_text_of_its_own() -> None:
    class Core:
        def touch(self) -> None:
            """The core's text."""

    class Layer:
        def touch(self) -> None:
            """A second text."""

    with pytest.raises(TypeError, match=r"Layer.touch has a docstring of its own"):
        _impl.documented_by(Core, "touch")(Layer)
