#!/usr/bin/env bash
# Runs the optional wechaty channel's tests in their own virtualenv.
#
# The wechaty SDK (0.10.7, unmaintained) needs pyee==11.1.1 and urllib3<2; those pins must never
# constrain the main install, so the SDK lives in a venv of its own, with only the `wechaty` extra of
# pyproject.toml and the test runner's part of its `test` extra. memgate itself is not installed
# there: adapters/, bot/message.py and bot/errors.py need nothing beyond the standard library,
# and pytest's `pythonpath = ["."]` puts the checkout on sys.path.
#
# Usage: bash .ci/wechaty.sh [extra pytest args]     (PYTHON=python3.11 to pick the interpreter)
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"

# The SDK imports telnetlib, which Python 3.13 removed.
"$PYTHON" - <<'PY'
import sys
if not (3, 11) <= sys.version_info[:2] < (3, 13):
    sys.exit(f"wechaty 0.10.7 needs Python 3.11 or 3.12, not {sys.version.split()[0]}")
PY

# One requirement a line, from the extras: pyproject.toml stays the single source of truth. Of
# the test extra only what these tests run on: the rest (Playwright, PostgreSQL, llama.cpp,
# hadolint: ~400 MB of wheels) serves the main suite, and unpacking it took most of this script.
requirements="$("$PYTHON" - <<'PY'
import re, sys, tomllib
extras = tomllib.load(open("pyproject.toml", "rb"))["project"].get("optional-dependencies", {})
missing = [name for name in ("wechaty", "test") if name not in extras]
if missing:
    sys.exit(f"pyproject.toml has no [project.optional-dependencies] {', '.join(missing)}")
used = {"pytest", "pytest-asyncio", "pytest-timeout", "hypothesis"}
test = [r for r in extras["test"] if re.match(r"[A-Za-z0-9_.-]+", r)[0].lower() in used]
if len(test) != len(used):
    sys.exit(f"pyproject.toml's test extra lacks one of {sorted(used)}")
print("\n".join(extras["wechaty"] + test))
PY
)"

# Building the venv (pip resolving and fetching the SDK's dependencies) took minutes, the tests
# one: it is built once per requirement set and interpreter, outside the checkout, so the fresh
# clone CI makes reuses it (WECHATY_VENV names another place). A change to either builds anew.
key="$({ "$PYTHON" -c 'import sys; print(sys.version)'; printf '%s' "$requirements"; } | sha256sum | cut -c1-16)"
VENV="${WECHATY_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/memgate/wechaty-venv-$key}"
stamp="$VENV/.memgate-requirements"
mkdir -p "$(dirname "$VENV")"
(
    flock 9  # two runs at once: one builds, the other waits and reuses it
    if [[ ! -x "$VENV/bin/python" ]] || [[ "$(cat "$stamp" 2>/dev/null)" != "$requirements" ]]; then
        echo "wechaty: building $VENV"
        rm -rf "$VENV"
        "$PYTHON" -m venv "$VENV"
        mapfile -t reqs <<<"$requirements"
        "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${reqs[@]}"
        printf '%s' "$requirements" >"$stamp"
    fi
) 9>"$VENV.lock"

# --confcutdir: only tests/adapters/wechat/wechaty_channel/conftest.py, not a conftest above it that may import the
# main dependencies this venv lacks.
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider --confcutdir=tests/adapters/wechat/wechaty_channel tests/adapters/wechat/wechaty_channel "$@"
