# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    """Attributes shared by glm.serve's modules."""

    # A module that only reads files on the login node (no Slurm command).
    READ_ONLY = r'''
attributes:
  check_mode:
    description: Reads only; runs in check mode too.
    support: full
  diff_mode:
    description: Not supported.
    support: none
  platform:
    description: Runs on the login node of the cluster.
    support: full
    platforms: posix
'''

    # A module that only reads: Slurm's queries (squeue, scontrol show, sacct) and files on the login node.
    SLURM_READ_ONLY = r'''
attributes:
  check_mode:
    description: Reads only; runs the same in check mode.
    support: full
  diff_mode:
    description: Not supported.
    support: none
  platform:
    description: Runs on the login node of the cluster (a POSIX host with the Slurm client tools).
    support: full
    platforms: posix
'''
