#!/usr/bin/env bash
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# Install the project's Python toolchain into a virtual environment (default .venv): the collection's own needs
# (requirements.txt) and the dev and test tools (requirements-dev.txt), pinned by constraints.txt; and the
# offline stand-in for ansible-test's pip bootstrap.
# Idempotent. Run as root on a fresh Debian machine: installs the few Debian packages it needs.
set -euo pipefail
cd "$(dirname "$0")/../.."

python=${1:-python3}
venv=${2:-.venv}

need=()
command -v git >/dev/null || need+=(git)
command -v ssh >/dev/null || need+=(openssh-client)
"$python" -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
command -v shellcheck >/dev/null || need+=(shellcheck)   # ansible-test sanity skips its shellcheck test without it
if [ "${#need[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

"$python" - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit("setup: Python 3.11 or newer is needed, found %s" % sys.version.split()[0])
PY

if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt -r requirements-dev.txt -c constraints.txt

# ansible-test --venv downloads a get-pip.py from a host CI cannot reach; it looks in this cache first.
cache=$HOME/.ansible/test/cache
mkdir -p "$cache"
for version in $("$venv/bin/python" - <<'PY'
import re, pathlib, ansible_test
src = pathlib.Path(ansible_test.__file__).parent / '_internal' / 'python_requirements.py'
print(' '.join(sorted(set(re.findall(r"pip='([0-9.]+)'", src.read_text())))))
PY
); do
  install -m 0644 tests/tooling/get_pip_offline.py "$cache/get_pip_${version//./_}.py"
done
echo "setup: toolchain ready in $venv ($("$venv/bin/ansible" --version | head -1))"
