# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The download's and the server's hints know Pyxis's failure lines of 0.24 and of older releases.

Pyxis up to v0.23.0 ended every container failure with `pyxis: couldn't start container` (pyxis_slurmstepd.c L1358
at v0.23.0, in slurm_spank_task_init). v0.24.0 (pyxis_slurmstepd.c) no longer prints it: the import says
`pyxis: failed to import docker image: IMAGE` (L753, L762, L773 with the importer), enroot create
`pyxis: failed to create container filesystem for image: IMAGE` (L788), enroot start `pyxis: container start error:
...` (L1144, waitpid), `pyxis: container start failed with error code: N` (L1148) or `pyxis: container exited too
soon` (L1155); a missing mount source `--container-mounts: source path does not exist` (L984) then `couldn't create
enroot start configuration script` (L1120). The Pyxis stand-in prints the 0.24 lines (tests/doubles/pyxis).
The patterns are matched by glm.serve.slurm_job as plugins/module_utils/job_actions.py matching_hints does (re.search
over the job's state line, the message and the log tail), through its compile_hints.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml

from ansible_collections.glm.serve.plugins.module_utils import job_actions

ROLES = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'roles')
IMAGE = 'docker://lmsysorg/sglang:v0.5.21'
SQSH = '/home/u/glm/sglang.sqsh'


def hints(role):
    with open(os.path.join(ROLES, role, 'defaults', 'main.yml')) as handle:
        listed = yaml.safe_load(handle)['%s_hints' % role]
    # job names and hint texts are templated by Ansible; the patterns are plain (compile_hints checks them)
    return [(pattern, hint) for pattern, hint, _job in job_actions.compile_hints(
        [{'match': h['match'], 'hint': h['hint']} for h in listed])]


def first(role, log):
    """The first hint whose pattern finds the log line (the generic "." last)."""
    for pattern, hint in hints(role):
        if pattern.search('FAILED None 1:0\nthe job failed\n' + log):
            return hint
    return None


@pytest.mark.parametrize('line', [
    "pyxis: couldn't start container",                                         # <= 0.23
    'pyxis: failed to import docker image',                                    # <= 0.23
    'pyxis: failed to import docker image: %s' % IMAGE,                        # 0.24
    'pyxis: failed to import docker image: %s (importer: /usr/libexec/x)' % IMAGE,
    'pyxis: failed to create container filesystem for image: %s' % IMAGE,      # 0.24
    'pyxis: container start error: Interrupted system call',                   # 0.24
    'pyxis: container start failed with error code: 1',                        # 0.24
])
def test_the_downloads_container_hint_knows_old_and_new_lines(line):
    hint = first('download', 'slurmstepd: error: %s\nsrun: error: node1: task 0: Exited with exit code 1' % line)
    assert hint and hint.startswith('The container could not be imported, started or saved'), (line, hint)


@pytest.mark.parametrize('line, start', [
    ('pyxis: failed to create container filesystem', 'The container image'),                     # <= 0.23
    ('pyxis: failed to create container filesystem for image: %s' % SQSH, 'The container image'),  # 0.24
    ("pyxis: couldn't start container", 'Pyxis could not start the server'),                     # <= 0.23
    ('pyxis: container start failed with error code: 1', 'Pyxis could not start the server'),    # 0.24
    ('pyxis: container start error: No child processes', 'Pyxis could not start the server'),    # 0.24
    ('pyxis: container exited too soon', 'Pyxis could not start the server'),                    # 0.24
])
def test_the_servers_container_hints_know_old_and_new_lines(line, start):
    hint = first('server', 'slurmstepd: error: %s' % line)
    assert hint and hint.startswith(start), (line, hint)


def test_a_generic_line_gets_no_container_hint():
    hint = first('download', 'some other failure')
    assert hint is None or not hint.startswith('The container could not'), hint
