# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Benchmark: the controller load of a deploy that waits on N replicas, N = 1, 2, 3, on the local cluster that
GLM_CLUSTER_RELEASE selects (tests/integration/cluster_target.py). Run as root; prints figures, it is not a test.

    GLM_CLUSTER_RELEASE=trixie .venv/bin/python tests/bench/bench_replicas.py [--load 60] [--json FILE]

Each round deploys (playbooks/deploy.yml over SSH to the login user, a work dir and job names of its own, the
download already done) N replicas whose SGLang stand-ins spend --load seconds loading the weights (port closed, as
the real server does for minutes), so the deploy waits; the login user's RPCs to slurmctld during the deploy come
from sdiag's per-user counters (nothing else runs as that user). N=1 is a single server (no router); N=2 puts one
replica on each GPU node of the local cluster, with the router on node3; N=3 asks for one replica more than the
cluster's two GPU nodes hold, so the third waits PENDING (Resources) until its server_wait_timeout (the load
seconds plus 30), as on a full cluster, and the deploy goes on with server_min_replicas=2. Between rounds,
teardown. Figures: the deploy's seconds, its RPCs and RPCs per minute (the RPCs of the submissions and lookups, a
few per job, come once; those of the waits come per minute, and a deploy waits on one job at a time).
"""

from __future__ import absolute_import, division, print_function

import argparse
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'integration'))

import cluster_target as target  # noqa: E402  pylint: disable=wrong-import-position
from bench_release import diff, sdiag  # noqa: E402  pylint: disable=wrong-import-position
from deploy_helpers import (isolated_vars, login_home, router_wheels, run_playbook,  # noqa: E402  pylint: disable=wrong-import-position
                            scancel_names)

WORK = 'glm-bench-replicas'
DOWNLOAD, SERVE = 'bench-rp-download', 'bench-rp-serve'
NAMES = [DOWNLOAD, SERVE, SERVE + '-2', SERVE + '-3', SERVE + '-router']


def variables(replicas, load, folder):
    return isolated_vars(WORK, DOWNLOAD, SERVE, server_replicas=replicas, server_min_replicas=min(replicas, 2),
                         server_env={'GLM_STANDIN_SGLANG_LOAD': str(load), 'GLM_STANDIN_SGLANG_WARMUP': '1'},
                         server_wait_timeout=load + 30, router_host='node', router_policy='round_robin',
                         router_pip_args=['--no-index', '--find-links', folder], router_sync_interval=2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--load', type=int, default=60, help='seconds each stand-in spends loading (default 60)')
    parser.add_argument('--json', metavar='FILE', help='also write the figures as JSON')
    opts = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit('run as root (sdiag, the login home)')
    folder = router_wheels()
    tmp = '/tmp/glm-bench-replicas'
    os.makedirs(tmp, exist_ok=True)
    scancel_names(NAMES)
    shutil.rmtree(os.path.join(login_home(), WORK), ignore_errors=True)
    rows = []
    try:
        # the download and the router's venv once, before the rounds (not what is measured)
        warm = run_playbook('deploy.yml', variables(2, 1, folder), tmp, timeout=900)
        if warm.returncode:
            raise SystemExit('the warm-up deploy failed:\n%s' % warm.stdout[-4000:])
        for replicas in (1, 2, 3):
            run_playbook('teardown.yml', variables(replicas, opts.load, folder), tmp)
            time.sleep(5)
            users0 = sdiag()[0]
            started = time.monotonic()
            proc = run_playbook('deploy.yml', dict(variables(replicas, opts.load, folder), glm_progress_interval=600),
                                tmp, timeout=1800, result_json=True)
            took = time.monotonic() - started
            users1 = sdiag()[0]
            rpcs = diff(users1, users0, target.LOGIN_USER)[0]
            rows.append({'replicas': replicas, 'ok': proc.returncode == 0, 'seconds': round(took, 1), 'rpcs': rpcs,
                         'rpcs_per_min': round(rpcs / (took / 60.0), 2)})
    finally:
        run_playbook('teardown.yml', variables(1, 1, folder), tmp)
        scancel_names(NAMES)
    print('\n## Controller load of a deploy waiting on N replicas (%s, Slurm release of GLM_CLUSTER_RELEASE=%s; load %d s)'
          % (target.LOGIN_USER, target.RELEASE, opts.load))
    print('| replicas | deploy ok | seconds | RPCs of the login user | RPCs/min |')
    print('|---|---|---|---|---|')
    for row in rows:
        print('| %(replicas)d | %(ok)s | %(seconds)s | %(rpcs)d | %(rpcs_per_min)s |' % row)
    if opts.json:
        with open(opts.json, 'w') as handle:
            json.dump(rows, handle, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
