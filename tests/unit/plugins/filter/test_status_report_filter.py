# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The status_report filter: it checks its input (controller side, beside the other filters)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.glm.serve.plugins.filter.status_report import status_report as status_filter

SETTINGS = {'host': 'local', 'model': 'glm-5.3-flash', 'port': 30000, 'api_key_file': '~/glm/api-key',
            'tunnel_command': 'ssh ...', 'router_policy': 'cache_aware'}


def test_filter_checks_its_input(tmp_path, view):
    out, _cli = view(tmp_path, [])
    assert status_filter(out, None, **SETTINGS)['lines'][0] == 'jobs: none'
    with pytest.raises(AnsibleFilterError):
        status_filter({}, None, **SETTINGS)
    with pytest.raises(AnsibleFilterError):
        status_filter(out, None, host='x')
