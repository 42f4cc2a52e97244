# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Replicas that follow the load (server_replicas_max; issue 26, slice 1), on the local cluster over real SSH, with the
REAL router (smg, from the wheels the router role installs) and the SGLang stand-ins, whose requests take
GLM_STANDIN_SGLANG_DECODE seconds each and count as running in their /metrics meanwhile (SGLang's own gauges,
sglang:num_running_reqs, which the autoscaler reads). One deploy of 1 replica with server_replicas_max=2, then:

- load (tests/tooling/loadgen.py on the login node: 5 requests a second of 2 s each, about 10 running): the router
  job adds replica 2 (its own sbatch, from the node the router runs on), which passes its health gate and joins;
- a deploy run again meanwhile changes nothing and leaves replica 2 alone (it is the autoscaler's);
- in steady state (two replicas, the most, still under load) the controller makes no Slurm call (sdiag's count for
  the login user over 40 s);
- the load ends: replica 2 leaves the router, drains and is cancelled; replica 1 (the deploy's) stays;
- a deploy that changes the autoscaler's settings restarts no job (the router reads its settings file again);
- no request failed; every decision and its outcome is a line of the scale log, which the status playbook shows.

Marked continuity (minutes: `make continuity`, not make test). Prints the time from the load's start to the new
replica serving, and the controller's Slurm calls by type.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

import cluster_target as target
from deploy_helpers import (REPO, SSH, RouterDeployment, chown_login, login_home, recap, run_playbook, scale_log, ssh,
                            wait_for_scale_line)

pytestmark = pytest.mark.continuity

WORK = 'glm-it-autoscale'
DOWNLOAD, SERVE = 'it-as-download', 'it-as-serve'
ROUTER = SERVE + '-router'
LOAD_SECONDS = 150


def deployment(tmp_path, **more):
    return RouterDeployment(tmp_path, WORK, DOWNLOAD, SERVE, **dict(dict(
        server_replicas=1, server_replicas_max=2, server_scale_target=3, server_scale_up_after=10,
        server_scale_down_after='20s', server_scale_cooldown=10, router_drain_timeout=30), **more))


def test_one_replica_more_under_load_and_back_to_one(tmp_path):
    sys.path.insert(0, os.path.join(REPO, 'tests', 'bench'))
    from bench_release import diff, sdiag    # pylint: disable=import-outside-toplevel
    with deployment(tmp_path) as dep:
        proc = dep.deploy(timeout=900)
        assert proc.returncode == 0, proc.stdout[-6000:]
        assert set(dep.jobs()) == {SERVE, ROUTER}, dep.jobs()                        # the deploy's one replica, and the router
        router_log = ssh('cat ~/%s/%s-*.out' % (WORK, ROUTER))
        assert 'autoscaling: 1 to 2 replicas, 3 requests per replica' in router_log, router_log[-2000:]

        started = time.monotonic()
        load = dep.load(LOAD_SECONDS)
        submitted = wait_for_scale_line(WORK, ['up: %s-2 submitted as job' % SERVE, 'above the target 3'], 60, router_name=ROUTER)[1]
        up_at = time.monotonic() - started
        joined = wait_for_scale_line(WORK, ['up: %s-2 (job' % SERVE, 'joined the router'], 150, router_name=ROUTER)[1]
        serving_at = time.monotonic() - started
        assert dep.jobs()[SERVE + '-2'][1] == 'RUNNING'
        again = dep.deploy(timeout=600)
        assert again.returncode == 0 and recap(again) == (0, 0), again.stdout[-4000:]
        assert SERVE + '-2' in dep.jobs(), 'the deploy took the autoscaler\'s replica away'

        # steady state at the most, under load: nothing to decide, no Slurm call
        users0, types0 = sdiag()
        time.sleep(40)
        users1, types1 = sdiag()
        steady = diff(users1, users0, target.LOGIN_USER)[0]
        assert steady <= 1, (steady, scale_log(WORK))

        out, err = load.communicate(timeout=LOAD_SECONDS + 120)
        summary = json.loads(out.strip().splitlines()[-1])
        ended = time.monotonic() - started
        users2, types2 = sdiag()
        left = wait_for_scale_line(WORK, ['down: %s-2 (job' % SERVE, 'leaves the router'], 120, router_name=ROUTER)[1]
        cancelled = wait_for_scale_line(WORK, ['down: %s-2 drained in' % SERVE, 'cancelled job'], 120, router_name=ROUTER)[1]
        down_at = time.monotonic() - started
        users3, types3 = sdiag()
        time.sleep(3)
        assert set(dep.jobs()) == {SERVE, ROUTER}, dep.jobs()
        assert summary['failed'] == 0 and set(summary['outcomes']) == {'200'}, (summary, err[-2000:])

        # a deploy that changes the autoscaler's settings restarts no job: the running router reads its file again
        router_id = dep.jobs()[ROUTER][0]
        tuned = dep.deploy(timeout=600, server_scale_down_after='25s')
        assert tuned.returncode == 0 and recap(tuned) == (1, 0), tuned.stdout[-4000:]
        assert dep.jobs()[ROUTER][0] == router_id and set(dep.jobs()) == {SERVE, ROUTER}, dep.jobs()
        deadline = time.monotonic() + 30
        while 'scale settings read again' not in ssh('grep -a "glm.serve" ~/%s/%s-*.out' % (WORK, ROUTER)):
            assert time.monotonic() < deadline, 'the router did not read its changed settings'
            time.sleep(2)
        status = run_playbook('status.yml', dep.variables(), str(tmp_path))
        assert status.returncode == 0 and 'autoscaling: 4 events (decisions and their outcomes); the last' in status.stdout, \
            status.stdout[-3000:]
        down_rpcs = diff(users3, users2, target.LOGIN_USER)[0]
        by_type = dict((k, diff(types3, types2, k)[0]) for k in types3)
        print('\nAUTOSCALE: 1 -> 2 -> 1 replicas under 5 requests a second of 2 s (target 3 per replica, up after 10 s, '
              'down after 20 s): replica 2 submitted %.0f s after the load began, serving at %.0f s; load ended at %.0f s, '
              'replica 2 cancelled at %.0f s; %d requests, outcomes %s, p50 %s ms p99 %s ms; Slurm calls of %s: %d in 40 s '
              'of steady state, %d from the load\'s end to the cancel (%s); scale log:\n  %s' % (
                  up_at, serving_at, ended, down_at, summary['sent'], summary['outcomes'], summary['latency_ms']['p50'],
                  summary['latency_ms']['p99'], target.LOGIN_USER, steady, down_rpcs,
                  dict((k, v) for k, v in sorted(by_type.items()) if v), '\n  '.join(scale_log(WORK))))
        assert submitted and joined and left and cancelled


SOAK_SECONDS = int(os.environ.get('GLM_AUTOSCALE_SOAK_SECONDS', '0'))
#: one cycle of the varying load: (requests a second, seconds); 2-s requests: 1/s keeps ~2 running (under the target
#: 3 with one replica, no decision), 5/s ~10 (one more replica), none (back to one)
STEPS = ((0, 60), (1, 60), (5, 120), (0, 60))


def start_rate(base, node, rate, seconds):
    """loadgen on the login node at RATE requests a second for SECONDS (no Slurm call)."""
    loadgen = os.path.join(login_home(), WORK, 'it-loadgen.py')
    shutil.copy(os.path.join(REPO, 'tests', 'tooling', 'loadgen.py'), loadgen)
    chown_login(loadgen)
    return subprocess.Popen(SSH + ['python3 %s --url %s --key-file ~/%s/api-key --rate %g --duration %d --streamed 0.25 '
                                   '--timeout 60 --allow-host %s' % (loadgen, base, WORK, rate, seconds, node)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, universal_newlines=True)


@pytest.mark.skipif(not SOAK_SECONDS, reason='GLM_AUTOSCALE_SOAK_SECONDS not set (make autoscale-soak: 1800)')
def test_the_controllers_slurm_calls_over_varying_load(tmp_path):
    """GLM_AUTOSCALE_SOAK_SECONDS of load in steps (none, low, high, none: 5 minutes a cycle) on 1 to 2 replicas: the
    login user's Slurm calls over the whole window (sdiag; nothing else of that user runs: the controller's squeue,
    sbatch and scancel, and each added replica job's own calls), per minute; every decision; no failed request."""
    sys.path.insert(0, os.path.join(REPO, 'tests', 'bench'))
    from bench_release import diff, sdiag    # pylint: disable=import-outside-toplevel
    with deployment(tmp_path, server_scale_down_after='30s') as dep:
        proc = dep.deploy(timeout=900)
        assert proc.returncode == 0, proc.stdout[-6000:]
        _endpoint, base, node = dep.target()
        users0, types0 = sdiag()
        started = time.monotonic()
        outcomes, sent = {}, 0
        while time.monotonic() - started < SOAK_SECONDS:
            for rate, seconds in STEPS:
                if not rate:
                    time.sleep(seconds)
                    continue
                dep.loads.append(start_rate(base, node, rate, seconds))
                out, err = dep.loads[-1].communicate(timeout=seconds + 120)
                summary = json.loads(out.strip().splitlines()[-1])
                sent += summary['sent']
                for k, v in summary['outcomes'].items():
                    outcomes[k] = outcomes.get(k, 0) + v
        minutes = (time.monotonic() - started) / 60.0
        users1, types1 = sdiag()
        rpcs = diff(users1, users0, target.LOGIN_USER)[0]
        by_type = dict((k, diff(types1, types0, k)[0]) for k in types1)
        log = scale_log(WORK)
        ups = [line for line in log if 'submitted as job' in line]
        downs = [line for line in log if 'cancelled job' in line]
        print('\nAUTOSCALE SOAK: %.1f minutes of load in steps %s (rate/s, seconds) on 1 to 2 replicas: %d scale-ups, %d '
              'scale-downs, %d requests, outcomes %s; Slurm calls of %s: %d, %.2f a minute; by type (all users): %s' % (
                  minutes, STEPS, len(ups), len(downs), sent, outcomes, target.LOGIN_USER, rpcs, rpcs / minutes,
                  dict((k, v) for k, v in sorted(by_type.items()) if v)))
        assert set(outcomes) == {'200'}, outcomes
        assert ups and downs, log
