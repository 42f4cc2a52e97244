# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The argument sub-specs that slurm_job and slurm_job_info share (documented in the doc fragment glm.serve.slurm)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def probe_options():
    """The sub-options of both modules' ``probe`` option (documented in the doc fragment glm.serve.slurm.probe)."""
    return dict(
        port=dict(type='int', required=True),
        path=dict(type='str', default='/v1/models'),
        key_file=dict(type='path', required=True, no_log=False),
        model=dict(type='str', required=True),
        timeout=dict(type='int', default=5),
        tls_cert=dict(type='path'),
        endpoint_file=dict(type='path'),
    )


def bad_nodes_options():
    """The sub-options of slurm_job's ``bad_nodes``."""
    return dict(
        file=dict(type='path', required=True),
        pattern=dict(type='str', required=True),
        ttl=dict(type='int', default=86400),
        retries=dict(type='int', default=2),
        nodes=dict(type='list', elements='str', default=[]),
        job_nodes=dict(type='int', default=1),
    )
