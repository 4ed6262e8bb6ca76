#!/usr/bin/env bash
# Runs the optional wechaty channel's tests in their own virtualenv.
#
# The wechaty SDK (0.10.7, unmaintained) needs pyee==11.1.1 and urllib3<2; those pins must never
# constrain the main install, so the SDK lives in .venv-wechaty, with only the `wechaty` and `test`
# extras of pyproject.toml. memgate itself is not installed there: adapters/, bot/message.py and
# bot/errors.py need nothing beyond the standard library, and pytest's `pythonpath = ["."]`
# puts the checkout on sys.path.
#
# Usage: bash .ci/wechaty.sh [extra pytest args]     (PYTHON=python3.11 to pick the interpreter)
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${WECHATY_VENV:-.venv-wechaty}"

# The SDK imports telnetlib, which Python 3.13 removed.
"$PYTHON" - <<'PY'
import sys
if not (3, 11) <= sys.version_info[:2] < (3, 13):
    sys.exit(f"wechaty 0.10.7 needs Python 3.11 or 3.12, not {sys.version.split()[0]}")
PY

# One requirement a line, from the extras: pyproject.toml stays the single source of truth.
requirements="$("$PYTHON" - <<'PY'
import sys, tomllib
extras = tomllib.load(open("pyproject.toml", "rb"))["project"].get("optional-dependencies", {})
missing = [name for name in ("wechaty", "test") if name not in extras]
if missing:
    sys.exit(f"pyproject.toml has no [project.optional-dependencies] {', '.join(missing)}")
print("\n".join(extras["wechaty"] + extras["test"]))
PY
)"

stamp="$VENV/.memgate-requirements"
if [[ ! -x "$VENV/bin/python" ]] || [[ "$(cat "$stamp" 2>/dev/null)" != "$requirements" ]]; then
    echo "wechaty: building $VENV"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    mapfile -t reqs <<<"$requirements"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${reqs[@]}"
    printf '%s' "$requirements" >"$stamp"
fi

# --confcutdir: only tests/adapters/wechat/wechaty_channel/conftest.py, not a conftest above it that may import the
# main dependencies this venv lacks.
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider --confcutdir=tests/adapters/wechat/wechaty_channel tests/adapters/wechat/wechaty_channel "$@"
