# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""deployment_layout: the names and paths of one deployment (module_utils/layout.py), for YAML and templates."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.glm.serve.plugins.module_utils.layout import Layout


def deployment_layout(work_dir, serve_name='glm-serve', download_name='glm-download', router_name=None, replicas=1):
    """The dict of Layout.as_dict() for a work dir (resolved, absolute) and the deployment's job names."""
    if not isinstance(work_dir, str) or not work_dir:
        raise AnsibleFilterError('glm.serve.deployment_layout expects the work dir (glm_paths.work_dir), got %r' % (work_dir,))
    try:
        return Layout(work_dir, serve_name, download_name, router_name or None).as_dict(int(replicas))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError('glm.serve.deployment_layout: %s' % exc)


def deployment_member(job, serve_name='glm-serve', download_name='glm-download', router_name=None):
    """{'name', 'role', 'replica', 'comment'} of a job (a dict with name and, when known, comment) or a job name, when
    it belongs to the deployment; None otherwise."""
    if isinstance(job, str):
        job = {'name': job}
    if not isinstance(job, dict):
        raise AnsibleFilterError('glm.serve.deployment_member expects a job (a dict with its name) or a job name, got %r' % (job,))
    lt = Layout('', serve_name, download_name, router_name or None)
    member = lt.membership(job)
    if member is None:
        return None
    return {'name': job.get('name'), 'role': member[0], 'replica': member[1], 'comment': lt.comment(*member)}


class FilterModule(object):
    def filters(self):
        return {'deployment_layout': deployment_layout, 'deployment_member': deployment_member}
