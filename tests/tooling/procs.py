# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The test bed's processes, read from /proc: shared by the tests of the doubles (tests/doubles_tests, through
standin_helpers) and the cluster tests (tests/integration, through deploy_helpers)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os


def sglang_pids(job_id):
    """Pids of the SGLang stand-in of a Slurm job (its environment names the job), oldest first, on this machine: the
    local cluster's nodes share it, and a root's processes are in the host's /proc too."""
    pids = []
    for pid in sorted(filter(str.isdigit, os.listdir('/proc')), key=int):
        try:
            with open('/proc/%s/cmdline' % pid, 'rb') as handle:
                argv = handle.read().split(b'\0')
            with open('/proc/%s/environ' % pid, 'rb') as handle:
                environ = handle.read().split(b'\0')
        except OSError:
            continue
        # python3 -m sglang.launch_server itself (srun's and bash -c's command lines name it too)
        if argv[1:3] == [b'-m', b'sglang.launch_server'] and ('SLURM_JOB_ID=%s' % job_id).encode() in environ:
            pids.append(int(pid))
    return pids
