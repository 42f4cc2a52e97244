# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A change of the server's settings behind the router, rolled out under load, on the LIVE local cluster
(tests/tooling/cluster) over real SSH as the login user, with SGLang's real router (smg) from its wheel.

Two replicas in partition gpu-all (the local cluster's three GPU nodes: the two replicas and one node free for the
new job of the replica being rolled), the router on node3.

- a change of serve.sbatch (a server_env value, as an image tag or a flag would be): replica by replica, the deploy
  submits the new job beside the old one (slurm_job's change_strategy=start_first), waits for it, waits until the
  router lists its address as healthy, then sends the old job USR1 (playbooks/tasks/replica_handover.yml): the old
  one drains (its log says a change took its place) and ends COMPLETED, and its node is the next new job's. 5
  requests a second through the router, a quarter streamed, meanwhile: none fails, the URL is the same, and the
  router's workers file, read every 2 s during the roll, never lists fewer than 2 healthy workers;
- a change whose new job fails (the stand-in's CUDA out of memory at start): the deploy fails with the cause and
  says the roll-out stopped at replica 1; both replicas' jobs are those of before and still answer (the load sees
  no failure);
- the settings of the first change again: the deploy writes serve.sbatch back (the failed change had written its
  own) and submits nothing; once more, it changes nothing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
import threading
import time

from deploy_helpers import RouterDeployment, live_jobs, recap, ssh

WORK, DOWNLOAD, SERVE = 'glm-it-rolling', 'it-rl-download', 'it-rl-serve'
REPLICAS = [SERVE, SERVE + '-2']
#: the steady load at most (it is stopped once the deploys are done): the four deploys (52 s for the roll) fit in it
LOAD_SECONDS = 150


#: the stand-in SGLang: 3 s of loading, 1 s of warm-up (answers at once)
ENV = {'GLM_STANDIN_SGLANG_LOAD': '3', 'GLM_STANDIN_SGLANG_WARMUP': '1'}


def env(**more):
    """server_env: the stand-in's with MORE (a change of serve.sbatch, as an image tag or a flag would be)."""
    return dict(ENV, **more)


def serving():
    """{replica name: [its live job ids]}"""
    found = dict((name, []) for name in REPLICAS)
    for row in live_jobs(lambda n: n in REPLICAS):
        if row[2] in ('RUNNING', 'PENDING'):
            found[row[1]].append(row[0])
    return found


def healthy_workers():
    text = ssh('cat ~/%s/router-workers.json' % WORK, check=False)
    try:
        return len([w for w in json.loads(text)['workers'] if w.get('healthy')])
    except ValueError:
        return -1


class Sampler(threading.Thread):
    """The router's healthy workers, every 2 s, until stopped."""

    def __init__(self):
        super(Sampler, self).__init__(daemon=True)
        self.counts, self.done = [], threading.Event()

    def run(self):
        while not self.done.is_set():
            self.counts.append(healthy_workers())
            self.done.wait(2)


def job_state(job_id):
    out = ssh('sacct -X -n -P -j %s -o State' % job_id).split()
    return out[0] if out else ''


def deployment(tmp_path):
    return RouterDeployment(tmp_path, WORK, DOWNLOAD, SERVE, server_replicas=2, server_partition='gpu-all',
                            server_time='00:20:00', server_drain_before=30, server_env=env(), router_time='00:30:00',
                            server_wait_timeout=240)


def test_a_change_rolls_out_under_load_and_a_failing_one_stops_with_the_old_job_serving(tmp_path):
    with deployment(tmp_path) as dep:
        proc = dep.deploy(timeout=900)
        assert proc.returncode == 0, proc.stdout[-6000:]
        old = serving()
        assert all(len(ids) == 1 for ids in old.values()), old
        endpoint = dep.target()[0]
        load = dep.load(LOAD_SECONDS)
        time.sleep(5)

        # the change, rolled: replica by replica, the new job beside the old one, the old one drained once the router
        # has the new one
        sampler = Sampler()
        sampler.start()
        started = time.monotonic()
        proc = dep.deploy(timeout=600, server_env=env(GLM_STANDIN_SGLANG_WARMUP='2'))
        rolled_in = time.monotonic() - started
        sampler.done.set()
        sampler.join()
        assert proc.returncode == 0, proc.stdout[-6000:]
        assert proc.stdout.count("End the replica's old jobs, which drain first") == 2, proc.stdout[-4000:]
        # each replica's new job, its old one draining (USR1: out of the router, its requests finished) then gone
        new = dict((name, [i for i in ids if i not in old[name]]) for name, ids in serving().items())
        assert all(len(ids) == 1 for ids in new.values()), (old, new)
        for name in REPLICAS:
            (was,), (now,) = old[name], new[name]
            deadline = time.monotonic() + 90
            while job_state(was) in ('RUNNING', 'COMPLETING') and time.monotonic() < deadline:
                time.sleep(3)
            assert job_state(was) == 'COMPLETED', (name, job_state(was))
            log = ssh('cat ~/%s/%s-%s.out' % (WORK, name, was))
            assert "job %s took the replica's place (a change rolled out by the deploy): left the router" % now in log, log[-3000:]
            assert 'SGLang stopped' in log, log[-3000:]
        assert min(sampler.counts) >= 2, sampler.counts
        assert serving() == new

        # a change whose new job fails: the roll-out stops at replica 1, the jobs before serve on
        proc = dep.deploy(timeout=600, server_env=env(GLM_STANDIN_SGLANG_WARMUP='2', GLM_STANDIN_SGLANG_FAIL='oom'))
        assert proc.returncode != 0, proc.stdout[-6000:]
        assert 'The rolling change stopped at %s: its new job' % SERVE in proc.stdout, proc.stdout[-6000:]
        assert 'out of memory' in proc.stdout and 'Its old job(s) %s serve on' % new[SERVE][0] in proc.stdout, proc.stdout[-6000:]
        assert serving() == new

        # the first change's settings again: serve.sbatch written back (the failed change had written its own), nothing
        # submitted; once more: nothing changed at all
        proc = dep.deploy(timeout=600, server_env=env(GLM_STANDIN_SGLANG_WARMUP='2'))
        changed = re.findall(r'(?m)^TASK \[([^\]]+)\][^\n]*\n(?:(?!TASK \[).*\n)*?changed: .*$', proc.stdout)
        assert proc.returncode == 0 and recap(proc)[0] == 1, proc.stdout[-4000:]
        assert changed == ['glm.serve.server : Submit the server job and wait for it to answer'], changed
        assert serving() == new
        proc = dep.deploy(timeout=600, server_env=env(GLM_STANDIN_SGLANG_WARMUP='2'))
        assert proc.returncode == 0 and recap(proc)[0] == 0, proc.stdout[-4000:]
        assert serving() == new

        dep.stop_loads()                    # the deploys are done: the load need not run out its time
        out, err = load.communicate(timeout=LOAD_SECONDS + 120)
        summary = json.loads(out.strip().splitlines()[-1])
        assert summary['failed'] == 0 and set(summary['outcomes']) == {'200'}, (summary, err[-2000:])
        assert ssh('cat ~/%s/endpoint' % WORK) == endpoint
        print('\nROLLING: two replicas behind the router, a change rolled out in %.0f s (jobs %s -> %s, the old ones '
              'COMPLETED after their drain; healthy workers during the roll: min %d of %d samples), a failing change '
              'stopped with the jobs before serving; %d requests, outcomes %s (streamed %s), p50 %s ms p99 %s ms, the URL '
              'unchanged' % (rolled_in, old, new, min(sampler.counts), len(sampler.counts), summary['sent'],
                             summary['outcomes'], summary['streamed'], summary['latency_ms']['p50'],
                             summary['latency_ms']['p99']))
