# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""usage_report: the usage per team that the router's proxy counted, summed over a range of days."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.glm.serve.plugins.module_utils.usage import report


def usage_report(doc, first=None, last=None):
    """The sums per team and over all teams of the usage document DOC (the proxy's usage file, parsed) over the UTC
    days FIRST to LAST (YYYY-MM-DD, both included; empty: no bound), with lines to print."""
    if doc in (None, ''):
        doc = {}
    if not isinstance(doc, dict):
        raise AnsibleFilterError('glm.serve.usage_report expects the usage file as a dict (from_json), got %s' % type(doc).__name__)
    try:
        return report(doc, first or None, last or None)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {'usage_report': usage_report}
