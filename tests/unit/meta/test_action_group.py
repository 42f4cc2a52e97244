# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""meta/runtime.yml's action group slurm (module_defaults: group/glm.serve.slurm) lists exactly the modules that
take the shared Slurm options (they extend the doc fragment glm.serve.slurm), and the playbooks use the group."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import glob
import os

import yaml

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..')


def _documentation(path):
    """The DOCUMENTATION of a module file, read without importing it."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, 'id', None) == 'DOCUMENTATION' for t in node.targets):
            return yaml.safe_load(node.value.value)
    raise AssertionError('%s has no DOCUMENTATION' % path)


def _slurm_modules():
    found = set()
    for path in glob.glob(os.path.join(ROOT, 'plugins', 'modules', '*.py')):
        doc = _documentation(path)
        fragments = doc.get('extends_documentation_fragment') or []
        if isinstance(fragments, str):
            fragments = [fragments]
        if 'glm.serve.slurm' in fragments:
            found.add(doc['module'])
    return found


def _runtime():
    with open(os.path.join(ROOT, 'meta', 'runtime.yml')) as f:
        return yaml.safe_load(f)


def test_the_slurm_group_lists_the_modules_with_the_shared_slurm_options():
    group = _runtime()['action_groups']['slurm']
    names = [name.replace('glm.serve.', '') for name in group if isinstance(name, str)]
    assert len(names) == len(set(names)), 'a module listed twice: %s' % group
    assert set(names) == _slurm_modules()
    assert _slurm_modules() >= {'slurm_job', 'slurm_job_info'}


def test_the_doc_fragment_declares_the_group():
    from ansible_collections.glm.serve.plugins.doc_fragments.slurm import ModuleDocFragment
    doc = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)
    assert doc['attributes']['action_group']['membership'] == ['glm.serve.slurm']
    # the options the group's description names are the fragment's own, so every member takes them
    assert set(doc['options']) == {'user', 'retry_timeout', 'accounting'}


def _module_defaults(node, found=None):
    """Every module_defaults mapping in a playbook or task list, at any depth."""
    found = [] if found is None else found
    if isinstance(node, dict):
        if isinstance(node.get('module_defaults'), dict):
            found.append(node['module_defaults'])
        children = list(node.values())
    else:
        children = node if isinstance(node, list) else []
    for child in children:
        _module_defaults(child, found)
    return found


def test_playbooks_set_slurm_defaults_through_the_group():
    members = set('glm.serve.' + name for name in _slurm_modules())
    seen_group = 0
    paths = glob.glob(os.path.join(ROOT, 'playbooks', '**', '*.yml'), recursive=True)
    paths += glob.glob(os.path.join(ROOT, 'roles', '*', 'tasks', '*.yml'))
    for path in paths:
        with open(path) as f:
            data = yaml.safe_load(f)
        for defaults in _module_defaults(data):
            named = members & set(defaults)
            assert not named, '%s: module_defaults names %s one by one; use group/glm.serve.slurm' % (path, sorted(named))
            seen_group += 'group/glm.serve.slurm' in defaults
    assert seen_group >= 2  # status and teardown
