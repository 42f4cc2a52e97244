# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Check a collection tarball: only what users need at its top level (galaxy.yml's build_ignore), all of that,
and no virtual environment, cache, VCS folder or link inside.

Usage: python tests/tooling/check_build.py build/glm-serve-X.Y.Z.tar.gz
"""
from __future__ import annotations

import re
import sys
import tarfile

FORBIDDEN = re.compile(r'(^|/)(\.venv[^/]*|\.collections|\.cache|__pycache__|\.pytest_cache|\.git|\.molecule|tests/output)(/|$)|\.pyc$')

# Top-level entries a user's tarball may hold: folders (with anything below) and files. MANIFEST.json and
# FILES.json are written by ansible-galaxy itself; CHANGELOG.rst by antsibull-changelog (a release).
ALLOWED_DIRS = {'meta', 'plugins', 'roles', 'playbooks', 'docs', 'LICENSES'}
ALLOWED_FILES = {'MANIFEST.json', 'FILES.json', 'README.md', 'REUSE.toml', 'requirements.txt',
                 'CHANGELOG.rst', 'changelogs/changelog.yaml'}
# What must be there for the collection to be what it says it is.
REQUIRED = {'MANIFEST.json', 'FILES.json', 'README.md', 'LICENSES/GPL-3.0-or-later.txt', 'meta/runtime.yml',
            'plugins', 'roles', 'playbooks', 'changelogs/changelog.yaml', 'CHANGELOG.rst'}


def content_problems(names):
    """Members outside the allowed top level, and required entries that are missing."""
    found = []
    for name in sorted(names):
        top = name.split('/', 1)[0]
        if name in ALLOWED_FILES or top in ALLOWED_DIRS or name == 'changelogs':
            continue
        found.append('not for users (galaxy.yml build_ignore): %s' % name)
    for need in sorted(REQUIRED):
        if need not in names:
            found.append('missing: %s' % need)
    return found


def problems(path):
    """Return a list of what is wrong with the tarball."""
    found = []
    with tarfile.open(path) as tar:
        members = tar.getmembers()
    for member in members:
        if member.issym() or member.islnk():
            found.append('link: %s -> %s' % (member.name, member.linkname))
        elif FORBIDDEN.search(member.name):
            found.append('not for shipping: %s' % member.name)
    found.extend(content_problems(set(m.name.rstrip('/') for m in members)))
    return found


def main():
    """Print the top level and what is wrong, exit 1 if anything is."""
    path = sys.argv[1]
    found = problems(path)
    for line in found:
        print(line)
    with tarfile.open(path) as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
    tops = {}
    for name in names:
        top = name.split('/', 1)[0] + ('/' if '/' in name else '')
        tops[top] = tops.get(top, 0) + 1
    print('top level: %s' % ', '.join('%s (%d)' % (top, count) if top.endswith('/') else top
                                      for top, count in sorted(tops.items())))
    print('%s: %d files, %d problems' % (path, len(names), len(found)))
    sys.exit(1 if found else 0)


if __name__ == '__main__':
    main()
