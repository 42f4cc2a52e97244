# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The local cluster's own script (tests/tooling/cluster/cluster.sh) on the LIVE cluster: a pid file naming another daemon
of the cluster is stale, not proof that its daemon runs.

CI once failed here: its machine kept a root's cluster folder from an earlier run whose namespaces had been killed;
the new namespaces handed out the same small pids, slurmd-node2.pid named the new munged (whose command line also
names the cluster's folder), ``start`` took node2's slurmd for running, never started it, and waited 30 s for a
node that could not come. The test swaps one pid file for a moment and puts it back; the daemons are not touched.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import subprocess

import cluster_target as target
from deploy_helpers import require_cluster

RUN = os.path.join(target.DIR, 'run')


def _status():
    proc = subprocess.run(['bash', target.CLUSTER, 'status'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, check=False, stdin=subprocess.DEVNULL,
                          env=dict(os.environ, GLM_CLUSTER_RELEASE=target.RELEASE))
    return proc.returncode, proc.stdout


def _line(out, name):
    return next(line for line in out.splitlines() if line.split()[:1] == [name])


def test_a_pid_file_naming_another_daemon_of_the_cluster_is_stale():
    require_cluster()
    rc, out = _status()
    assert rc == 0, out
    assert 'running' in _line(out, 'slurmd-node2')
    munged_pid = _line(out, 'munged').split()[-1]
    node2 = os.path.join(RUN, 'slurmd-node2.pid')
    saved = node2 + '.test-saved'
    shutil.copy2(node2, saved)
    try:
        with open(node2, 'w') as handle:
            handle.write(munged_pid + '\n')
        rc, out = _status()
    finally:
        os.replace(saved, node2)
    assert rc != 0, out
    assert _line(out, 'slurmd-node2').split()[1] == 'stopped', out
    assert 'running' in _line(out, 'munged'), out
    rc, out = _status()
    assert rc == 0, out


def _slurm(*argv):
    return subprocess.run(target.slurm_argv(list(argv)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, check=False, stdin=subprocess.DEVNULL, env=target.slurm_env())


def test_a_cold_start_cancels_the_jobs_left_from_before():
    """A machine (or a root's namespaces) gone down without ``stop`` leaves slurmctld's state files listing its jobs
    RUNNING on nodes whose processes are gone: CI once started from such a state, and a replica of molecule's waited
    180 s, twice, behind a download job of a test run that a session's end had cut off. ``start`` with no slurmd alive
    cancels them. Here: a job on node1, slurmctld stopped (its state saved), every slurmd and the job's steps killed."""
    require_cluster()
    proc = _slurm('sbatch', '--parsable', '-J', 'cold-start-left', '-p', 'compute-h100', '-w', 'node1', '-t', '5',
                  '--wrap', 'sleep 297')
    assert proc.returncode == 0, proc.stdout
    job = proc.stdout.strip().split(';')[0]
    run = '/var/lib/glm-cluster/run' if target.IN_ROOT else RUN
    # slurmctld saves its state as it stops: waited for (at most 30 s), or `start` would take it for running
    down = ('pid=$(cat {run}/slurmctld.pid); kill -TERM "$pid"; for f in {run}/slurmd-*.pid; do kill -KILL "$(cat "$f")"; done; '
            'pkill -KILL -f "slurmstepd: \\[{job}[].]"; pkill -KILL -f "^sleep 297$"; '
            'for i in $(seq 150); do kill -0 "$pid" 2>/dev/null || exit 0; sleep 0.2; done; exit 1').format(run=run, job=job)
    try:
        assert _slurm('sh', '-c', down).returncode == 0
        start = subprocess.run(['bash', target.CLUSTER, 'start'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               universal_newlines=True, check=False, stdin=subprocess.DEVNULL,
                               env=dict(os.environ, GLM_CLUSTER_RELEASE=target.RELEASE))
        assert start.returncode == 0, start.stdout
        assert 'cancelling jobs left from before the cluster went down: ' + job in start.stdout, start.stdout
        assert job not in _slurm('squeue', '-h', '-o', '%i').stdout.split()
    finally:
        # whatever happened above, the cluster is up again for the tests that follow
        subprocess.run(['bash', target.CLUSTER, 'start'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                       stdin=subprocess.DEVNULL, env=dict(os.environ, GLM_CLUSTER_RELEASE=target.RELEASE))
        _slurm('scancel', job)
