# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""roles/glm/vars/main.yml: lists that stand beside a twin in the modules stay the same as their twin."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import yaml

from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp

VARS = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'roles', 'glm', 'vars', 'main.yml')


def test_the_preflight_retries_what_the_modules_retry():
    """The preflight's raw sinfo cannot import slurm_parse: its list of controller errors is a copy, kept equal."""
    with open(VARS) as handle:
        listed = yaml.safe_load(handle)['_glm_slurm_transient']
    assert listed == list(sp.TRANSIENT_PATTERNS)
