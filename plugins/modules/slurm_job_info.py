#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: slurm_job_info
short_description: Read Slurm jobs by id, name or user, finished ones too
version_added: 0.1.0
description:
  - Lists jobs with C(squeue -t all) (so finished jobs too, while the controller remembers them, see C(MinJobAge)),
    then reads each job's output file path and exit code with C(scontrol show job).
  - A job id that C(squeue) no longer shows is looked up with C(scontrol show job); ids Slurm forgot are returned in RV(missing).
  - Read-only.
author:
  - glm.serve maintainers (@glm-serve)
extends_documentation_fragment:
  - glm.serve.slurm
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
options:
  job_ids:
    description: Jobs to read. With job ids and no O(user), jobs of any user are shown.
    type: list
    elements: str
  name:
    description: Only jobs with this name.
    type: str
  all_users:
    description: Jobs of every user (O(user) is ignored).
    type: bool
    default: false
  details:
    description:
      - Read each job's output path and exit code with C(scontrol show job) (one more controller call per job).
    type: bool
    default: true
seealso:
  - module: glm.serve.slurm_job
'''

EXAMPLES = r'''
- name: The server job
  glm.serve.slurm_job_info:
    name: glm-serve
  register: serve_jobs

- name: Where is it?
  ansible.builtin.debug:
    msg: "{{ serve_jobs.jobs | selectattr('state', 'eq', 'RUNNING') | map(attribute='nodes') | list }}"

- name: Two jobs by id, whoever owns them
  glm.serve.slurm_job_info:
    job_ids: ["4123", "4124"]
'''

RETURN = r'''
jobs:
  description: The jobs found, oldest first.
  returned: always
  type: list
  elements: dict
  contains:
    job_id:
      description: Job id.
      type: str
      sample: "4124"
    name:
      description: Job name.
      type: str
      sample: glm-serve
    user:
      description: Owner.
      type: str
      sample: glmuser
    state:
      description: Job state.
      type: str
      sample: RUNNING
    reason:
      description: Slurm's reason for the state.
      type: str
      sample: None
    nodes:
      description: Node list.
      type: str
      sample: node1
    partition:
      description: Partition.
      type: str
      sample: compute-h100
    elapsed:
      description: Time used, C([days-]hours:minutes:seconds).
      type: str
      sample: "1:02:03"
    time_limit:
      description: Time limit.
      type: str
      sample: "8:00:00"
    end_time:
      description: Actual or expected end, C(YYYY-MM-DDTHH:MM:SS).
      type: str
      sample: "2026-11-30T18:00:00"
    output_path:
      description: Standard output file (with O(details)).
      type: str
      sample: /home/u/glm/glm-serve-4124.out
    work_dir:
      description: Working directory of the job.
      type: str
      sample: /home/u/glm
    dependency:
      description: Remaining dependencies as Slurm shows them.
      type: str
      sample: afterok:4123(unfulfilled)
    exit_code:
      description: Exit code C(code:signal) (with O(details)).
      type: str
      sample: "0:0"
missing:
  description: Requested job ids Slurm no longer knows (purged after they ended, or never existed).
  returned: always
  type: list
  elements: str
  sample: []
slurm_version:
  description: Version of the Slurm client tools.
  returned: always
  type: str
  sample: 22.05.8
polls:
  description: Number of squeue/scontrol calls made.
  returned: always
  type: int
  sample: 2
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.glm.serve.plugins.module_utils import job_actions
from ansible_collections.glm.serve.plugins.module_utils.slurm_cli import SlurmCli, SlurmError


def argument_spec():
    return dict(
        job_ids=dict(type='list', elements='str'),
        name=dict(type='str'),
        user=dict(type='str'),
        all_users=dict(type='bool', default=False),
        details=dict(type='bool', default=True),
        retry_timeout=dict(type='int', default=120),
    )


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    cli = SlurmCli(module)
    try:
        result = job_actions.info(cli, module.params)
    except SlurmError as exc:
        module.fail_json(**exc.kwargs())
    module.exit_json(**result)


if __name__ == '__main__':
    main()
