#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: deployment_info
short_description: One GLM deployment as data - its jobs by role, files, progress, endpoint and router - in one Slurm query
version_added: 1.0.0
description:
  - Reads one deployment of the glm.serve roles (the download job, the server replicas, the router; their files in
    O(work_dir)) and changes nothing. The status and teardown playbooks are built on it.
  - "Controller calls: one C(squeue --local -t all -u USER) for the user's jobs, with their comments. One C(sacct)
    (slurmdbd, not slurmctld) only when slurmctld knows no job of the server or of the download any more (C(MinJobAge)
    after they ended), for their newest ended jobs (at most 5 each). RV(polls) and RV(accounting_calls) count them."
  - Membership - a job belongs to the deployment when its Slurm comment says so (C(glm.serve:DEPLOYMENT:ROLE[:K]),
    set by the batch scripts of the roles; see the filter P(glm.serve.deployment_layout#filter)), whatever its name; a
    name pattern alone cannot decide, since replica 2 of C(glm-serve) and the server of a deployment named
    C(glm-serve-2) share the name C(glm-serve-2). A job with no comment (an earlier release's) is judged by its name.
  - Without Slurm - the bad nodes in force (C(bad-nodes.json), within O(bad_node_ttl)), the router's workers file, the
    endpoint file, the relay; where the deploy stands (RV(phase), RV(progress), from the jobs' logs and O(model_dir),
    as the deploy's wait says it; this absorbs M(glm.serve.deploy_progress)) and the server's activity file.
  - With O(probe) - each running replica (and the router when it listens on the probe's port) asked C(/v1/models) with
    the key, read from O(probe.key_file) only when a job runs (never returned) - replicas behind a router with
    O(replica_key_file) when given; the server's C(/metrics) text and the
    status of C(/v1/models) without the key; the router's C(/metrics) for the requests each replica served.
author:
  - glm.serve maintainers (@glm-serve)
extends_documentation_fragment:
  - glm.serve.slurm
  - glm.serve.slurm.probe
  - glm.serve.attributes.slurm_read_only
options:
  work_dir:
    description: The deployment's work dir, resolved (C(glm_paths.work_dir)).
    type: path
    required: true
  serve_name:
    description: The server job name (C(glm_serve_job_name)), replica 1's; replica k is C(NAME-k).
    type: str
    default: glm-serve
  download_name:
    description: The download job name (C(glm_download_job_name)).
    type: str
    default: glm-download
  router_name:
    description: The router job name (C(glm_router_job_name)); C(NAME-router) when not given.
    type: str
  model_dir:
    description: The model directory the download job fills (for the download's progress).
    type: path
  endpoint_file:
    description: The endpoint file the server or the router writes (C(glm_paths.endpoint_file)).
    type: path
  port:
    description: The servers' port (C(glm_port)).
    type: int
    default: 30000
  router_port:
    description: The router's port (C(router_port)).
    type: int
    default: 30000
  router_metrics_port:
    description: The router's Prometheus port (C(router_metrics_port)).
    type: int
    default: 29000
  router_tls_cert:
    description:
      - The router's TLS certificate (C(router_tls_cert), a PEM file on the host) when it serves HTTPS. The router is then
        asked over HTTPS, pinned to that certificate (O(probe.tls_cert)); the certificate its endpoint file names
        (C(GLM_TLS_CERT), what the running router serves) comes first. A router serving HTTPS is never asked over plain
        HTTP; when the certificate cannot be read, it is not asked (C(router.job.probe) null).
    type: path
  replica_key_file:
    description:
      - The key the replicas behind the router's front door serve (C(glm_layout.files.replica_key), which no client
        holds); with O(probe), they are asked with it instead of O(probe.key_file) (a single server still is). Read only
        when a job runs, never returned.
    type: path
  bad_node_ttl:
    description: Seconds a node stays on the bad-node list after its GPU check failed (C(server_bad_node_ttl)).
    type: int
    default: 86400
seealso:
  - module: glm.serve.slurm_job_info
  - plugin: glm.serve.deployment_layout
    plugin_type: filter
'''

EXAMPLES = r'''
- name: The deployment, its servers asked with the key
  glm.serve.deployment_info:
    work_dir: /home/u/glm
    serve_name: glm-serve
    download_name: glm-download
    model_dir: /home/u/glm/GLM-5.3-Flash
    endpoint_file: /home/u/glm/endpoint
    probe:
      port: 30000
      key_file: /home/u/glm/api-key
      model: glm-5.3-flash
  register: deployment

- name: Where it stands
  ansible.builtin.debug:
    msg: "{{ deployment.progress }}"
'''

RETURN = r'''
jobs:
  description:
    - The deployment's jobs Slurm knows, oldest first, as RV(glm.serve.slurm_job_info#module:jobs) returns them without
      details, with C(role) (V(download), V(replica) or V(router)), C(replica) (the index, 1 for the server job NAME;
      None for the other roles), C(comment) (Slurm's), and for replicas and the router C(probe).
  returned: always
  type: list
  elements: dict
server:
  description: Replica 1's live job (the newest), None when none.
  returned: always
  type: dict
download:
  description: The download jobs, oldest first.
  returned: always
  type: list
  elements: dict
replicas:
  description: The live jobs of replicas 2, 3... (replica 1 is RV(server)).
  returned: always
  type: list
  elements: dict
router:
  description:
    - None without a router (no workers file, no router job, no other replica). Else C(job) (the live router job or
      None), C(workers) (from C(router-workers.json) - C(url), C(replica), C(healthy), C(draining)) and
      C(requests_served) (C({url - count}) from the router's metrics), C(answers) (C({total, failed}), the answers the
      router gave its clients since its job started and how many were 5xx, from its metrics; None when not read).
  returned: always
  type: dict
handovers:
  description:
    - The replicas' handovers to their successors (C(server_successors_until)), from the work dir's
      C(layout.files.handovers); None when there is none. C(count), C(by_replica) (C({name - count})),
      C(overlap_gpu_hours) (the GPU-hours both jobs of each handover held, from the successor's start to the old job's
      end), C(last) (C(time), C(replica), C(from) and C(to) job ids, C(overlap_seconds), C(gpus)).
  returned: always
  type: dict
scaling:
  description:
    - The autoscaler's decisions (C(server_replicas_max)), from the work dir's C(layout.files.scale_log); None when
      there is none. C(count), C(last) (the five newest, oldest first - C(time), C(line), what was decided and why),
      C(zero_since) (C(server_replicas=0) - when the last replica left, None while one serves or comes).
  returned: always
  type: dict
successors:
  description:
    - The successors waiting (PENDING on C(after:ID+MINUTES) of a job of the deployment) - C(replica) (the job name),
      C(job_id), C(after) (the job it follows), C(starts) (when Slurm lets it start, C(YYYY-MM-DDTHH:MM:SS), None when
      the job it follows does not run).
  returned: always
  type: list
  elements: dict
endpoint:
  description: C(http://NODE:PORT/v1) of the running server, else None.
  returned: always
  type: str
endpoint_file:
  description: The variables of the endpoint file (C(GLM_BASE_URL), C(GLM_MODEL)), None when it is missing.
  returned: always
  type: dict
endpoint_file_text:
  description: The endpoint file's text (no secret in it), None when it is missing.
  returned: always
  type: str
tunnel_to:
  description: Where the tunnel's relay connects, C(NODE:PORT) of the running router, else of the running server; '' when neither runs.
  returned: always
  type: str
relay:
  description: Whether the tunnel's relay is in the work dir.
  returned: always
  type: bool
bad_nodes:
  description: The nodes the server jobs avoid, within O(bad_node_ttl) - C({node - {cause, since, job_id}}).
  returned: always
  type: dict
usage:
  description:
    - What the router's front door (C(router_proxy=glm) or C(litellm)) counted per team, from its usage file in the work dir
      (C(layout.files.usage)); V(null) without one. C(updated) (when the proxy last wrote it, Unix time), C(today) and
      C(month) (UTC) - C({team - {requests, errors, limited, prompt_tokens, completion_tokens}}); C(limited) counts
      the requests refused by the team's limits (HTTP 429).
  returned: always
  type: dict
bad_node_ttl:
  description: O(bad_node_ttl).
  returned: always
  type: int
phase:
  description: Where the deploy stands, as M(glm.serve.deploy_progress) said it (V(none) without jobs).
  returned: always
  type: str
progress:
  description: The phase in one line, with its figures.
  returned: always
  type: str
activity:
  description: What the watcher beside the server recorded (C(NAME-JOBID.activity)), with C(idle_for); None without.
  returned: always
  type: dict
metrics_status:
  description: The HTTP status of the server's C(/metrics) (404 without C(--enable-metrics)); None when not asked.
  returned: always
  type: int
metrics_text:
  description: The server's C(/metrics) text (for P(glm.serve.sglang_metrics#filter)), None unless it answered 200.
  returned: always
  type: str
without_key_status:
  description: The HTTP status of the server's C(/v1/models) without the key (401 when the key is enforced); None when not asked.
  returned: always
  type: int
probe_error:
  description: Why the servers were not asked (the key file could not be read), else None.
  returned: always
  type: str
layout:
  description: The deployment's names and paths (P(glm.serve.deployment_layout#filter)).
  returned: always
  type: dict
time:
  description: When the view was taken, seconds since the epoch (the login node's clock).
  returned: always
  type: int
polls:
  description: squeue/scontrol calls made (1).
  returned: always
  type: int
accounting_calls:
  description: sacct calls made (0 or 1).
  returned: always
  type: int
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.glm.serve.plugins.module_utils import deployment, job_actions
from ansible_collections.glm.serve.plugins.module_utils.layout import Layout
from ansible_collections.glm.serve.plugins.module_utils.slurm_cli import SlurmCli, SlurmError


def argument_spec():
    return dict(
        work_dir=dict(type='path', required=True),
        serve_name=dict(type='str', default='glm-serve'),
        download_name=dict(type='str', default='glm-download'),
        router_name=dict(type='str'),
        model_dir=dict(type='path'),
        endpoint_file=dict(type='path'),
        port=dict(type='int', default=30000),
        router_port=dict(type='int', default=30000),
        router_metrics_port=dict(type='int', default=29000),
        router_tls_cert=dict(type='path'),
        replica_key_file=dict(type='path', no_log=False),
        bad_node_ttl=dict(type='int', default=86400),
        probe=dict(type='dict', options=job_actions.probe_options()),
        user=dict(type='str'),
        retry_timeout=dict(type='int', default=120),
        accounting=dict(type='bool', default=True),
    )


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    params = module.params
    ctx = job_actions.Context(SlurmCli(module), params, check_mode=module.check_mode, warn=module.warn, log=module.log)
    layout = Layout(params['work_dir'], params['serve_name'], params['download_name'], params['router_name'])
    try:
        result = deployment.View(ctx, layout, params).build()
    except (SlurmError, job_actions.ActionError) as exc:
        module.fail_json(**job_actions.fail_kwargs(exc))
    module.exit_json(**result)


if __name__ == '__main__':
    main()
