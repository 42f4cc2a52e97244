# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""status_report: the status playbook's lines and JSON document from glm.serve.deployment_info's result."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.glm.serve.plugins.module_utils import status_report as sr

SETTINGS = ('host', 'model', 'port', 'api_key_file', 'tunnel_command', 'router_policy')


def status_report(info, load=None, **settings):
    """{'lines': [...], 'document': {...}} of a deployment_info result, the server's parsed metrics (or None) and the
    settings the lines name."""
    if not isinstance(info, dict) or 'jobs' not in info:
        raise AnsibleFilterError('glm.serve.status_report expects the result of glm.serve.deployment_info')
    missing = [k for k in SETTINGS if k not in settings]
    if missing:
        raise AnsibleFilterError('glm.serve.status_report: missing %s' % ', '.join(missing))
    return {'lines': sr.lines(info, load, settings), 'document': sr.document(info, load, settings)}


class FilterModule(object):
    def filters(self):
        return {'status_report': status_report}
