# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fail when a role's or playbook's YAML or template spells a name that belongs to the deployment's layout.

The names and paths of a deployment (its job-name patterns, its work-dir files, its logs) live in one place,
plugins/module_utils/layout.py, read by YAML through the filters glm.serve.deployment_layout and deployment_member
(glm_layout in the glm role) and by the modules. Comments are prose and are not checked; neither are the argument
specs (meta/), which document the names for the user.

  python tests/tooling/check_layout_names.py          # make lint runs it
  python tests/tooling/check_layout_names.py PATH...  # check these files or folders instead
"""
from __future__ import annotations

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDERS = ('roles', 'playbooks')

#: (what, regular expression) of the spellings that belong to the layout
SPELLINGS = (
    ('a job-name pattern (NAME-[0-9]+): use glm.serve.deployment_member', re.compile(r"-\[0-9\]")),
    ('the bad-node list: use glm_layout.files.bad_nodes', re.compile(r"bad-nodes\.json")),
    ("the router's workers file: use glm_layout.files.router_workers", re.compile(r"router-workers\.json")),
    ("the tunnel's relay: use glm_layout.files.relay", re.compile(r"glm_relay\.py")),
    ("the autoscaler's log: use glm_layout.files.scale_log", re.compile(r"scale\.log")),
    ("the replicas' folder: use glm_layout.files.replicas_dir", re.compile(r"(?<![\w.])replicas/|/replicas\b(?![_.-])")),
    ("a replica's address file (NAME.url): use glm_layout.patterns.replica_url", re.compile(r"\.url[\"')]|\}\}\.url\b")),
    ('a job log (NAME-JOBID.out): use glm_layout.patterns.log or sbatch_output', re.compile(r"\.out\b")),
    ('an activity file (NAME-JOBID.activity): use glm_layout.patterns.activity',
     re.compile(r"(\bID|\}\}|\$\w+|\$\{\w+\})\.activity\b")),
)


def files(paths):
    for path in paths:
        if os.path.isfile(path):
            yield path
            continue
        for folder, dirs, names in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d != 'meta')
            for name in sorted(names):
                if name.endswith(('.yml', '.yaml', '.j2')):
                    yield os.path.join(folder, name)


def code_lines(path):
    """(number, text) of the lines that are code: not YAML/shell comments (#SBATCH lines are code) nor Jinja comments."""
    in_jinja_comment = False
    with open(path, encoding='utf-8') as handle:
        for number, line in enumerate(handle, 1):
            text = line.strip()
            if in_jinja_comment:
                in_jinja_comment = '#}' not in text
                continue
            if text.startswith('{#'):
                in_jinja_comment = '#}' not in text
                continue
            if text.startswith('#') and not text.startswith('#SBATCH'):
                continue
            yield number, line.rstrip('\n')


def check(paths):
    found = []
    for path in files(paths):
        for number, line in code_lines(path):
            for what, pattern in SPELLINGS:
                if pattern.search(line):
                    found.append('%s:%d: spells %s\n    %s' % (os.path.relpath(path, ROOT), number, what, line.strip()))
    return found


def main(argv):
    paths = argv or [os.path.join(ROOT, f) for f in FOLDERS]
    found = check(paths)
    for line in found:
        print(line)
    if found:
        print('%d spelling(s) of layout names in roles/ or playbooks/: read them from the layout '
              '(plugins/module_utils/layout.py)' % len(found))
        return 1
    print('check_layout_names: no layout name spelled in %s' % ', '.join(os.path.relpath(p, ROOT) for p in paths))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
