"""Build the optional compiled parts: one extension per compiled home in ``aiowheel._impl.TWINS``
and ``aiowheel._impl.EDGE_TWINS``.

All other metadata is in pyproject.toml.

The parts are read from the twin table, not listed here: ``aiowheel/_impl.py`` is parsed
(``ast``; the package is not imported) and every distinct compiled module of both is built
from the ``.pyx`` of that name (``aiowheel._ctimercore`` from ``aiowheel/_ctimercore.pyx``).

The extensions are optional, as in aio-libs' packages: without Cython or a working C compiler,
or with ``AIOWHEEL_NO_EXTENSIONS`` set to a non-empty value, the install still succeeds, with a
warning, and ``aiowheel._impl`` falls back to the pure-Python twins. A wheel built with no
extension in it is tagged as the pure-Python wheel it is (``py3-none-any``), not for the platform.

With ``AIOWHEEL_REQUIRE_EXTENSIONS`` set to a non-empty value, a compiled part that cannot be built
is an error instead: the build, and so ``pip install``, fails and says why (users who want the
compiled core: ``AIOWHEEL_REQUIRE_EXTENSIONS=1 pip install --no-binary aiowheel aiowheel``).

On a free-threaded CPython (3.13t, 3.14t: ``Py_GIL_DISABLED``) the compiled parts are not built:
they rely on the GIL (``aiowheel/_ccpython.pxd``), and importing them would turn it back on. The
pure-Python core runs there with the GIL off (docs/development.md, "Free-threaded Python").

With ``AIOWHEEL_CPYTHON_FALLBACK`` set to a non-empty value the parts are compiled without any
use of CPython's internals (the C macro of that name; see ``aiowheel/_ccpython.pxd``):
``aiowheel._impl.CPYTHON_FALLBACK`` is then True.
"""

from __future__ import annotations

import ast
import glob
import os
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_ext import build_ext

SRC = Path(".")
# Set to a non-empty value at build time: compile the CPython fallback build (see _extensions).
FALLBACK = "AIOWHEEL_CPYTHON_FALLBACK"
# Set to a non-empty value at build time: a compiled part that is not built fails the build.
REQUIRE = "AIOWHEEL_REQUIRE_EXTENSIONS"
# Every other Cython source: the .pxi files a part includes and the .pxd files it cimports. A
# glob, so that a new one rebuilds every part when it changes without being listed here.
DEPENDS = sorted(glob.glob("aiowheel/**/*.px[id]", recursive=True))


def compiled_homes() -> list[str]:
    """The distinct compiled modules of ``aiowheel._impl.TWINS`` and ``EDGE_TWINS``, in the
    tables' order."""
    tree = ast.parse((SRC / "aiowheel" / "_impl.py").read_text())
    tables = {}
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            for table in ("TWINS", "EDGE_TWINS"):
                if any(isinstance(t, ast.Name) and t.id == table for t in targets):
                    assert node.value is not None
                    tables[table] = ast.literal_eval(node.value)
    if set(tables) != {"TWINS", "EDGE_TWINS"}:
        raise RuntimeError("aiowheel/_impl.py lacks its TWINS or EDGE_TWINS table")
    rows = [*tables["TWINS"], *tables["EDGE_TWINS"]]
    return list(dict.fromkeys(compiled for _, _, compiled, _ in rows))


class OptionalBuildExt(build_ext):
    """build_ext that turns any failure into a warning: the pure-Python wheel is the fallback."""

    def initialize_options(self) -> None:
        super().initialize_options()
        self.failed: set[str] = set()

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, missing headers, ...
            _warn(f"{type(exc).__name__}: {exc}")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self.failed.add(ext.name)
            _warn(f"{ext.name}: {type(exc).__name__}: {exc}")

    def copy_extensions_to_source(self) -> None:
        # In-place (editable) builds copy the built files: there is none for a failed one.
        self.extensions = [ext for ext in self.extensions if ext.name not in self.failed]
        super().copy_extensions_to_source()


class PureWhenNothingBuiltWheel(bdist_wheel):
    """bdist_wheel that tags a wheel with no compiled part in it as pure (``py3-none-any``).

    setuptools tags a wheel for the platform as soon as the project declares an extension, built
    or not; a wheel without one runs anywhere, and says so.
    """

    def get_tag(self) -> tuple[str, str, str]:
        # Called once the build has run; the files are in the wheel's root either way, so
        # turning the root pure only changes the tag and the Root-Is-Purelib line.
        if not self.root_is_pure and not _built(self.get_finalized_command("build_ext")):
            self.root_is_pure = True
        return super().get_tag()


def _built(command: build_ext) -> list[str]:
    """The extensions ``command`` produced: the ones whose file exists."""
    return [
        ext.name for ext in command.extensions if os.path.exists(command.get_ext_fullpath(ext.name))
    ]


def _warn(reason: str) -> None:
    if os.environ.get(REQUIRE):
        raise SystemExit(
            f"error: aiowheel's compiled core was not built ({reason}), and {REQUIRE} is set: "
            "install a C compiler and Python's headers (and Cython), or unset it to install the "
            "pure-Python core"
        )
    print(
        f"WARNING: aiowheel's compiled core was not built ({reason}); "
        "the pure-Python core will be used.",
        file=sys.stderr,
    )


def _extensions() -> list[Extension]:
    if os.environ.get("AIOWHEEL_NO_EXTENSIONS"):
        if os.environ.get(REQUIRE):
            raise SystemExit(f"error: both AIOWHEEL_NO_EXTENSIONS and {REQUIRE} are set")
        return []
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        _warn("a free-threaded Python: the compiled core needs the GIL")
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        _warn("Cython is not installed")
        return []
    # No fused multiply-add: the float rounding must match CPython's, operation by operation.
    extra = [] if sys.platform == "win32" else ["-ffp-contract=off"]
    # The CPython fallback build: plain C-API fallbacks for every use of CPython's internals
    # (aiowheel/_ccpython.pxd), for the day one of them breaks on a new CPython.
    macros = [("AIOWHEEL_CPYTHON_FALLBACK", "1")] if os.environ.get(FALLBACK) else []
    extensions = [
        Extension(
            name,
            [str(SRC.joinpath(*name.split(".")).with_suffix(".pyx"))],
            depends=DEPENDS,
            extra_compile_args=extra,
            define_macros=macros,
            optional=True,
        )
        for name in compiled_homes()
    ]
    try:
        # include_path: a part's `cimport aiowheel._cwheel` finds aiowheel/_cwheel.pxd.
        return list(
            cythonize(
                extensions, include_path=[str(SRC)], compiler_directives={"language_level": 3}
            )
        )
    except Exception as exc:  # a Cython error: still install, pure
        _warn(f"cythonize failed: {exc}")
        return []


setup(
    ext_modules=_extensions(),
    cmdclass={"build_ext": OptionalBuildExt, "bdist_wheel": PureWhenNothingBuiltWheel},
    # The generated C source is a build product: wheels carry the compiled module, not it.
    exclude_package_data={"aiowheel": ["*.c"]},
)
