#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: slurm_job_info
short_description: Read Slurm jobs by id, name or user, finished ones too
version_added: 1.0.0
description:
  - Lists jobs with C(squeue -t all) (so finished jobs too, while the controller remembers them, see C(MinJobAge)),
    then reads each job's output file path and exit code with C(scontrol show job).
  - A job id that C(squeue) no longer shows is looked up with C(scontrol show job), then in accounting (C(sacct));
    ids nothing knows are returned in RV(missing).
  - Listing by name or user (not O(live=true)), the newest ended jobs that slurmctld forgot (at most 5) are added from
    accounting, marked RV(jobs[].source=accounting).
  - Read-only.
author:
  - glm.serve maintainers (@glm-serve)
extends_documentation_fragment:
  - glm.serve.slurm
  - glm.serve.slurm.probe
  - glm.serve.attributes.slurm_read_only
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
  live:
    description:
      - V(true), only the jobs that are live (in the queue and not ending, see RV(jobs[].live)); V(false), only the others.
      - Unset, every job found.
    type: bool
  probe_match:
    description:
      - With O(probe), ask only the running jobs whose name matches this Python regular expression (C(re.search); the
        others get no RV(jobs[].probe)), so that a listing of all of a user's jobs sends the key to no other server.
      - Unset, every running job listed is asked.
    type: str
    version_added: 1.1.0
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

- name: The live server job, and whether it answers with the key
  glm.serve.slurm_job_info:
    name: glm-serve
    live: true
    probe:
      port: 30000
      key_file: /home/u/glm/api-key
      model: glm-5.3-flash
  register: serve_live

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
    start_time:
      description: When the job started (or is expected to), C(YYYY-MM-DDTHH:MM:SS).
      type: str
      sample: "2026-11-30T10:00:00"
    submit_time:
      description: When the job was submitted.
      type: str
      sample: "2026-11-30T09:58:00"
    source:
      description:
        - V(slurmctld) (the controller remembers the job) or V(accounting) (from C(sacct), after slurmctld forgot it;
          no RV(jobs[].output_path) then).
      type: str
      sample: slurmctld
    live:
      description:
        - True when the job is in the queue and not ending (PENDING, CONFIGURING, RUNNING, SUSPENDED, a requeued state),
          the kind of job that a deploy adopts and that a teardown cancels.
      type: bool
      sample: true
    ending:
      description: The job is COMPLETING or in STAGE_OUT, still on its node but ending; neither live nor gone.
      type: bool
      sample: false
    probe:
      description: With O(probe), what the server of a RUNNING job answered; V(null) for a job that does not run.
      type: dict
      contains:
        status:
          description: V(ready) (HTTP 200 listing O(probe.model)), V(starting) (no answer yet), V(unauthorized) (HTTP 401), V(wrong_model).
          type: str
          sample: ready
        detail:
          description: The answer in words.
          type: str
          sample: serves glm-5.3-flash
        answered:
          description: True when the server sent any HTTP response.
          type: bool
        endpoint:
          description: C(http://NODE:PORT).
          type: str
          sample: http://node1:30000
        models:
          description: The model ids listed.
          type: list
          elements: str
        max_model_len:
          description: The context length reported for O(probe.model).
          type: int
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
accounting_calls:
  description: Number of C(sacct) calls made (slurmdbd's load, not the controller's).
  returned: always
  type: int
  sample: 0
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
        live=dict(type='bool'),
        probe=dict(type='dict', options=job_actions.probe_options()),
        probe_match=dict(type='str'),
        retry_timeout=dict(type='int', default=120),
        accounting=dict(type='bool', default=True),
    )


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    ctx = job_actions.Context(SlurmCli(module), module.params, check_mode=module.check_mode, warn=module.warn, log=module.log)
    try:
        result = job_actions.info(ctx)
    except (SlurmError, job_actions.ActionError) as exc:
        module.fail_json(**job_actions.fail_kwargs(exc))
    module.exit_json(**result)


if __name__ == '__main__':
    main()
