# Sourced by the Quick start scripts: create or update a virtual environment with everything the
# project needs, then put it first on PATH.
#
#   AIOWHEEL_EXTRAS   the extras to install (required), e.g. dev,spark,cli
#   AIOWHEEL_VENV     where (default: ./.venv)
#   PYTHON            which interpreter (default: python3.11, else python3; it must be 3.11+)
#
# Re-installs only when pyproject.toml, setup.py, this file or a Cython source changed since the
# last install. The install is editable: the compiled core is built into aiowheel under a
# file name that carries the interpreter's ABI (_cwheel.cpython-312-...so), so one checkout holds
# a build for each Python beside the others.
#
# Also defines find_python (below) for scripts/test.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

# find_python X.Y: print the path of a working CPython X.Y, or nothing. Tries pythonX.Y on PATH
# first, then pyenv's versions (pyenv's shims refuse a version that is not the selected one, so
# they are asked to run, not just found).
find_python() {
    local want=$1 candidate pyenv_root
    pyenv_root=$( (command -v pyenv >/dev/null 2>&1 && pyenv root) || echo "${PYENV_ROOT:-$HOME/.pyenv}")
    for candidate in "python$want" $(ls -d "$pyenv_root"/versions/"$want".*/bin/python"$want" 2>/dev/null | sort -V -r); do
        if "$candidate" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$want'.split('.'))))" >/dev/null 2>&1; then
            command -v "$candidate"
            return 0
        fi
    done
    return 0
}

python=${PYTHON:-$(find_python 3.11)}
python=${python:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then
    echo "error: aiowheel needs Python 3.11 or newer; '$python' is $("$python" --version 2>&1 || echo 'not found')." >&2
    echo "       Install Python 3.11+, or name one with PYTHON=/path/to/python3.11." >&2
    exit 1
fi
if ! command -v "${CC:-cc}" >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1; then
    echo "warning: no C compiler (cc, gcc) found: aiowheel installs with its pure-Python core only." >&2
fi

venv=${AIOWHEEL_VENV:-$root/.venv}
stamp="$venv/.aiowheel-installed-${AIOWHEEL_EXTRAS//,/-}"
# What the install depends on, including every Cython source of the compiled extension (found by
# a glob, so a new part cannot be forgotten): a change rebuilds it.
want=$( (cat pyproject.toml scripts/_venv.sh; cat setup.py 2>/dev/null || true;
         find aiowheel \( -name '*.pyx' -o -name '*.pxi' -o -name '*.pxd' \) -print0 |
             LC_ALL=C sort -z | xargs -0 -r cat) | sha256sum | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ]; then
    echo "creating a virtual environment in $venv ($("$python" --version))" >&2
    "$python" -m venv "$venv"
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "installing aiowheel[$AIOWHEEL_EXTRAS] into $venv" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[$AIOWHEEL_EXTRAS]"
    echo "$want" > "$stamp"
fi
export PATH="$venv/bin:$PATH"
