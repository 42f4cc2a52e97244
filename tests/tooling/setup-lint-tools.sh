#!/usr/bin/env bash
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# The linters of `make lint` that .venv does not hold (requirements-lint.txt: reuse, actionlint), in a venv of
# their own (default .venv-lint), pinned by constraints.txt. Idempotent. Run as root on a fresh Debian machine:
# installs libmagic1 if missing (reuse reads file encodings through python-magic).
set -euo pipefail
cd "$(dirname "$0")/../.."

python=${1:-python3}
venv=${2:-.venv-lint}

if ! ldconfig -p 2>/dev/null | grep -q 'libmagic\.so\.1 '; then
  echo "setup-lint-tools: installing Debian package libmagic1"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libmagic1
fi
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r requirements-lint.txt -c constraints.txt
echo "setup-lint-tools: $("$venv/bin/reuse" --version | head -1), actionlint $("$venv/bin/actionlint" --version | head -1) in $venv"
