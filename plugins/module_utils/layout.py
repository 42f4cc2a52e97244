# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one place that names the parts of a deployment: its jobs, the files in its work dir, its logs.

A deployment is the download job, N server replicas (replica 1 is ``NAME``, replica k is ``NAME-k``) and, with
several replicas, the router job (``NAME-router`` by default), all with their files in one work dir. The roles, the
playbooks (through the ``glm.serve.deployment_layout`` filter) and the modules read the names from here; a lint check
(tests/tooling/check_layout_names.py) keeps YAML and templates from spelling them.

Membership. A job belongs to a deployment when its Slurm comment says so: each job is submitted with
``--comment=glm.serve:DEPLOYMENT:ROLE[:K]`` (DEPLOYMENT is the server job name, ROLE one of download, replica,
router), on sbatch's command line rather than in the scripts (the replicas share one serve.sbatch, which must
stay the same for all of them), which ``squeue -o %k`` prints back (Slurm 22.05 too). A name pattern alone cannot decide it: replica 2 of the
deployment ``glm-serve`` is named ``glm-serve-2``, which is also the server of a deployment named ``glm-serve-2``; the
comments of the two say ``glm.serve:glm-serve:replica:2`` and ``glm.serve:glm-serve-2:replica:1``. A job with a
comment of another deployment (or another tool's comment) is never a member, whatever its name. A job with no comment
at all (submitted by a release before the comment) is judged by its name, as before, for as long as it runs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

#: The prefix of every glm.serve job comment.
COMMENT_PREFIX = 'glm.serve'
ROLES = ('download', 'replica', 'router')

#: File names in the work dir (the constants; the paths come from Layout).
BAD_NODES = 'bad-nodes.json'
ROUTER_WORKERS = 'router-workers.json'
REPLICAS_DIR = 'replicas'
RELAY = 'glm_relay.py'
#: The front door (router_proxy=glm or litellm): the teams' key files (KEYS_DIR/TEAM), the registry the proxy checks keys against
#: (hashes and limits, no key), the usage per team and day it keeps, the proxy's config (no secret: it names variables).
KEYS_DIR = 'keys'
#: The key between the front door and the replicas, through the gateway (0600, made by the router's install,
#: glm.serve.team_keys, with router_proxy glm or litellm): no client holds it.
REPLICA_KEY = 'replica-key'
GATEWAY_KEYS = 'gateway-keys.json'
USAGE = 'usage.json'
GATEWAY_CONFIG = 'gateway-config.json'
#: A line per handover of a replica to its successor (server_successors_until), appended by the job that hands over
#: once it has drained: ``END_EPOCH NAME OLD_ID NEW_ID NEW_START_EPOCH GPUS`` (successor.bash; deployment.read_handovers).
HANDOVERS = 'handovers.log'
#: The service's end for the replicas' successors, written by the teardown before it cancels (empty: now; else
#: glm_stop_at): no successor starts or is submitted past it (successor.bash, glm_service_end); a deploy removes it.
SERVICE_END = 'service-end'
#: The autoscaler's decisions and their reasons (server_replicas_max), a line each, appended by the router job that
#: serves the endpoint: ``EPOCH ISO-TIME up|down: WHAT (WHY)`` (roles/router/files/glm_scale.py).
SCALE_LOG = 'scale.log'
#: The autoscaler's settings (JSON), written by the router role, read again by the running router job when it
#: changes: a deploy that changes them restarts no job.
SCALE_CONFIG = 'scale.json'
#: The team of the service key (glm_api_key_file): the operator's, and the only one when glm_api_keys is unset.
DEFAULT_TEAM = 'default'
#: %-style patterns of the per-job files (``pattern % {'name': ..., 'job_id': ...}``); the log is sbatch's
#: ``--output=%x-%j.out`` (%x the job name, %j the job id) with sbatch run in the work dir.
LOG = '%(name)s-%(job_id)s.out'
ACTIVITY = '%(name)s-%(job_id)s.activity'
REPLICA_URL = '%(name)s.url'
SBATCH_OUTPUT = '%x-%j.out'


class Layout(object):
    """The names and paths of one deployment, from its work dir and job names (the glm role's glm_* settings)."""

    def __init__(self, work_dir, serve_name='glm-serve', download_name='glm-download', router_name=None):
        self.work_dir = work_dir
        self.serve_name = serve_name
        self.download_name = download_name
        self.router_name = router_name or '%s-router' % serve_name
        self._replica_re = re.compile(r'^%s-([0-9]+)$' % re.escape(serve_name))

    # -- jobs ---------------------------------------------------------------------------------------------------

    @property
    def deployment(self):
        """The deployment's id in job comments: the server job name."""
        return self.serve_name

    def replica_name(self, k):
        """Replica 1 keeps the single server's name; replica k is NAME-k."""
        k = int(k)
        if k < 1:
            raise ValueError('replica index %d: replicas count from 1' % k)
        return self.serve_name if k == 1 else '%s-%d' % (self.serve_name, k)

    def replica_names(self, count):
        return [self.replica_name(k) for k in range(1, max(int(count), 1) + 1)]

    def comment(self, role, k=None):
        """The job comment of a role: glm.serve:DEPLOYMENT:ROLE, and :K for a replica."""
        if role not in ROLES:
            raise ValueError('role %r: one of %s' % (role, ', '.join(ROLES)))
        text = '%s:%s:%s' % (COMMENT_PREFIX, self.deployment, role)
        if role == 'replica':
            text += ':%d' % int(k or 1)
        return text

    def role_of_name(self, name):
        """(role, k) from a job name alone, or None: for jobs without a comment (an earlier release's)."""
        if name == self.download_name:
            return ('download', None)
        if name == self.router_name:
            return ('router', None)
        if name == self.serve_name:
            return ('replica', 1)
        match = self._replica_re.match(name or '')
        if match and int(match.group(1)) >= 2:
            return ('replica', int(match.group(1)))
        return None

    def membership(self, job):
        """(role, k) of a job of this deployment (k None but for replicas), or None for any other job.

        The comment decides when the job has one; a job without one is judged by its name (see the module's doc)."""
        comment = (job.get('comment') or '').strip()
        if comment:
            return parse_comment(comment, self.deployment)
        return self.role_of_name(job.get('name'))

    # -- files ----------------------------------------------------------------------------------------------------

    def path(self, name):
        return os.path.join(self.work_dir, name)

    @property
    def bad_nodes_file(self):
        return self.path(BAD_NODES)

    @property
    def router_workers_file(self):
        return self.path(ROUTER_WORKERS)

    @property
    def replicas_dir(self):
        return self.path(REPLICAS_DIR)

    @property
    def relay_file(self):
        return self.path(RELAY)

    @property
    def keys_dir(self):
        return self.path(KEYS_DIR)

    @property
    def replica_key_file(self):
        return self.path(REPLICA_KEY)

    @property
    def gateway_keys_file(self):
        return self.path(GATEWAY_KEYS)

    @property
    def usage_file(self):
        return self.path(USAGE)

    @property
    def gateway_config_file(self):
        return self.path(GATEWAY_CONFIG)

    @property
    def handovers_file(self):
        return self.path(HANDOVERS)

    @property
    def service_end_file(self):
        return self.path(SERVICE_END)

    @property
    def scale_log_file(self):
        return self.path(SCALE_LOG)

    @property
    def scale_config_file(self):
        return self.path(SCALE_CONFIG)

    def replica_url_file(self, name):
        return os.path.join(self.replicas_dir, REPLICA_URL % {'name': name})

    def log_file(self, name, job_id):
        return self.path(LOG % {'name': name, 'job_id': job_id})

    def activity_file(self, name, job_id):
        return self.path(ACTIVITY % {'name': name, 'job_id': job_id})

    def as_dict(self, replicas=1):
        """What the glm.serve.deployment_layout filter returns (its RETURN documents the keys)."""
        names = self.replica_names(replicas)
        return {
            'work_dir': self.work_dir,
            'deployment': self.deployment,
            'jobs': {'download': self.download_name, 'server': self.serve_name, 'router': self.router_name,
                     'replicas': names},
            'comments': {'download': self.comment('download'), 'router': self.comment('router'),
                         'replicas': dict((n, self.comment('replica', k)) for k, n in enumerate(names, 1))},
            'files': {'bad_nodes': self.bad_nodes_file, 'router_workers': self.router_workers_file,
                      'replicas_dir': self.replicas_dir, 'relay': self.relay_file, 'keys_dir': self.keys_dir,
                      'replica_key': self.replica_key_file, 'gateway_keys': self.gateway_keys_file, 'usage': self.usage_file,
                      'gateway_config': self.gateway_config_file, 'handovers': self.handovers_file,
                      'service_end': self.service_end_file, 'scale_log': self.scale_log_file,
                      'scale_config': self.scale_config_file,
                      'replica_urls': dict((n, self.replica_url_file(n)) for n in names)},
            'patterns': {'log': LOG, 'activity': ACTIVITY, 'replica_url': REPLICA_URL, 'sbatch_output': SBATCH_OUTPUT},
        }


def parse_comment(comment, deployment=None):
    """(role, k) of a glm.serve job comment (of the given deployment, when one is given), else None."""
    parts = (comment or '').strip().split(':')
    if len(parts) < 3 or parts[0] != COMMENT_PREFIX or parts[2] not in ROLES:
        return None
    if deployment is not None and parts[1] != deployment:
        return None
    if parts[2] == 'replica':
        if len(parts) != 4 or not parts[3].isdigit() or int(parts[3]) < 1:
            return None
        return ('replica', int(parts[3]))
    return (parts[2], None) if len(parts) == 3 else None


def log_name_re(name):
    """The regular expression of the job logs of one job name (NAME-JOBID.out), the job id in group 1."""
    return re.compile(r'^%s-(\d+)\.out$' % re.escape(name))


def by_role(layout, jobs):
    """{'download': [...], 'router': [...], 'replicas': {k: [...]}} of the member jobs (each list oldest first, as
    given), and the rest in 'others'."""
    out = {'download': [], 'router': [], 'replicas': {}, 'others': []}
    for job in jobs:
        member = layout.membership(job)
        if member is None:
            out['others'].append(job)
        elif member[0] == 'replica':
            out['replicas'].setdefault(member[1], []).append(job)
        else:
            out[member[0]].append(job)
    return out
