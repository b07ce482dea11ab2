# Sourced by the Quick start scripts: create or update ./.venv with everything the project needs.
# Re-installs only when pyproject.toml (or this file) changed since the last install.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
python=${PYTHON:-python3.11}
command -v "$python" >/dev/null 2>&1 || python=python3
venv="$root/.venv"
stamp="$venv/.aiowheel-installed-${AIOWHEEL_EXTRAS//,/-}"
# What the install depends on, including every Cython source of the compiled extension (found by
# a glob, so a new part cannot be forgotten): a change rebuilds it.
want=$( (cat pyproject.toml scripts/_venv.sh; cat setup.py 2>/dev/null || true;
         find src/aiowheel \( -name '*.pyx' -o -name '*.pxi' -o -name '*.pxd' \) -print0 |
             LC_ALL=C sort -z | xargs -0 -r cat) | sha256sum | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ]; then
    echo "creating virtual environment in $venv" >&2
    "$python" -m venv "$venv"
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "installing aiowheel and its dependencies into $venv" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[$AIOWHEEL_EXTRAS]"
    echo "$want" > "$stamp"
fi
export PATH="$venv/bin:$PATH"
