# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Bursting on a preemptible partition (issue 26, slice 3), on the local cluster over real SSH, with the REAL router
(smg and LiteLLM's proxy) and the SGLang stand-ins, and Slurm's own preemption: the test bed's slurm.conf
(tests/tooling/cluster/cluster.sh) has PreemptType=preempt/partition_prio, PreemptMode=REQUEUE,
PreemptParameters=send_user_signal and a partition gpu-burst (PriorityTier=1, GraceTime=60) over the nodes of
compute-h100 (PriorityTier=10).

- server_replicas=1, server_replicas_max=2, server_burst_partition=gpu-burst: under 5 requests a second of 2 s
  (tests/tooling/loadgen.py on the login node) the autoscaler submits replica 2 with --partition=gpu-burst.
- A job of compute-h100 asks for replica 2's node (sbatch -w NODE --gres=gpu:8 as the login user): Slurm preempts
  replica 2 (not a scancel): its USR1 (the replica's --signal=B:USR1@120, sent at the preemption) makes it say so
  (.NAME.preempted), leave the router and finish its requests within the grace time; the job ends before Slurm would
  requeue it, and the preemptor runs.
- The controller's log says "preempted:"; the burst job (--no-requeue: PreemptMode=REQUEUE would requeue it even
  after it ended in its grace time) ends; the load, still above the target, gets "not submitted, a burst replica was
  preempted" instead of a new burst job. No request fails, non-streamed or streamed.

Marked continuity (minutes: `make continuity`, not make test).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import time

import pytest

from deploy_helpers import RouterDeployment, scale_log, ssh, wait_for_scale_line

pytestmark = pytest.mark.continuity

WORK = 'glm-it-burst'
DOWNLOAD, SERVE = 'it-b-download', 'it-b-serve'
ROUTER = SERVE + '-router'
PREEMPTOR = 'it-b-preemptor'
LOAD_SECONDS = 120


def deployment(tmp_path):
    return RouterDeployment(tmp_path, WORK, DOWNLOAD, SERVE, others=[PREEMPTOR], server_replicas=1, server_replicas_max=2,
                            server_scale_target=3, server_scale_up_after=10, server_scale_down_after='10m',
                            server_scale_cooldown=10, server_burst_partition='gpu-burst', server_burst_hold='5m',
                            router_drain_timeout=30)


def test_a_burst_replica_preempted_by_slurm_leaves_first_and_is_not_fought(tmp_path):
    with deployment(tmp_path) as dep:
        proc = dep.deploy(timeout=900)
        assert proc.returncode == 0, proc.stdout[-6000:]
        load = dep.load(LOAD_SECONDS)
        started = time.monotonic()
        i_up, up = wait_for_scale_line(WORK, ['up: %s-2 submitted as job' % SERVE, 'to burst (--partition=gpu-burst --no-requeue)'], 60,
                                       router_name=ROUTER)
        burst_id = up.split(' submitted as job ', 1)[1].split()[0]
        i_join, _line = wait_for_scale_line(WORK, ['up: %s-2 (job %s) joined the router' % (SERVE, burst_id)], 60, i_up)
        shown = ssh('squeue -h -j %s -o "%%P %%N %%T"' % burst_id).split()
        assert shown[0] == 'gpu-burst' and shown[2] == 'RUNNING', shown
        victim = shown[1]
        time.sleep(10)                               # both replicas serve under the load
        preempt_at = time.monotonic() - started
        ssh('cd /tmp && sbatch -J %s -p compute-h100 -w %s --gres=gpu:8 -t 5 -o /dev/null --wrap "sleep 60"' % (PREEMPTOR, victim))
        i_pre, preempted = wait_for_scale_line(WORK, ['preempted: %s-2 (job %s) was preempted by Slurm' % (SERVE, burst_id)],
                                               90, i_join, router_name=ROUTER)
        said_at = time.monotonic() - started
        deadline = time.monotonic() + 90
        while dep.jobs().get(PREEMPTOR, ('', ''))[1] != 'RUNNING':
            assert time.monotonic() < deadline, dep.jobs()
            time.sleep(1)
        runs_at = time.monotonic() - started
        state = ssh('sacct -X -n -P -j %s -o State,Restarts,Partition' % burst_id).strip()
        log = ssh('cat ~/%s/%s-%s.out' % (WORK, SERVE + '-2', burst_id), check=False)
        assert 'Slurm preempts this job (its grace time ends in' in log and 'left the router' in log, log[-3000:]
        out, err = load.communicate(timeout=LOAD_SECONDS + 120)
        summary = json.loads(out.strip().splitlines()[-1])
        lines = scale_log(WORK)
        after = lines[i_pre + 1:]
        assert not [l for l in after if ' submitted as job ' in l], after        # not fought
        held = [l for l in after if 'not submitted, a burst replica was preempted' in l]
        assert held, lines                          # the load wanted one: held
        plain_failed = sum(n for outcome, n in summary['plain'].items() if outcome != '200')
        streamed_failed = sum(n for outcome, n in summary['streamed'].items() if outcome != '200')
        assert plain_failed == 0 and streamed_failed == 0, (summary, err[-2000:])
        print('\nBURST PREEMPTED (5 requests a second of 2 s for %d s; replica 2 on gpu-burst, node %s): submitted %s; the '
              'preemptor sent at %.0f s; the controller said "preempted" at %.0f s; the preemptor ran at %.0f s; the burst '
              'job: %s (sacct State|Restarts|Partition); %d requests, outcomes %s, non-streamed failed %d, streamed failed %d; '
              '%d "not submitted" decisions after it, no submission. Scale log:\n  %s' % (
                  LOAD_SECONDS, victim, up, preempt_at, said_at, runs_at, state, summary['sent'], summary['outcomes'],
                  plain_failed, streamed_failed, len(held), '\n  '.join(lines)))
        assert state.split('|')[1] == '0' and state.split('|')[0] != 'PENDING', state   # --no-requeue: ended, not requeued
