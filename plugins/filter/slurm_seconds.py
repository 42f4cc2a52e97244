# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""slurm_seconds: the seconds of a Slurm time limit (module_utils/slurm_parse.py's duration_seconds), for YAML."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.glm.serve.plugins.module_utils.slurm_parse import duration_seconds


def slurm_seconds(value):
    """Seconds of a Slurm time limit, None for UNLIMITED/INFINITE."""
    try:
        return duration_seconds(value)
    except ValueError as exc:
        raise AnsibleFilterError('glm.serve.slurm_seconds: %s (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS)' % exc)


class FilterModule(object):
    def filters(self):
        return {'slurm_seconds': slurm_seconds}
