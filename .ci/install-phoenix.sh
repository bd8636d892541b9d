#!/usr/bin/env bash
# Install Arize Phoenix into its own virtualenv (.phoenix-venv at the repo root) for the
# end-to-end OpenTelemetry test (tests/test_phoenix_e2e.py). Phoenix pins clash with ours, so it
# never goes into .venv. Idempotent: does nothing when phoenix is already installed and importable.
#
# Usage: bash .ci/install-phoenix.sh            (env: PHOENIX_VENV, PHOENIX_VERSION, PYTHON)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${PHOENIX_VENV:-$ROOT/.phoenix-venv}"
VERSION="${PHOENIX_VERSION:-20.26.1}"
PY="${PYTHON:-python3.11}"

if [ -x "$VENV/bin/python" ] && [ -x "$VENV/bin/phoenix" ] \
   && "$VENV/bin/python" -c "import phoenix.server.main" >/dev/null 2>&1; then
  echo "install-phoenix: $("$VENV/bin/python" -c 'import importlib.metadata as m; print("arize-phoenix", m.version("arize-phoenix"))') already in $VENV"
  exit 0
fi

# pip run quietly, minus this machine's harmless "find-links location is ignored" noise
pip_q() {
  set +e
  "$VENV/bin/python" -m pip "$@" 2>&1 | grep -v "is neither a file nor a directory"
  local rc=${PIPESTATUS[0]}
  set -e
  return "$rc"
}

if ! command -v "$PY" >/dev/null 2>&1; then
  PY=python3
fi
echo "install-phoenix: creating $VENV with $("$PY" --version 2>&1)"
rm -rf "$VENV"
"$PY" -m venv "$VENV"
pip_q install --quiet --upgrade pip
# its own pinned set (.ci/phoenix-constraints.txt, a freeze of a working install) so CI resolves the same
pip_q install --quiet -c "$ROOT/.ci/phoenix-constraints.txt" "arize-phoenix==$VERSION"
"$VENV/bin/python" -c "import phoenix.server.main"
echo "install-phoenix: installed arize-phoenix $VERSION in $VENV"
