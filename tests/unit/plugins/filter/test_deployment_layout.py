# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The deployment_layout and deployment_member filters (controller side: ansible-test runs the module_utils tests
without ansible.errors, so the filters' tests live here)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.glm.serve.plugins.filter.deployment_layout import deployment_layout

WORK = '/home/u/glm'


def test_filter():
    out = deployment_layout(WORK, 'glm-serve', 'glm-download', 'glm-serve-router', replicas=2)
    assert out['jobs'] == {'download': 'glm-download', 'server': 'glm-serve', 'router': 'glm-serve-router',
                           'replicas': ['glm-serve', 'glm-serve-2']}
    assert out['files']['replica_urls'] == {'glm-serve': WORK + '/replicas/glm-serve.url',
                                            'glm-serve-2': WORK + '/replicas/glm-serve-2.url'}
    assert out['comments']['replicas']['glm-serve-2'] == 'glm.serve:glm-serve:replica:2'
    # the %-patterns render as the batch scripts' shell words
    assert out['patterns']['activity'] % {'name': '$SLURM_JOB_NAME', 'job_id': '$SLURM_JOB_ID'} == '$SLURM_JOB_NAME-$SLURM_JOB_ID.activity'
    assert deployment_layout(WORK)['jobs']['router'] == 'glm-serve-router'


@pytest.mark.parametrize('args', [(None,), ('',), (WORK, 'glm-serve', 'glm-download', None, 'x')])
def test_filter_refuses(args):
    with pytest.raises(AnsibleFilterError):
        deployment_layout(*args)


def test_member_filter():
    from ansible_collections.glm.serve.plugins.filter.deployment_layout import deployment_member
    assert deployment_member('glm-serve-2', 'glm-serve') == {'name': 'glm-serve-2', 'role': 'replica', 'replica': 2,
                                                             'comment': 'glm.serve:glm-serve:replica:2'}
    assert deployment_member('glm-serve-router', 'glm-serve')['comment'] == 'glm.serve:glm-serve:router'
    assert deployment_member('other', 'glm-serve') is None
    assert deployment_member({'name': 'glm-serve-2', 'comment': 'glm.serve:glm-serve-2:replica:1'}, 'glm-serve') is None
    with pytest.raises(AnsibleFilterError):
        deployment_member(3)
