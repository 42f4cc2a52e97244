#!/usr/bin/env bash
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# Create a venv that holds the REAL SGLang 0.5.21 command-line parser, for tests/tooling/sglang_cli/check_args.py.
#
# Usage: tests/tooling/sglang_cli/setup.sh [VENV_DIR]
#   VENV_DIR defaults to $SGLANG_CLI_VENV, else .venv-sglang in the repository root.
#   PYTHON selects the interpreter (default: python3; SGLang 0.5.21 wheels are cp311).
#
# Only what `from sglang.srt.server_args import prepare_server_args` imports is installed: sglang itself with
# --no-deps, a CPU torch (pip takes torch 2.13.0 from this machine's local wheel folder) and a handful of small
# packages. It is enough to parse and check a command line; it can NOT serve (no CUDA kernels, no sgl-kernel).
# Idempotent: when the venv already imports the parser it does nothing.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
VENV=${1:-${SGLANG_CLI_VENV:-$ROOT/.venv-sglang}}
PYTHON=${PYTHON:-python3}
SGLANG_VERSION=0.5.21
TORCH_VERSION=2.13.0

# The smallest set found to make the parser import work: each one was checked by hiding it (sys.modules[name] =
# None) and seeing the import of sglang.srt.server_args fail. The rest of sglang's dependencies only serve.
SMALL_DEPS=(
  triton
  starlette
  ipython
  numpy
  orjson
  psutil
  pybase64
  requests
  packaging
  pillow
  msgspec
  pyzmq
  tqdm
  pydantic
  aiohttp
  pyyaml
)

check() {
  [ -x "$VENV/bin/python" ] &&
    "$VENV/bin/python" -c 'from sglang.srt.server_args import prepare_server_args' >/dev/null 2>&1 &&
    [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))' 2>/dev/null)" = "$SGLANG_VERSION" ]
}

if check; then
  echo "sglang $SGLANG_VERSION parser already installed in $VENV"
  exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
"${PIP[@]}" install --no-deps "sglang==$SGLANG_VERSION"
# CPU build: the local wheel is torch-2.13.0+cpu; --no-deps keeps pip from pulling CUDA libraries.
"${PIP[@]}" install --no-deps "torch==$TORCH_VERSION" ||
  "${PIP[@]}" install --no-deps "torch==$TORCH_VERSION+cpu"
# torch's own import needs these (they are small and pure Python).
"${PIP[@]}" install typing_extensions sympy networkx jinja2 filelock fsspec
"${PIP[@]}" install "${SMALL_DEPS[@]}"
# pip warns that sglang's other (serving) requirements are missing: expected, they are left out on purpose.

if check; then
  echo "sglang $SGLANG_VERSION parser installed in $VENV"
else
  echo "setup.sh: the parser still does not import in $VENV:" >&2
  "$VENV/bin/python" -c 'from sglang.srt.server_args import prepare_server_args' >&2 || true
  exit 1
fi
