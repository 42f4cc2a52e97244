# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""roles/router/files/glm_scale.py: the scaling decision over rounds (Policy), and the autoscaler's acts (Scaler) against
a fake router (its workers) and a fake Slurm that records its calls (the cluster test is tests/integration/test_autoscale.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', '..', 'roles', 'router', 'files'))
import glm_scale  # noqa: E402  pylint: disable=wrong-import-position


def rounds(policy, samples, start=0.0, step=5.0, serving=1, coming=0):
    """The decisions of successive rounds STEP s apart, each with its load."""
    return [policy.decide(start + i * step, load, serving, coming)[0] for i, load in enumerate(samples)]


def test_up_only_after_the_load_stays_above_the_target_for_up_after():
    policy = glm_scale.Policy(1, 3, target=8, up_after=60)
    # 12 rounds of 5 s above the target: the 13th sample is 60 s after the first
    assert rounds(policy, [20] * 12) == [None] * 12
    assert policy.decide(60.0, 20, 1, 0)[0] == glm_scale.UP


def test_a_sample_at_or_below_the_target_restarts_the_streak():
    policy = glm_scale.Policy(1, 3, target=8, up_after=60)
    assert rounds(policy, [20] * 6 + [8] + [20] * 12) == [None] * 19
    assert policy.decide(95.0, 20, 1, 0)[0] == glm_scale.UP      # 60 s after the streak began again at 35 s


def test_never_above_most_and_never_while_a_replica_is_coming():
    policy = glm_scale.Policy(1, 2, target=8, up_after=10)
    assert rounds(policy, [50] * 10, serving=2) == [None] * 10                  # 2 serve: the most
    policy = glm_scale.Policy(1, 3, target=8, up_after=10)
    decision, why = policy.decide(0.0, 50, 1, 1)
    assert decision is None and why == '1 replica(s) coming or leaving'
    assert rounds(policy, [50] * 3, start=5.0, coming=1) == [None] * 3
    # it serves: the need is measured again, with the 2 that serve, over a whole window
    assert rounds(policy, [50] * 2, start=20.0, serving=2) == [None, None]
    assert policy.decide(30.0, 50, 2, 0)[0] == glm_scale.UP


def test_down_after_the_load_fits_in_one_fewer_at_half_the_target_and_never_below_least():
    policy = glm_scale.Policy(1, 3, target=8, up_after=10, down_after=30)
    # 3 serve, 7 requests: 7 <= 8 * 2 * 0.5 = 8 fits in 2 at half the target
    assert rounds(policy, [7] * 6, serving=3) == [None] * 6
    decision, why = policy.decide(30.0, 7, 3, 0)
    assert decision == glm_scale.DOWN and 'would fit in 2 replicas' in why
    policy = glm_scale.Policy(2, 3, target=8, down_after=10)
    assert rounds(policy, [0] * 10, serving=2) == [None] * 10                   # 2 serve: the least


def test_hysteresis_a_load_between_half_and_the_target_keeps_the_replicas():
    policy = glm_scale.Policy(1, 3, target=8, up_after=10, down_after=10)
    assert rounds(policy, [12] * 20, serving=2) == [None] * 20                  # 6 per replica; 12 > 8 * 1 * 0.5


def test_one_decision_then_the_cooldown():
    policy = glm_scale.Policy(1, 4, target=8, up_after=10, cooldown=60)
    assert policy.decide(0.0, 40, 1, 0)[0] is None
    assert policy.decide(10.0, 40, 1, 0)[0] == glm_scale.UP
    decision, why = policy.decide(15.0, 40, 2, 0)
    assert decision is None and why.startswith('cooling down (5 s of 60')
    assert rounds(policy, [40] * 11, start=20.0, serving=2) == [None] * 10 + [glm_scale.UP]   # at 70 s


def test_nothing_before_the_deploys_replicas_serve_and_nothing_without_a_replica():
    policy = glm_scale.Policy(2, 4, target=8, up_after=10)
    assert policy.decide(0.0, 40, 1, 0) == (None, "1 of the deploy's 2 replicas serve")
    assert policy.decide(0.0, 40, 0, 0) == (None, 'no replica serves')


@pytest.mark.parametrize('least, most, target', [(-1, 2, 8), (0, 0, 8), (3, 2, 8), (1, 2, 0)])
def test_bad_bounds_are_refused(least, most, target):
    with pytest.raises(ValueError):
        glm_scale.Policy(least, most, target)


def test_a_replica_that_failed_holds_the_next_submission_doubling():
    policy = glm_scale.Policy(1, 3, target=8, up_after=0, cooldown=10)
    policy.failed(0.0, 1)
    decision, why = policy.decide(5.0, 40, 1, 0)
    assert decision is None and why.startswith('a replica failed before it served: no new one for 15 s')
    assert policy.decide(20.0, 40, 1, 0)[0] == glm_scale.UP
    policy.failed(20.0, 2)
    assert policy.hold_until == 60.0


def test_an_unknown_load_decides_nothing():
    policy = glm_scale.Policy(1, 3, target=8, up_after=0)
    assert policy.decide(0.0, None, 2, 0) == (None, 'the load is not known this round')


def test_avoiding_merges_the_own_excludes_with_the_bad_nodes():
    assert glm_scale.avoiding(['--mem=1G', '-x', 'node9', '--exclude=node8,node2'], ['node2', 'node4']) == [
        '--mem=1G', '--exclude=node2,node4,node9,node8']
    assert glm_scale.avoiding(['-xnode9'], []) == ['-xnode9']


def test_fresh_bad_nodes_keeps_those_within_the_ttl(tmp_path):
    path = tmp_path / 'bad-nodes.json'
    path.write_text(json.dumps({'node1': {'since': 1000}, 'node2': {'since': 100}, 'node3': {'cause': 'x'}}))
    assert glm_scale.fresh_bad_nodes(str(path), 500, now=1200) == ['node1']
    assert glm_scale.fresh_bad_nodes(str(tmp_path / 'none.json'), 500) == []


def test_submit_env_drops_what_the_router_jobs_allocation_set():
    env = glm_scale.submit_env({'SLURM_CPUS_PER_TASK': '2', 'SBATCH_MEM_PER_NODE': '4G', 'SRUN_CPUS_PER_TASK': '2',
                                'GLM_SUCCESSOR_OF': '7', 'PATH': '/bin', 'HOME': '/h', 'SLURMD_NODENAME': 'node3',
                                'SLURM_CONF': '/var/spool/slurmd/conf-cache/slurm.conf', 'SLURM_CONFX': '1'})
    assert env == {'PATH': '/bin', 'HOME': '/h', 'SLURMD_NODENAME': 'node3', 'SLURM_CONF': '/var/spool/slurmd/conf-cache/slurm.conf'}


class FakeSlurm(object):
    """The Slurm commands of the Scaler, recorded: live jobs by name, jobs that live, ids handed out."""

    def __init__(self):
        self.calls, self.queued, self.ended, self.next_id, self.refuse = [], {}, set(), 100, []

    def live(self, wanted):
        self.calls.append(('squeue --name', ','.join(sorted(wanted))))
        return dict((name, [j for j, c in self.queued.get(name, []) if c == comment]) for name, comment in wanted.items())

    def alive(self, job_id):
        self.calls.append(('squeue --jobs', job_id))
        return job_id not in self.ended

    def submit(self, name, comment, script, args):
        self.next_id += 1
        self.calls.append(('sbatch', name, comment, script, tuple(args)))
        return str(self.next_id), None

    def cancel(self, job_ids):
        self.calls.append(('scancel',) + tuple(job_ids))
        return self.refuse.pop(0) if self.refuse else None


class Sync(object):
    """The part of glm_router.Sync the Scaler reads: the router's workers this round, and those draining."""

    def __init__(self):
        self.current, self.draining = {}, {}


def make(tmp_path, least=1, most=3, **kw):
    work = tmp_path / 'work'
    (work / 'replicas').mkdir(parents=True)
    data = {'least': least, 'most': most, 'target': kw.pop('target', 8), 'up_after': kw.pop('up_after', 10),
            'down_after': kw.pop('down_after', 30), 'cooldown': kw.pop('cooldown', 10),
            'coming_timeout': kw.pop('coming_timeout', 3600), 'script': str(work / 'serve.sbatch'),
            'sbatch_args': ['--mem=10G'], 'bad_nodes_file': str(work / 'bad-nodes.json'), 'bad_node_ttl': 86400,
            'umask': '0077', 'log': str(work / 'scale.log'), 'service_end': str(work / 'service-end'),
            'replicas': [['s' if k == 1 else 's-%d' % k, 'glm.serve:s:replica:%d' % k] for k in range(1, most + 1)]}
    data.update(kw)
    cfg = glm_scale.Config(data, str(work / 'replicas'), str(work / 'api-key'))
    policy = glm_scale.Policy(least, most, cfg.target, cfg.up_after, cfg.down_after, cfg.cooldown)
    said = []
    return glm_scale.Scaler(cfg, policy, FakeSlurm(), said.append), work, said


def serve(work, sync, name, url, job_id, start=None):
    (work / 'replicas' / (name + '.url')).write_text('%s\n%s\n%s' % (url, job_id, '%d\n' % start if start else ''))
    sync.current[url] = {'url': url, 'is_healthy': True, 'id': name}


def test_scaler_up_after_the_window_once_then_the_new_replica_joins(tmp_path):
    scaler, work, said = make(tmp_path)
    sync = Sync()
    serve(work, sync, 's', 'http://node1:30000', '11')
    (work / 'bad-nodes.json').write_text(json.dumps({'node2': {'since': 4e9}}))
    busy = {'http://node1:30000': 20}.get
    assert [scaler.round(t, sync, busy) for t in (0.0, 5.0)] == [None, None]
    assert scaler.round(10.0, sync, busy) == glm_scale.UP
    assert scaler.slurm.calls == [('squeue --name', 's-2'), ('sbatch', 's-2', 'glm.serve:s:replica:2', str(work / 'serve.sbatch'),
                                                             ('--mem=10G', '--exclude=node2'))]
    assert 'up: s-2 submitted as job 101, avoiding node2 (20.0 requests per replica for 10 s' in said[-1]
    # coming: no second submission for the same need, and no Slurm call before a minute has passed
    assert [scaler.round(t, sync, busy) for t in (15.0, 30.0, 60.0)] == [None] * 3
    assert len(scaler.slurm.calls) == 2
    serve(work, sync, 's-2', 'http://node2:30000', '101')
    assert scaler.round(65.0, sync, {'http://node1:30000': 20, 'http://node2:30000': 0}.get) is None
    assert 's-2 (job 101) joined the router, 55 s after it was submitted' in said[-1]
    lines = (work / 'scale.log').read_text().splitlines()
    assert len(lines) == 2 and lines[0].split(' ', 2)[2].startswith('up: s-2 submitted as job 101')


def test_with_the_door_the_load_is_the_doors_not_the_replicas_gauges(tmp_path):
    """The front door's count of the teams' requests (round's LOAD) is the signal: replicas' gauges that another
    user's /health_generate flood moves (20 here) neither scale up nor keep the last replica from going to zero;
    the door's 20 scales up where the gauges say 0."""
    scaler, work, said = make(tmp_path, least=0, up_after=10, down_after=30)
    sync = Sync()
    serve(work, sync, 's', 'http://node1:30000', '11')
    flooded = {'http://node1:30000': 20}.get
    assert [scaler.round(t, sync, flooded, load=0) for t in (0.0, 10.0, 20.0)] == [None, None, None]
    assert scaler.round(31.0, sync, flooded, load=0) == glm_scale.DOWN
    assert 'no request for 31 s: the service goes to zero' in said[-1]
    scaler, work, said = make(tmp_path / 'again', up_after=10)
    serve(work, sync, 's', 'http://node1:30000', '11')
    quiet = {'http://node1:30000': 0}.get
    assert [scaler.round(t, sync, quiet, load=20) for t in (0.0, 5.0)] == [None, None]
    assert scaler.round(10.0, sync, quiet, load=20) == glm_scale.UP


def test_scaler_adopts_a_queued_job_of_the_name_instead_of_a_second(tmp_path):
    scaler, work, said = make(tmp_path, up_after=0)
    sync = Sync()
    serve(work, sync, 's', 'http://node1:30000', '11')
    scaler.slurm.queued['s-2'] = [('76', 'glm.serve:s-2:replica:1'), ('77', 'glm.serve:s:replica:2')]   # another deployment's first
    assert scaler.round(0.0, sync, lambda url: 20) == glm_scale.UP
    assert [c[0] for c in scaler.slurm.calls] == ['squeue --name'] and 'job 77 already queued' in said[-1]
    assert scaler.coming == {'s-2': ['77', 0.0, 0.0]}


def test_scaler_drops_a_coming_replica_whose_job_ended_and_holds_the_next(tmp_path):
    scaler, work, said = make(tmp_path, up_after=0, cooldown=10)
    sync = Sync()
    serve(work, sync, 's', 'http://node1:30000', '11')
    assert scaler.round(0.0, sync, lambda url: 20) == glm_scale.UP
    scaler.slurm.ended.add('101')
    assert scaler.round(59.0, sync, lambda url: 20) is None and scaler.coming
    assert scaler.round(60.0, sync, lambda url: 20) is None
    assert not scaler.coming and 's-2 (job 101) ended before it served' in said[-1] and 'no new replica for 20 s' in said[-1]
    assert scaler.round(70.0, sync, lambda url: 20) is None                    # held
    assert scaler.round(80.0, sync, lambda url: 20) == glm_scale.UP


def test_scaler_down_leaves_the_router_first_then_cancels_with_the_successor(tmp_path):
    scaler, work, said = make(tmp_path, up_after=1000, down_after=10)
    sync = Sync()
    serve(work, sync, 's', 'http://node1:30000', '11')
    serve(work, sync, 's-2', 'http://node2:30000', '12')
    serve(work, sync, 's-3', 'http://node4:30000', '13')
    (work / '.s-3-13.successor').write_text('14\n1700000000\n')

    def idle(_url):
        return 0

    assert scaler.round(0.0, sync, idle) is None
    assert scaler.round(10.0, sync, idle) == glm_scale.DOWN
    assert not (work / 'replicas' / 's-3.url').exists() and (work / 'replicas' / 's-2.url').exists()
    assert 'down: s-3 (job 13) leaves the router' in said[-1] and scaler.slurm.calls == []
    # the router still has it (Sync removes it at its next round), then it drains: no cancel before
    assert scaler.round(15.0, sync, idle) is None and scaler.slurm.calls == []
    del sync.current['http://node4:30000']
    sync.draining['http://node4:30000'] = 15.0
    assert scaler.round(20.0, sync, idle) is None and scaler.slurm.calls == []
    del sync.draining['http://node4:30000']
    assert scaler.round(25.0, sync, idle) is None
    assert scaler.slurm.calls == [('scancel', '13', '14')] and 'down: s-3 drained in 15 s; cancelled job 13 and 14' in said[-1]
    # a whole window again with the 2 that serve, then s-2; never below the deploy's replica (least 1)
    assert [scaler.round(t, sync, idle) for t in (30.0, 35.0)] == [None, glm_scale.DOWN] and 'down: s-2' in said[-1]


def test_scaler_never_takes_the_deploys_own_replicas_down(tmp_path):
    scaler, work, said = make(tmp_path, least=2, most=3, down_after=0)
    sync = Sync()
    serve(work, sync, 's', 'http://node1:30000', '11')
    serve(work, sync, 's-2', 'http://node2:30000', '12')
    assert [scaler.round(t, sync, lambda url: 0) for t in (0.0, 100.0)] == [None, None]    # 2 serve: the least
    assert not said


def test_scaler_waits_for_the_router_to_answer(tmp_path):
    scaler, work, said = make(tmp_path)
    sync = Sync()
    sync.current = None
    assert scaler.round(0.0, sync, lambda url: 20) is None and scaler.slurm.calls == []


def test_scaler_adds_nothing_once_the_teardown_wrote_the_services_end(tmp_path):
    scaler, work, said = make(tmp_path, up_after=0)
    sync = Sync()
    serve(work, sync, 's', 'http://node1:30000', '11')
    (work / 'service-end').write_text('\n')
    assert scaler.round(0.0, sync, lambda url: 20) == glm_scale.UP
    assert scaler.slurm.calls == [] and 'not submitted, the service ends (teardown' in said[-1]


def test_a_failed_cancel_is_asked_again_until_it_is_done(tmp_path):
    scaler, work, said = make(tmp_path, up_after=1000, down_after=0, cooldown=0)
    sync = Sync()
    serve(work, sync, 's', 'http://node1:30000', '11')
    serve(work, sync, 's-2', 'http://node2:30000', '12')
    assert scaler.round(0.0, sync, lambda url: 0) == glm_scale.DOWN
    del sync.current['http://node2:30000']
    scaler.slurm.refuse = ['Unable to contact slurm controller', 'Unable to contact slurm controller']
    assert [scaler.round(t, sync, lambda url: 0) for t in (5.0, 10.0, 15.0)] == [None] * 3
    assert scaler.slurm.calls == [('scancel', '12')] * 3 and not scaler.leaving
    assert 'not cancelled yet (Unable to contact slurm controller)' in said[-2] and 'cancelled job 12' in said[-1]


def test_a_replica_older_than_its_script_or_the_key_leaves_and_ends(tmp_path):
    scaler, work, said = make(tmp_path, up_after=1000, down_after=1000)
    sync = Sync()
    (work / 'serve.sbatch').write_text('#!/bin/bash\n')
    (work / 'api-key').write_text('k\n')
    changed = os.stat(str(work / 'api-key')).st_mtime
    serve(work, sync, 's', 'http://node1:30000', '11', start=int(changed) - 100)        # the deploy's: it rolls it
    serve(work, sync, 's-2', 'http://node2:30000', '12', start=int(changed) - 100)
    serve(work, sync, 's-3', 'http://node4:30000', '13', start=int(changed) + 1)
    assert scaler.round(0.0, sync, lambda url: 0) is None
    assert not (work / 'replicas' / 's-2.url').exists() and (work / 'replicas' / 's-3.url').exists()
    assert (work / 'replicas' / 's.url').exists() and list(scaler.leaving) == ['s-2']
    assert 'down: s-2 (job 12) leaves the router, then ends (it started before its script or the key last changed' in said[-1]


def test_a_coming_replica_that_does_not_serve_in_time_is_cancelled(tmp_path):
    scaler, work, said = make(tmp_path, up_after=0, cooldown=10, coming_timeout=300)
    sync = Sync()
    serve(work, sync, 's', 'http://node1:30000', '11')
    assert scaler.round(0.0, sync, lambda url: 20) == glm_scale.UP
    assert scaler.round(300.0, sync, lambda url: 20) is None
    assert scaler.slurm.calls[-1] == ('scancel', '101') and not scaler.coming
    assert 's-2 (job 101) did not serve within 300 s: cancelled; no new replica for 20 s' in said[-1]


def test_a_new_router_cancels_what_the_last_one_took_out_and_left(tmp_path):
    scaler, work, said = make(tmp_path)
    sync = Sync()
    serve(work, sync, 's', 'http://node1:30000', '11')
    (work / 'scale.log').write_text(
        '1 t down: s-3 (job 13) leaves the router, then ends (x)\n1 t down: s-3 drained in 6 s; cancelled job 13\n'
        '2 t down: s-2 (job 12) leaves the router, then ends (x)\n')
    (work / '.s-2-12.successor').write_text('15\n')
    scaler.round(0.0, sync, lambda url: 0)
    assert scaler.slurm.calls == [('scancel', '12', '15')]
    assert 'down: s-2 drained (it left the router under an earlier router job); cancelled job 12 and 15' in said[-1]
    scaler.round(5.0, sync, lambda url: 0)
    assert scaler.slurm.calls == [('scancel', '12', '15')]                     # once


def test_the_settings_are_read_again_when_their_file_changes(tmp_path):
    scaler, work, said = make(tmp_path)
    path = work / 'scale.json'
    data = {k: getattr(scaler.cfg, k) for k in glm_scale.Config.FIELDS}
    data.update(most=2, target=5, replicas=[['s', 'c1'], ['s-2', 'c2']])
    path.write_text(json.dumps(data))
    scaler.path = str(path)
    scaler.refresh()
    assert (scaler.policy.most, scaler.policy.target, scaler.plan) == (2, 5.0, [('s', 'c1'), ('s-2', 'c2')])
    path.write_text('{"most": ')                                               # a broken file keeps the last settings
    os.utime(str(path), (1, 1))
    scaler.refresh()
    assert scaler.policy.most == 2 and 'scale settings read again: 1 to 2 replicas' in said[-1]


def test_a_replica_whose_file_is_there_but_not_healthy_yet_is_still_coming(tmp_path):
    scaler, work, said = make(tmp_path, up_after=0, cooldown=0)
    sync = Sync()
    serve(work, sync, 's', 'http://node1:30000', '11')
    assert scaler.round(0.0, sync, lambda url: 50) == glm_scale.UP
    (work / 'replicas' / 's-2.url').write_text('http://node2:30000\n101\n')  # the router has not taken it yet
    assert [scaler.round(t, sync, lambda url: 50) for t in (5.0, 60.0)] == [None, None]
    assert [c[0] for c in scaler.slurm.calls] == ['squeue --name', 'sbatch'] and 'joined the router' in said[-1]
    # a file left by a replica whose node died holds no decision past the grace
    assert scaler.round(126.0, sync, lambda url: 50) == glm_scale.UP and 's-3' in said[-1]


def test_at_zero_a_waiting_request_starts_the_first_replica_at_once():
    policy = glm_scale.Policy(0, 2, target=8, up_after=60, down_after=900, cooldown=120)
    assert policy.decide(0.0, None, 0, 0) == (None, 'no replica serves, and no request waits (scaled to zero)')
    decision, why = policy.decide(5.0, None, 0, 0, waiting=1)
    assert decision == glm_scale.UP and why == '1 request(s) came while no replica serves (scaled to zero)'
    # one decision for the need: the replica coming holds the next, however many wait
    assert policy.decide(10.0, None, 0, 1, waiting=30)[0] is None
    assert policy.decide(10.0, None, 0, 0, waiting=30)[0] is None        # and the cool-down after the decision
    assert policy.decide(125.0, None, 0, 0, waiting=30)[0] == glm_scale.UP


def test_from_one_to_zero_only_after_no_request_at_all_for_down_after():
    policy = glm_scale.Policy(0, 2, target=8, up_after=10, down_after=30, cooldown=0)
    # one request running: it fits in 0 replicas at half the target? no: only an idle service goes to zero
    assert rounds(policy, [1] * 10) == [None] * 10
    assert rounds(policy, [0] * 6, start=100.0) == [None] * 6              # 25 s idle
    assert policy.decide(130.0, 0, 1, 0) == (glm_scale.DOWN, 'no request for 30 s: the service goes to zero')
    # a request held by the hold counts: not idle
    policy = glm_scale.Policy(0, 2, target=8, up_after=10, down_after=30, cooldown=0)
    assert [policy.decide(t, 0, 1, 0, waiting=1)[0] for t in (0.0, 40.0)] == [None, None]


def test_a_least_of_one_never_goes_to_zero():
    policy = glm_scale.Policy(1, 2, target=8, up_after=10, down_after=30, cooldown=0)
    assert rounds(policy, [0] * 20) == [None] * 20


def test_a_replica_added_while_the_download_is_live_waits_for_it_found_in_the_same_squeue(tmp_path):
    scaler, work, said = make(tmp_path, least=0, most=2, download=['s-download', 'glm.serve:s:download'])
    scaler.slurm.queued['s-download'] = [('70', 'glm.serve:other:download'), ('77', 'glm.serve:s:download')]
    assert scaler.round(0.0, Sync(), lambda url: 0, waiting=1) == glm_scale.UP
    assert scaler.slurm.calls == [('squeue --name', 's,s-download'),
                                  ('sbatch', 's', 'glm.serve:s:replica:1', str(work / 'serve.sbatch'),
                                   ('--mem=10G', '--dependency=afterok:77'))]
    assert 'up: s submitted as job 101, after the download (job 77) (1 request(s) came' in said[-1]


def test_slurms_live_reads_one_squeue_of_several_names():
    calls = []

    class Proc(object):
        returncode, stderr = 0, ''
        stdout = ('77|RUNNING|s-download|glm.serve:s:download\n78|PENDING|s|glm.serve:other:replica:1\n'
                  '79|PENDING|s|glm.serve:s:replica:1\n80|COMPLETED|s|glm.serve:s:replica:1\n')

    def run(argv, **_kw):
        calls.append(argv)
        return Proc()
    slurm = glm_scale.Slurm('/w', run=run, environ={})
    assert slurm.live({'s': 'glm.serve:s:replica:1', 's-download': 'glm.serve:s:download'}) == {
        's': ['79'], 's-download': ['77']}
    assert calls == [['squeue', '--noheader', '--me', '--name=s,s-download', '--sort=i', '--format=%i|%T|%j|%k']]


def test_scaler_from_zero_to_one_on_a_waiting_request_and_back_to_zero_when_idle(tmp_path):
    scaler, work, said = make(tmp_path, least=0, most=2, up_after=10, down_after=30, cooldown=10, hold=300)
    sync = Sync()
    assert scaler.round(0.0, sync, lambda url: 0) is None and not scaler.slurm.calls       # idle at zero: nothing
    assert scaler.round(5.0, sync, lambda url: 0, waiting=2) == glm_scale.UP
    assert scaler.slurm.calls == [('squeue --name', 's'), ('sbatch', 's', 'glm.serve:s:replica:1', str(work / 'serve.sbatch'),
                                                           ('--mem=10G',))]
    assert 'up: s submitted as job 101 (2 request(s) came while no replica serves (scaled to zero))' in said[-1]
    assert scaler.round(10.0, sync, lambda url: 0, waiting=2) is None                      # coming: no second one
    serve(work, sync, 's', 'http://node1:30000', '101')
    busy = {'http://node1:30000': 0}.get
    assert scaler.round(60.0, sync, busy) is None and 's (job 101) joined the router' in said[-1]
    assert [scaler.round(t, sync, busy) for t in (65.0, 80.0)] == [None, None]
    assert scaler.round(95.0, sync, busy) == glm_scale.DOWN
    assert 'down: s (job 101) leaves the router, then ends (no request for 35 s: the service goes to zero)' in said[-1]
    del sync.current['http://node1:30000']                  # the router let it go, drained
    assert scaler.round(100.0, sync, busy) is None
    assert said[-2] == 'scale down: s drained in 5 s; cancelled job 101'
    assert said[-1] == 'scale zero: no replica serves; the next request starts one (it waits at most 300 s)'
    assert (work / 'scale.log').read_text().splitlines()[-1].split(' ', 2)[2].startswith('zero: no replica serves')
    assert scaler.slurm.calls[-1] == ('scancel', '101')


def test_at_zero_a_replica_whose_file_is_there_but_not_healthy_yet_counts_as_coming(tmp_path):
    # a router restarted with a replica running (its file there, the new gateway not listing it yet): no second one
    scaler, work, _said = make(tmp_path, least=0, most=2, cooldown=0)
    sync = Sync()
    (work / 'replicas' / 's.url').write_text('http://node1:30000\n11\n')
    assert scaler.round(0.0, sync, lambda url: 0, waiting=3) is None
    assert not scaler.slurm.calls


def test_a_file_left_by_a_replica_whose_job_ended_frees_its_name_when_one_is_needed(tmp_path):
    scaler, work, said = make(tmp_path, least=0, most=1, cooldown=0)
    sync = Sync()
    (work / 'replicas' / 's.url').write_text('http://node1:30000\n11\n')   # its node died with the file there
    assert scaler.round(0.0, sync, lambda url: None, waiting=1) is None       # joining for JOIN_GRACE s
    scaler.slurm.ended.add('11')
    assert scaler.round(glm_scale.JOIN_GRACE, sync, lambda url: None, waiting=1) == glm_scale.UP
    assert ('squeue --jobs', '11') in scaler.slurm.calls and scaler.slurm.calls[-1][:2] == ('sbatch', 's')
    assert not (work / 'replicas' / 's.url').exists()
    assert any('has ended with its address file left' in line for line in said)


def test_back_from_zero_pays_no_cool_down_and_down_to_zero_waits_for_no_traffic(tmp_path):
    policy = glm_scale.Policy(0, 2, target=8, up_after=10, down_after=30, cooldown=120)
    assert [policy.decide(t, 0, 1, 0, active=True)[0] for t in (0.0, 20.0, 40.0)] == [None] * 3   # short requests seen
    assert policy.decide(45.0, 0, 1, 0)[0] is None
    assert policy.decide(75.0, 0, 1, 0)[0] == glm_scale.DOWN
    assert policy.decide(80.0, None, 0, 0, waiting=1)[0] == glm_scale.UP          # 5 s after, no cool-down
    assert policy.decide(85.0, None, 0, 0, waiting=1)[0] is None                  # but after an UP, the cool-down


def test_a_first_replica_that_fails_brings_the_zero_line_back(tmp_path):
    scaler, _work, said = make(tmp_path, least=0, most=1, cooldown=1, hold=60)
    sync = Sync()
    assert scaler.round(0.0, sync, lambda url: 0, waiting=1) == glm_scale.UP
    zero_lines = [line for line in said if line.startswith('scale zero:')]
    assert len(zero_lines) == 0                                               # coming: not at zero
    scaler.slurm.ended.add('101')
    scaler.round(61.0, sync, lambda url: 0)
    assert said[-2].startswith('scale up: s (job 101) ended before it served')
    assert said[-1] == 'scale zero: no replica serves; the next request starts one (it waits at most 60 s)'


def test_stale_replicas_leave_one_at_a_time_and_not_the_last_one_serving_under_load(tmp_path):
    scaler, work, said = make(tmp_path, least=0, most=2, cooldown=0, down_after=3600)
    sync = Sync()
    serve(work, sync, 's', 'http://node1:30000', '11', start=1000)
    serve(work, sync, 's-2', 'http://node2:30000', '12', start=1000)
    (work / 'serve.sbatch').write_text('#!/bin/sh\n')                     # changed after they started
    busy = {'http://node1:30000': 3, 'http://node2:30000': 3}.get
    scaler.round(0.0, sync, busy)
    assert list(scaler.leaving) == ['s']                                      # one, the other serves on
    del sync.current['http://node1:30000']
    scaler.round(5.0, sync, busy)                                             # s drained and cancelled
    scaler.round(10.0, sync, busy)
    assert 's-2' not in scaler.leaving                                        # the last one serving, under load
    scaler.round(15.0, sync, lambda url: 0)
    assert 's-2' in scaler.leaving                                            # idle: it leaves (least 0)
    assert sum('started before its script or the key last changed' in line for line in said) == 2


def test_replicas_above_the_bursts_from_go_to_the_preemptible_partition(tmp_path):
    """server_burst_partition/qos: the replicas numbered above the burst's from get its sbatch arguments (after the
    deploy's) and --no-requeue (a preempted one ends: the controller decides when another comes), those below not;
    no burst settings (an earlier release's file), none."""
    scaler, work, said = make(tmp_path, least=1, most=3, up_after=0, cooldown=0,
                              burst={'args': ['--partition=gpu-burst', '--qos=scavenger'], 'from': 2, 'hold': 600})
    sync = Sync()
    serve(work, sync, 's', 'http://node1:30000', '11')
    assert scaler.round(0.0, sync, lambda url: 20) == glm_scale.UP
    assert scaler.slurm.calls[-1][-1] == ('--mem=10G',)                     # s-2: not above from=2
    serve(work, sync, 's-2', 'http://node2:30000', '101')
    assert scaler.round(1.0, sync, lambda url: 20) == glm_scale.UP
    assert scaler.slurm.calls[-1][1] == 's-3'
    assert scaler.slurm.calls[-1][-1] == ('--mem=10G', '--partition=gpu-burst', '--qos=scavenger', '--no-requeue')
    assert 'up: s-3 submitted as job 102 to burst (--partition=gpu-burst --qos=scavenger --no-requeue)' in said[-1]
    plain, _work, _said = make(tmp_path / 'plain')
    assert plain.cfg.burst == {} and plain.burst_args('s-3') == []


def preempt(work, sync, name, url, job_id, successor=None):
    """What serve.sbatch does at a preemption's USR1: .NAME-JOB.preempted, then the replica leaves the router."""
    (work / ('.%s-%s.preempted' % (name, job_id))).write_text('')
    if successor:
        (work / ('.%s-%s.successor' % (name, job_id))).write_text('%s\n1700000000\n' % successor)
    (work / 'replicas' / (name + '.url')).unlink()
    del sync.current[url]


def burst_scaler(tmp_path, least=1):
    scaler, work, said = make(tmp_path, least=least, most=2, up_after=0, cooldown=0,
                              burst={'args': ['--partition=gpu-burst'], 'from': least, 'hold': 300})
    return scaler, work, said, Sync()


def test_a_preempted_burst_replica_holds_the_next_burst_and_its_successor_is_cancelled(tmp_path):
    """The controller reads the preemption's file when the replica's address file goes (no Slurm call), says so,
    cancels the successor that replica submitted, and submits no burst replica for the hold while another serves,
    however high the load; after it, it does again. No squeue for a requeue: the burst job may not be requeued."""
    scaler, work, said, sync = burst_scaler(tmp_path)
    serve(work, sync, 's', 'http://node1:30000', '11')
    serve(work, sync, 's-2', 'http://node2:30000', '12')
    assert scaler.round(0.0, sync, lambda url: 2) is None
    preempt(work, sync, 's-2', 'http://node2:30000', '12', successor='13')
    assert scaler.round(5.0, sync, lambda url: 20) == glm_scale.UP            # at once: held, not submitted
    assert 'up: s-2 not submitted, a burst replica was preempted: none before' in said[-1]
    line = [l for l in said if l.startswith('scale preempted:')][0]
    assert line.startswith('scale preempted: s-2 (job 12) was preempted by Slurm and left the router, draining its '
                           'requests; no other burst replica before ') and 'its successor job 13 cancelled' in line
    assert scaler.slurm.calls == [('scancel', '13')] and not (work / '.s-2-12.preempted').exists()
    assert scaler.round(100.0, sync, lambda url: 20) == glm_scale.UP and scaler.slurm.calls == [('scancel', '13')]
    assert scaler.round(306.0, sync, lambda url: 20) == glm_scale.UP
    assert scaler.slurm.calls[-1][0] == 'sbatch' and scaler.slurm.calls[-1][-1] == ('--mem=10G', '--partition=gpu-burst', '--no-requeue')


def test_a_replica_that_left_without_a_preemption_or_with_another_jobs_file_holds_nothing(tmp_path):
    """A replica that left for any other reason (a crash, a scale-down elsewhere), or a preemption file of another job
    of that name (one preempted while it loaded, before it served): no hold."""
    scaler, work, said, sync = burst_scaler(tmp_path)
    serve(work, sync, 's', 'http://node1:30000', '11')
    serve(work, sync, 's-2', 'http://node2:30000', '12')
    assert scaler.round(0.0, sync, lambda url: 2) is None
    (work / '.s-2-9.preempted').write_text('')
    (work / 'replicas' / 's-2.url').unlink()
    del sync.current['http://node2:30000']
    assert scaler.round(5.0, sync, lambda url: 20) == glm_scale.UP and scaler.slurm.calls[-1][0] == 'sbatch'
    assert not [l for l in said if 'preempted' in l] and (work / '.s-2-9.preempted').exists()


def test_a_wake_from_zero_is_never_held_by_a_preemption(tmp_path):
    """Scale to zero with bursting (from 0: every replica bursts): after the only replica was preempted, the next
    request's wake submits one at once (a hold there would leave it waiting for the whole bound, then 503)."""
    scaler, work, said, sync = burst_scaler(tmp_path, least=0)
    serve(work, sync, 's', 'http://node1:30000', '11')
    assert scaler.round(0.0, sync, lambda url: 2) is None
    preempt(work, sync, 's', 'http://node1:30000', '11')
    assert scaler.round(5.0, sync, lambda url: 0, waiting=1) == glm_scale.UP
    assert scaler.slurm.calls[-1][0] == 'sbatch' and scaler.slurm.calls[-1][-1] == ('--mem=10G', '--partition=gpu-burst', '--no-requeue')


def test_a_new_launcher_keeps_the_hold_of_a_preemption_the_last_one_recorded(tmp_path):
    """recover: a 'preempted:' line of the scale log within the hold (a launcher started again, a router handover):
    the hold goes on; an older one does not."""
    import time as clock
    scaler, work, said, sync = burst_scaler(tmp_path)
    (work / 'scale.log').write_text('%d 2026-12-06T04:00:00 preempted: s-2 (job 12) was preempted by Slurm\n' % (clock.time() - 100))
    serve(work, sync, 's', 'http://node1:30000', '11')
    assert scaler.round(1000.0, sync, lambda url: 20) == glm_scale.UP and 'not submitted' in said[-1]
    assert 1195 < scaler.burst_until < 1205                                     # 300 - 100 s left
    other, work2, said2, sync2 = burst_scaler(tmp_path / 'old')
    (work2 / 'scale.log').write_text('%d 2026-12-06T04:00:00 preempted: s-2 (job 12) was preempted\n' % (clock.time() - 400))
    serve(work2, sync2, 's', 'http://node1:30000', '11')
    assert other.round(1000.0, sync2, lambda url: 20) == glm_scale.UP and other.slurm.calls[-1][0] == 'sbatch'
