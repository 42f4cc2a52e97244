# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The roles' contracts (docs/roles.md): every entry point that a playbook or a role uses has an argument spec, no
role reads another role's private values (``_role_*``, ``__role_*``), and no role includes another one but glm."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

import pytest
import yaml

ROOT = os.path.join(os.path.dirname(__file__), '..', '..', '..')
ROLES = sorted(name for name in os.listdir(os.path.join(ROOT, 'roles'))
               if os.path.isdir(os.path.join(ROOT, 'roles', name, 'tasks')))
PRIVATE = re.compile(r'(?<![A-Za-z0-9_])(__?)(%s)_[a-z0-9_]+' % '|'.join(ROLES))


def _files(*tops):
    for top in tops:
        for folder, _dirs, names in os.walk(os.path.join(ROOT, top)):
            for name in names:
                if name.endswith(('.yml', '.yaml', '.j2')):
                    yield os.path.join(folder, name)


def _role_of(path):
    parts = os.path.relpath(path, ROOT).split(os.sep)
    return parts[1] if parts[0] == 'roles' else None


def _includes(path):
    """(role, tasks_from) of every import_role/include_role task in a YAML file."""
    with open(path) as handle:
        data = yaml.safe_load(handle)
    found = []

    def walk(node):
        if isinstance(node, dict):
            for key in ('ansible.builtin.import_role', 'ansible.builtin.include_role', 'import_role', 'include_role'):
                if isinstance(node.get(key), dict):
                    found.append((node[key].get('name'), node[key].get('tasks_from', 'main')))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(data)
    return found


def _entry_points(role):
    with open(os.path.join(ROOT, 'roles', role, 'meta', 'argument_specs.yml')) as handle:
        return set(yaml.safe_load(handle)['argument_specs'])


def test_the_roles_are_found():
    assert set(ROLES) == {'api_key', 'download', 'glm', 'router', 'server'}


@pytest.mark.parametrize('role', ROLES)
def test_every_tasks_file_used_as_an_entry_point_has_an_argument_spec(role):
    used = set()
    for path in list(_files('roles', 'playbooks', 'molecule')):
        if path.endswith('.j2') or os.sep + 'templates' + os.sep in path:
            continue
        for name, tasks_from in _includes(path):
            if name == 'glm.serve.' + role:
                used.add(os.path.splitext(tasks_from)[0])
    assert used, 'no playbook or role uses glm.serve.%s' % role
    assert used - _entry_points(role) == set()


@pytest.mark.parametrize('role', ROLES)
def test_every_entry_point_is_a_tasks_file(role):
    tasks = os.path.join(ROOT, 'roles', role, 'tasks')
    for entry in _entry_points(role):
        assert os.path.exists(os.path.join(tasks, entry + '.yml')), entry


@pytest.mark.parametrize('role', ROLES)
def test_no_role_reads_another_roles_private_values(role):
    reads = []
    for path in _files(os.path.join('roles', role)):
        with open(path) as handle:
            for number, line in enumerate(handle, 1):
                for match in PRIVATE.finditer(line):
                    if match.group(2) != role:
                        reads.append('%s:%d: %s' % (os.path.relpath(path, ROOT), number, match.group(0)))
    assert reads == []


@pytest.mark.parametrize('role', ROLES)
def test_a_role_includes_no_other_role_but_glm(role):
    others = set()
    for path in _files(os.path.join('roles', role, 'tasks')):
        others.update(name for name, _tasks_from in _includes(path) if name not in ('glm.serve.glm', 'glm.serve.' + role))
    assert others == set()
