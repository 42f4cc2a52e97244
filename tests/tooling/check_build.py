# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Check a collection tarball: no virtual environment, cache, VCS folder or link inside.

Usage: python tests/tooling/check_build.py build/glm-serve-X.Y.Z.tar.gz
"""
from __future__ import annotations

import re
import sys
import tarfile

FORBIDDEN = re.compile(r'(^|/)(\.venv[^/]*|\.collections|\.cache|__pycache__|\.pytest_cache|\.git|\.molecule|tests/output)(/|$)|\.pyc$')


def problems(path):
    """Return a list of the members that must not be in the tarball."""
    found = []
    with tarfile.open(path) as tar:
        for member in tar.getmembers():
            if member.issym() or member.islnk():
                found.append('link: %s -> %s' % (member.name, member.linkname))
            elif FORBIDDEN.search(member.name):
                found.append('not for shipping: %s' % member.name)
    return found


def main():
    """Print what is wrong, exit 1 if anything is."""
    path = sys.argv[1]
    found = problems(path)
    for line in found:
        print(line)
    with tarfile.open(path) as tar:
        count = len(tar.getmembers())
    print('%s: %d members, %d problems' % (path, count, len(found)))
    sys.exit(1 if found else 0)


if __name__ == '__main__':
    main()
