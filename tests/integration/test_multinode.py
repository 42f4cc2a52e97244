# -*- coding: utf-8 -*-
"""One server over the local cluster's two GPU nodes (server_nodes=2), deployed over real SSH: one job of two nodes,
the GPU check on each node before SGLang starts, one SGLang stand-in per node (a task per node, --node-rank from
Slurm's SLURM_NODEID, --dist-init-addr the first node's), the head answering with the key, the other rank only
joining; then teardown leaves nothing. Work dir ~/glm-it-multinode, jobs it-mn-*.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os
import re
import shutil

import pytest

from deploy_helpers import isolated_vars, live_jobs, login_home, recap, require_cluster, run_playbook, scancel_names, ssh

WORK = 'glm-it-multinode'
DOWNLOAD, SERVE = 'it-mn-download', 'it-mn-serve'
NAMES = [DOWNLOAD, SERVE]
FAST = {'GLM_STANDIN_SGLANG_LOAD': '1', 'GLM_STANDIN_SGLANG_WARMUP': '1'}


def variables(**extra):
    return dict(isolated_vars(WORK, DOWNLOAD, SERVE, server_nodes=2, server_env=FAST), **extra)


PROBE = ('python3 -c "import sys, urllib.request, urllib.error\n'
         'req = urllib.request.Request(sys.argv[1] + \\"/models\\")\n'
         'if sys.argv[2] != \\"-\\": req.add_header(\\"Authorization\\", \\"Bearer \\" + open(sys.argv[2]).read().strip())\n'
         'try: print(urllib.request.urlopen(req, timeout=20).status)\n'
         'except urllib.error.HTTPError as e: print(e.code)\n'
         'except OSError as e: print(0)" %s %s')


def models(base, key=True):
    """The HTTP status of GET base/models from the login node, with the key read from its file there (or none)."""
    return int(ssh(PROBE % (base, '~/%s/api-key' % WORK if key else '-')).strip())


def jobs():
    return {row[1]: (row[0], row[2]) for row in live_jobs(lambda name: name in NAMES)}


@pytest.fixture(scope='module')
def env(tmp_path_factory):
    require_cluster()
    tmp = str(tmp_path_factory.mktemp('multinode'))
    work = os.path.join(login_home(), WORK)
    scancel_names(NAMES)
    shutil.rmtree(work, ignore_errors=True)
    try:
        proc = run_playbook('deploy.yml', variables(), tmp, timeout=600)
        assert proc.returncode == 0, proc.stdout[-6000:]
        yield {'tmp': tmp, 'deploy': proc, 'work': work}
    finally:
        run_playbook('teardown.yml', dict(variables(), glm_teardown_download=True), tmp)
        left = jobs()
        scancel_names(NAMES)
        shutil.rmtree(work, ignore_errors=True)
        assert not {k: v for k, v in left.items() if v[1] != 'COMPLETING'}, left


def test_one_server_over_two_nodes(env):
    now = jobs()
    assert set(now) == {SERVE} and now[SERVE][1] == 'RUNNING', now
    job_id = now[SERVE][0]
    assert ssh("squeue -h -j %s -o '%%D %%N'" % job_id).split() == ['2', 'node[1-2]']
    # the endpoint is the head's (the first node, which runs the batch script), and it answers with the key only
    endpoint = dict(line.split('=', 1) for line in ssh('cat ~/%s/endpoint' % WORK).split())['GLM_BASE_URL']
    assert endpoint == 'http://node1:30000/v1'
    assert models(endpoint) == 200
    assert models(endpoint, key=False) == 401
    # the node that is not the head serves no API (SGLang's rank > 0 runs only its schedulers and a dummy health
    # server on the port): no model list there
    assert models('http://node2:30000/v1') != 200
    log = open(glob.glob(os.path.join(env['work'], '%s-%s.out' % (SERVE, job_id)))[0], errors='replace').read()
    # the GPU check ran on both nodes before SGLang started
    checks = re.findall(r'^gpu-check: (node\d): 8 GPUs ok', log, re.M)
    assert sorted(checks) == ['node1', 'node2'], log[-3000:]
    # both ranks ran: TP0's schedulers on node1, TP8's (rank 1 of tp 16) on node2, meeting on node1's address
    assert re.search(r'\bTP8\b', log) and re.search(r'\bTP0\b', log), log[-3000:]
    assert '--node-rank' not in ssh('cat ~/%s/serve.sbatch' % WORK).split('srun --container-image')[0]


def test_second_deploy_changes_nothing(env):
    before = jobs()
    proc = run_playbook('deploy.yml', variables(), env['tmp'], timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert recap(proc)[0] == 0, proc.stdout[-4000:]
    assert jobs() == before
