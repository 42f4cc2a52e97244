#!/usr/bin/env bash
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# A tool venv apart from .venv, so that its tools never move ansible's pins:
#   tests/tooling/setup-tool-venv.sh PYTHON VENV REQUIREMENTS
# e.g. .venv-ee (requirements-ee.txt: ansible-builder), .venv-docs (requirements-docs.txt: antsibull-docs, Sphinx).
# Pinned by constraints.txt, less the constraints of the packages that REQUIREMENTS pins itself (docutils for
# Sphinx: requirements-docs.txt says why). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."

python=$1
venv=$2
requirements=$3

if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
own=$(sed -nE 's/^([A-Za-z0-9_.-]+)==.*/\1/p' "$requirements" | tr 'A-Z_.' 'a-z--')
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
while IFS= read -r line; do
  name=$(sed -nE 's/^([A-Za-z0-9_.-]+)==.*/\1/p' <<<"$line" | tr 'A-Z_.' 'a-z--')
  if [ -n "$name" ] && grep -qxF "$name" <<<"$own"; then
    continue
  fi
  printf '%s\n' "$line"
done < constraints.txt > "$constraints"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements" -c "$constraints"
echo "setup-tool-venv: $requirements in $venv: $(sed -nE 's/^([A-Za-z0-9_.-]+==[^ ]+).*/\1/p' "$requirements" | tr '\n' ' ')"
