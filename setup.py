"""Build the optional extension ``aiowheel._cwheel``: the compiled wheel and Timer core.

All other metadata is in pyproject.toml.

The extension is optional, as in aio-libs' packages: without Cython or a working C compiler, or
with ``AIOWHEEL_NO_EXTENSIONS`` set to a non-empty value, the install still succeeds, with a
warning, and ``aiowheel._impl`` falls back to the pure-Python wheel.
"""

from __future__ import annotations

import glob
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

PYX = "src/aiowheel/_cwheel.pyx"
# Every other Cython source: the parts PYX includes (see its docstring) and any .pxd. A glob, so
# that a new part rebuilds the extension when it changes without being listed here.
DEPENDS = sorted(glob.glob("src/aiowheel/**/*.px[id]", recursive=True))


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


def _warn(reason: str) -> None:
    print(
        f"WARNING: aiowheel's compiled wheel was not built ({reason}); "
        "the pure-Python wheel will be used.",
        file=sys.stderr,
    )


def _extensions() -> list[Extension]:
    if os.environ.get("AIOWHEEL_NO_EXTENSIONS"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        _warn("Cython is not installed")
        return []
    # No fused multiply-add: the float rounding must match CPython's, operation by operation.
    extra = [] if sys.platform == "win32" else ["-ffp-contract=off"]
    extension = Extension(
        "aiowheel._cwheel", [PYX], depends=DEPENDS, extra_compile_args=extra, optional=True
    )
    try:
        return list(cythonize([extension], compiler_directives={"language_level": 3}))
    except Exception as exc:  # a Cython error: still install, pure
        _warn(f"cythonize failed: {exc}")
        return []


setup(
    ext_modules=_extensions(),
    cmdclass={"build_ext": OptionalBuildExt},
    # The generated C source is a build product: wheels carry the compiled module, not it.
    exclude_package_data={"aiowheel": ["*.c"]},
)
