# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Run Galaxy's importer (galaxy-importer, what Galaxy and Automation Hub run on every upload) on a collection
tarball, with tests/tooling/galaxy-importer.cfg, and fail unless the import completes without a warning or error.

Usage: python tests/tooling/check_importer.py IMPORTER_VENV build/glm-serve-X.Y.Z.tar.gz

What counts, read in galaxy-importer 0.4.44 (the wheel of requirements-importer.txt):
- main.py:35-43 and 174-175: `python -m galaxy_importer.main FILE` exits 1 when the import fails (an ImporterError
  is logged as `ERROR: The import failed for the following reason: ...`, main.py:158-160), 0 otherwise;
- main.py:60-67: INFO lines are printed bare, every other level as `LEVEL: message`;
- loaders/collection.py:128-197: ansible-lint's violations are logged as WARNING lines and the import still exits 0,
  so a line starting with WARNING:, ERROR: or CRITICAL: fails this check too.
The importer runs as Galaxy runs it, without this repository's ansible.cfg or collections path, in a scratch folder
(it writes importer_result.json into its working folder, main.py:169-171), with its own venv's ansible-lint and
ansible-doc first on the PATH (it finds them with shutil.which).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = os.path.join(HERE, 'galaxy-importer.cfg')
BAD_PREFIXES = ('WARNING:', 'ERROR:', 'CRITICAL:')
DONE = 'Importer processing completed successfully'


def problems(rc, output):
    """What the importer's exit status and log say is wrong (an empty list when the import is clean)."""
    found = [line for line in output.splitlines() if line.startswith(BAD_PREFIXES)]
    if rc != 0:
        found.append('galaxy-importer exited %d' % rc)
    elif DONE not in output:
        found.append('galaxy-importer did not print %r' % DONE)
    return found


def run_importer(venv, tarball):
    """Run the importer on the tarball; return (exit status, output)."""
    venv_bin = os.path.join(os.path.abspath(venv), 'bin')
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('ANSIBLE_', 'GALAXY_IMPORTER_')) and k != 'VIRTUAL_ENV'}
    env['PATH'] = venv_bin + os.pathsep + env.get('PATH', '')
    env['GALAXY_IMPORTER_CONFIG'] = CONFIG
    with tempfile.TemporaryDirectory(prefix='glm-importer-') as scratch:
        # ansible-doc's and ansible-lint's temp and cache (config.py:43, collection.py:146-150), not under ~
        env['GALAXY_IMPORTER_ANSIBLE_LOCAL_TMP'] = os.path.join(scratch, 'ansible-tmp')
        env['GALAXY_IMPORTER_TMP_ROOT_DIR'] = scratch
        proc = subprocess.run([os.path.join(venv_bin, 'python'), '-m', 'galaxy_importer.main',
                               os.path.abspath(tarball)],
                              cwd=scratch, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, check=False)
    return proc.returncode, proc.stdout


def main():
    """Print the importer's log (its per-file lines only on a failure), then the verdict; exit 1 on any problem."""
    venv, tarball = sys.argv[1], sys.argv[2]
    start = time.monotonic()
    rc, output = run_importer(venv, tarball)
    elapsed = time.monotonic() - start
    found = problems(rc, output)
    for line in output.splitlines():
        # its Loading lines (one per plugin, playbook and role) only when they say where it stopped
        if found or not line.startswith('Loading '):
            print(line)
    if found:
        print('%s: galaxy-importer refuses it (%.1f s):' % (tarball, elapsed))
        for line in found:
            print('  ' + line)
        return 1
    print('%s: galaxy-importer: imported, ansible-lint clean (%.1f s)' % (tarball, elapsed))
    return 0


if __name__ == '__main__':
    sys.exit(main())
