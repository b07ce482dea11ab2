"""Sphinx configuration of the aiowheel documentation site.

Build it (scripts/test does, strictly, before pytest):

    python -m sphinx -W --keep-going -n -q docs docs/_build/html

Why Sphinx with MyST rather than MkDocs (decided for issue 12, late 2026): MkDocs 1.x has had no
maintainer since 2024 and its 2.0 drops the plugin system mkdocstrings needs; Material for
MkDocs is in maintenance mode and its successor, Zensical, is a 0.x with "preliminary"
mkdocstrings support. Sphinx is actively maintained, and its autodoc reads our docstrings as
they are written -- reST roles (``:class:``, ``:func:``), double-backtick literals, and the
Google ``Args:``/``Raises:`` sections through napoleon -- where mkdocstrings would print the
roles verbatim. MyST renders the Markdown pages we already had unchanged. Everything it needs
is in the ``dev`` extra and nothing is fetched at build time: no intersphinx inventories, no
web fonts (Furo uses the system font stack), no analytics.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from docutils.nodes import Element
    from sphinx.application import Sphinx
    from sphinx.environment import BuildEnvironment

# Document the pure-Python modules, the readable specification: the compiled twins have the same
# API, but Cython classes do not expose their signatures to autodoc. Must precede any import of
# aiowheel, which autodoc does below.
os.environ["AIOWHEEL_NO_EXTENSIONS"] = "1"

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiowheel  # noqa: E402

project = "aiowheel"
author = "aiowheel developers"
copyright = "aiowheel developers"
release = version = aiowheel.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]

# -- MyST ----------------------------------------------------------------------------------------
# Anchors for `[text](page.md#a-heading)` links, as GitHub makes them.
myst_heading_anchors = 3
# loop.md, spark.md and benchmarks.md open with a level-2 heading (they began as sections of the
# README); MyST renders them right but reports the skipped level. The other pages start at H1.
suppress_warnings = ["myst.header"]

# -- API reference -------------------------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "description"
# Types only for what a docstring documents: no constructor parameters of handles users never
# make themselves.
autodoc_typehints_description_target = "documented_params"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_custom_sections = ["Guarantees"]


def _napoleon_skipping_attributes() -> None:
    """Keep napoleon off attribute and property docstrings.

    Ours are prose ("The limit on pending timers given to the constructor (None: no limit).");
    napoleon reads anything before the first colon of such a docstring as its type. Replaces the
    handler napoleon connects in its setup, which runs after this file.
    """
    from sphinx.ext import napoleon

    process = napoleon._process_docstring

    def process_unless_attribute(app: Sphinx, what: str, *rest: Any) -> None:
        if what not in {"attribute", "property", "data"}:
            process(app, what, *rest)

    napoleon._process_docstring = process_unless_attribute


_napoleon_skipping_attributes()

# Every cross-reference must resolve (-n), except to what this site does not document: the
# standard library, third-party packages and aiowheel's private modules. (intersphinx would link
# the first two but fetches inventories over the network at build time.)
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(asyncio|contextvars|collections|typing|types|selectors|enum|pathlib)(\..*)?"),
    (r"py:.*", r"(anyio|trio|uvloop|pyspark|pandas)(\..*)?"),
    # Private names: modules, helpers and methods the reference leaves out on purpose.
    (r"py:.*", r"(.*\.)?_[A-Za-z].*"),
    # Type variables and builtins in signatures.
    (r"py:class", r"(aiowheel\..*\.)?(T|P|E|K|H)"),
    (r"py:class", r"(Hashable|Callable|Coroutine|Any|Path|NoneType)"),
    (r"py:class", r"(float|int|str|bool|object|None|BaseException|Exception|TimeoutError)"),
    # aiowheel.spark.stream's docstrings name its schema by its short name; the reference
    # documents the Spark functions at package level and the schema as
    # aiowheel.spark.stream.EXPIRY_SCHEMA.
    (r"py:data", r"EXPIRY_SCHEMA"),
    # What TimerHost's call_at and open_cancel_scope return: described in its docstring, not
    # published under names of their own (aiowheel._host.FiledHandle, _backends.CancelScope).
    (r"py:class", r"(FiledHandle|CancelScope)"),
    # aiowheel.pytest_plugin's alias for a zero-argument loop factory, Callable[[], loop].
    (r"py:class", r"LoopFactory"),
]


def _resolve_public_short_name(
    app: Sphinx, env: BuildEnvironment, node: Element, contnode: Element
) -> Element | None:
    """A docstring may name a public class by its short name from a module that imports it
    (``:class:`TimerHandle``` in aiowheel.timer): resolve it to the ``aiowheel.X`` the reference
    documents, if there is one."""
    target = node.get("reftarget", "")
    if node.get("refdomain") != "py" or "." in target or target not in aiowheel.__all__:
        return None
    domain = env.get_domain("py")
    return domain.resolve_xref(
        env, node["refdoc"], app.builder, node["reftype"], f"aiowheel.{target}", node, contnode
    )


def setup(app: Sphinx) -> None:
    app.connect("missing-reference", _resolve_public_short_name)


# -- HTML ----------------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"aiowheel {release}"
html_static_path: list[str] = []
html_show_sourcelink = False
