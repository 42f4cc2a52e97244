#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: deploy_progress
short_description: Say in one line where a GLM deploy stands (queued, downloading, loading ...), asking Slurm nothing
version_added: 1.0.0
description:
  - Given the jobs of a deploy as M(glm.serve.slurm_job_info) returned them (the download job, then the server job), says
    which phase the deploy is in and how far it got, the same line the sliced wait of M(glm.serve.slurm_job) prints
    (O(glm.serve.slurm_job#module:wait_slice)).
  - The phases are V(queued) (with Slurm's reason and, when known, the expected start), V(saving) (the container image),
    V(downloading) (GB done of the total, rate, ETA), V(starting), V(loading) (the weights, shards done), V(capturing)
    (CUDA graphs), V(warming), V(ready) and V(ended).
  - Deprecated - M(glm.serve.deployment_info) returns the same RV(phase), RV(progress) and RV(activity) of a whole
    deployment, with the jobs it reads itself (one Slurm query); this module stays as a thin wrapper of the same code.
  - Reads the end of the jobs' output files (C(NAME-JOBID.out) in O(chdir)) and the size of O(model_dir) against the total
    the download job writes there (C(.glm-serve-download.json)). It calls no Slurm command. The download's rate is its
    average since the job started; the sliced wait measures it over the last interval.
author:
  - glm.serve maintainers (@glm-serve)
deprecated:
  removed_in: 2.0.0
  why: M(glm.serve.deployment_info) returns the same phase, progress and activity for the whole deployment, with the jobs it reads itself.
  alternative: Use M(glm.serve.deployment_info).
extends_documentation_fragment:
  - glm.serve.attributes.read_only
options:
  server:
    description:
      - The server job, a row of RV(glm.serve.slurm_job_info#module:jobs) (at least C(job_id), C(name), C(state); C(reason),
        C(nodes), C(start_time) when known). None when there is none.
    type: dict
  download:
    description: The download job the server job waits for (or the last one), a row like O(server). None when there is none.
    type: dict
  chdir:
    description: The folder of the jobs' output files.
    type: path
    required: true
  model_dir:
    description: The model directory the download job fills.
    type: path
  ready:
    description: The server answered its probe (the phase is then V(ready)).
    type: bool
    default: false
  endpoint:
    description: The server's URL, for the V(ready) line.
    type: str
  model:
    description: The served model name, for the V(ready) line.
    type: str
seealso:
  - module: glm.serve.slurm_job
  - module: glm.serve.slurm_job_info
'''

EXAMPLES = r'''
- name: Say where the deploy stands
  glm.serve.deploy_progress:
    server: "{{ serve_info.jobs | last | default(none) }}"
    download: "{{ download_info.jobs | last | default(none) }}"
    chdir: ~/glm
    model_dir: ~/glm/GLM-5.3-Flash
  register: progress
'''

RETURN = r'''
phase:
  description: V(queued), V(saving), V(downloading), V(starting), V(loading), V(capturing), V(warming), V(ready), V(ended), or V(none) without a server job.
  returned: always
  type: str
  sample: loading
progress:
  description: The phase in one line, with its figures.
  returned: always
  type: str
  sample: "loading the weights: 42/93 shards (45%) (job 42 on node1)"
activity:
  description:
    - What the watcher beside the server recorded from its metrics (C(NAME-JOBID.activity) in O(chdir); the server role
      writes it with C(server_enable_metrics)), with C(idle_for), the seconds since the last request by the login
      node's clock. None when the server job has no such file.
  returned: always
  type: dict
  contains:
    last_request:
      description: When the last request arrived or ran (seconds since the epoch); the server's first answer before any.
      type: int
    idle_for:
      description: Seconds since then.
      type: int
    requests_total:
      description: The requests the server finished since it started (its warm-up included).
      type: int
    idle_timeout:
      description: The server's idle timeout in seconds (0 is none).
      type: int
    stopped_idle:
      description: When the watcher stopped the server for being idle, or None.
      type: int
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.glm.serve.plugins.module_utils import deployment
from ansible_collections.glm.serve.plugins.module_utils.layout import Layout


def main():
    module = AnsibleModule(argument_spec=dict(
        server=dict(type='dict'),
        download=dict(type='dict'),
        chdir=dict(type='path', required=True),
        model_dir=dict(type='path'),
        ready=dict(type='bool', default=False),
        endpoint=dict(type='str'),
        model=dict(type='str'),
    ), supports_check_mode=True)
    params = module.params
    said = deployment.progress(Layout(params['chdir']), params['download'], params['server'], params['model_dir'],
                               ready=params['ready'], endpoint=params['endpoint'], model=params['model'])
    module.exit_json(changed=False, **said)


if __name__ == '__main__':
    main()
