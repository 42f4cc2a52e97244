# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Stand-in for ansible-test's pip bootstrap script (get-pip.py).

ansible-test --venv bootstraps pip in each new virtual environment with a get-pip.py that it
downloads from a host that CI machines here cannot reach (PyPI itself is reachable). `make setup`
copies this file to ~/.ansible/test/cache/get_pip_<version>.py, where ansible-test looks first.
It does what get-pip.py does with the arguments it gets: bring pip into the running interpreter
(ensurepip, from the standard library) and then install the requested packages with that pip.
get-pip.py's own --no-setuptools/--no-wheel switches mean "do not add these", which is the
default for `pip install`, so they are dropped.
"""
from __future__ import annotations

import subprocess
import sys

DROPPED = ('--no-setuptools', '--no-wheel')


def main():
    """Install pip, then the requested packages."""
    subprocess.check_call([sys.executable, '-m', 'ensurepip', '--upgrade', '--default-pip'])
    args = [arg for arg in sys.argv[1:] if arg not in DROPPED]
    subprocess.check_call([sys.executable, '-m', 'pip', 'install'] + args)


if __name__ == '__main__':
    main()
