# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""slurm_job and slurm_job_info against the live local cluster (see conftest.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import random
import subprocess
import time

import pytest

from conftest import CLUSTER, GATE, as_login


def job(environment=None, **args):
    task = {'name': 'slurm_job', 'glm.serve.slurm_job': args, 'ignore_errors': True}
    if environment:
        task['environment'] = environment
    return task


def info(**args):
    return {'name': 'slurm_job_info', 'glm.serve.slurm_job_info': args, 'ignore_errors': True}


SLEEPER = 'echo started; sleep %d; echo done\n'
# A job that runs until the test opens its gate (Work.open), at most a bound, so that whether it still runs, or has
# already ended, at some step of a test never depends on the machine's speed.
GATED = GATE + 'echo started; gate %s %d || exit 1; echo done\n'


def test_submit_check_mode_idempotence_and_cancel_by_name(work):
    name = work.name('idem')
    script = work.script('hold.sbatch', GATED % (work.gate('never'), 600))   # runs until the test cancels it
    args = dict(name=name, script=script)
    (pred,), unused_proc = work.play([job(**args)], check=True)
    assert pred['changed'] is True and pred['submitted'] is True and pred['job_id'] is None, pred
    assert work.squeue(name) == []                      # check mode submitted nothing

    results, proc = work.play([
        job(wait=True, **args),                          # real run
        job(**args),                                     # idempotence
        info(name=name),
    ])
    first, second, listing = results
    assert first['changed'] is True and first['state'] == 'RUNNING', first
    assert first['output_path'] == '%s/%s-%s.out' % (work.dir, name, first['job_id'])
    assert second['changed'] is False and second['job_id'] == first['job_id'], second
    assert [j['job_id'] for j in listing['jobs']] == [first['job_id']]
    assert listing['jobs'][0]['output_path'] == first['output_path']
    assert work.squeue(name) == [(first['job_id'], 'RUNNING')]

    (pred,), unused_proc = work.play([job(**args)], check=True)
    assert pred['changed'] is False and pred['job_id'] == first['job_id']

    results, unused_proc = work.play([job(name=name, state='absent', wait=True), job(name=name, state='absent')])
    gone, again = results
    assert gone['changed'] is True and gone['cancelled'] == [first['job_id']] and gone['state'] == 'CANCELLED', gone
    assert again['changed'] is False and again['cancelled'] == []
    assert work.squeue(name) == []


def test_chain_success_waits_for_the_child_to_complete(work):
    """The parent runs until the module has seen the child PENDING (Dependency): it then ends, and the wait goes on
    until the child COMPLETED (a parent that ended before the child was submitted would not test the chain)."""
    parent, child = work.name('dl'), work.name('srv')
    go = work.gate('parent')
    spy = work.spy()
    results, unused_proc = work.play([job(name=parent, script=work.script('p.sbatch', GATED % (go, 300)))])
    (first,) = results
    assert first['state'] in ('PENDING', 'RUNNING'), first

    def release_parent():
        child_id = work.wait_for(lambda: work.squeue(child), 200, 'the child submitted')[0][0]
        work.wait_for(lambda: work.seen(child_id, 'PENDING', 'Dependency'), 60, 'the module seeing the child PENDING (Dependency)')
        work.open(go)

    step = work.during(release_parent)
    results, unused_proc = work.play([
        job(name=child, script=work.script('c.sbatch', SLEEPER % 1), wait=True, wait_condition=['COMPLETED'], wait_timeout=120,
            dependency=[{'type': 'afterok', 'job_ids': [first['job_id']]}], environment=spy),
    ])
    step.join()
    (done,) = results
    assert not done.get('failed'), done
    assert done['state'] == 'COMPLETED' and done['exit_code'] == '0:0'
    assert [(j['name'], j['state']) for j in done['chain']] == [(parent, 'COMPLETED'), (child, 'COMPLETED')]
    assert any('PENDING (Dependency)' in e for e in done['events']), done['events']


def test_chain_failure_with_and_without_kill_on_invalid_dep(work):
    """The parent fails while the first child waits for it (the parent is held until the child's wait has seen it
    RUNNING: the wait takes the child just submitted as PENDING (Dependency), asks for the parent, and watches its
    log); the second child is submitted after the parent failed. Both waits end at once."""
    parent = work.name('bad')
    kill, keep = work.name('kill'), work.name('keep')
    go = work.gate('parent')
    spy = work.spy()
    bad = work.script('bad.sbatch', GATE + 'echo loading; gate %s 300 || exit 1; echo "Error: weights not found" >&2; exit 3\n' % go)
    ok = work.script('ok.sbatch', SLEEPER % 1)
    (first,), unused_proc = work.play([job(name=parent, script=bad)])
    dep = [{'type': 'afterok', 'job_ids': [first['job_id']]}]

    def fail_parent():
        work.wait_for(lambda: work.squeue(kill), 200, 'the first child submitted')
        work.wait_for(lambda: work.seen(first['job_id'], 'RUNNING'), 60, "the child's wait seeing the parent RUNNING")
        work.open(go)
        return time.monotonic()

    step = work.during(fail_parent)
    results, unused_proc = work.play([
        job(name=kill, script=ok, dependency=dep, wait=True, wait_timeout=60, environment=spy),
        job(name=keep, script=ok, dependency=dep, kill_on_invalid_dep=False, wait=True, wait_timeout=60),
    ])
    took = time.monotonic() - step.join()                        # from the parent's failure to the end of both waits
    killed, kept = results
    for result in (killed, kept):
        assert result.get('failed'), result
        assert not result.get('timed_out'), result['msg']
        assert 'can never start' in result['msg'], result['msg']
        assert '%s %s FAILED' % (parent, first['job_id']) in result['msg']
        assert 'exit code 3:0' in result['msg']
        assert 'Error: weights not found' in result['msg']       # the parent's log tail
    assert killed['state'] in ('CANCELLED', 'PENDING')
    assert kept['state'] == 'PENDING'
    assert took < 45, took                                       # failed at once, not at a timeout (60 s each)
    assert work.squeue(keep) and work.squeue(keep)[0][1] == 'PENDING'


def test_timeout_message_carries_the_last_state(work):
    name = work.name('later')
    script = work.script('s.sbatch', SLEEPER % 5)
    results, unused_proc = work.play([job(name=name, script=script, sbatch_args=['--begin=now+3600'], wait=True, wait_timeout=6)])
    (result,) = results
    assert result.get('failed') and result['timed_out'] is True
    assert 'timed out after 6s' in result['msg']
    assert '%s %s PENDING (BeginTime)' % (name, result['job_id']) in result['msg'], result['msg']
    assert result['state'] == 'PENDING'


def test_controller_restart_during_a_wait(work):
    """slurmctld is down 12 s while the module waits for a RUNNING job; the job ends only after the controller is
    back (its gate is opened then), so the wait has to carry on through the outage to see it COMPLETED."""
    name = work.name('restart')
    go = work.gate('end')
    spy = work.spy()
    script = work.script('s.sbatch', GATED % (go, 300))
    restarted = []

    def restart():
        job_id = work.wait_for(lambda: work.squeue(name), 200, 'the job submitted')[0][0]
        work.wait_for(lambda: work.seen(job_id, 'RUNNING'), 60, 'the module seeing the job RUNNING')
        proc = subprocess.run([CLUSTER, 'restart-controller', '12'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, check=False)
        assert proc.returncode == 0, proc.stdout
        restarted.append(job_id)
        work.open(go)

    step = work.during(restart)
    results, unused_proc = work.play([job(name=name, script=script, wait=True, wait_condition=['COMPLETED'], wait_timeout=150,
                                          environment=spy)])
    step.join()
    (result,) = results
    assert restarted == [result['job_id']], (restarted, result)
    assert not result.get('failed'), result
    assert result['state'] == 'COMPLETED'


def _probe_setup(work):
    """A saved container image and a model made with the hf stand-in, in a CPU job."""
    setup = work.script('setup.sbatch', (
        'set -e\n'
        'srun --container-image=docker://lmsysorg/sglang:v0.5.21 --container-save=%(d)s/sglang.sqsh true\n'
        'srun --container-image=%(d)s/sglang.sqsh --container-mounts=%(d)s hf download zai-org/GLM-5.3-Flash --local-dir %(d)s/model\n') % {'d': work.dir})
    return setup


def _serve_script(work, port):
    return work.script('serve.sbatch', (
        'export GLM_STANDIN_SGLANG_GPUS=8 GLM_STANDIN_SGLANG_LOAD=3 GLM_STANDIN_SGLANG_WARMUP=1 PYTHONUNBUFFERED=1\n'
        'export KEY=$(cat %(d)s/api-key)\n'
        'srun --container-image=%(d)s/sglang.sqsh --container-mounts=%(d)s --ntasks=1 bash -c \'exec python3 -m sglang.launch_server '
        '--model-path %(d)s/model --served-model-name glm-5.3-flash --tp-size 8 --api-key "$KEY" '
        '--host 0.0.0.0 --port %(p)d\'\n') % {'d': work.dir, 'p': port}, sbatch=('--output=%x-%j.out', '--cpus-per-task=2', '--mem=2G'))


def test_probe_against_the_sglang_standin_and_the_401_path(work):
    setup, serve = work.name('setup'), work.name('serve')
    key = 'itkey-%s' % work.id
    work.file('api-key', key + '\n', mode=0o600)
    work.file('other-key', 'not-the-key\n', mode=0o600)
    port = random.randint(31000, 39000)
    probe = {'port': port, 'key_file': '%s/api-key' % work.dir, 'model': 'glm-5.3-flash', 'timeout': 3}
    wrong = dict(probe, key_file='%s/other-key' % work.dir)
    (prep,), unused_proc = work.play([job(name=setup, script=_probe_setup(work))])
    results, proc = work.play([
        job(name=serve, script=_serve_script(work, port), wait=True, wait_timeout=120, probe=probe,
            dependency=[{'type': 'afterok', 'job_ids': [prep['job_id']]}]),
        job(name=serve, script=_serve_script(work, port), wait=True, wait_timeout=30, probe=wrong),
    ])
    ready, unauthorized = results
    assert not ready.get('failed'), ready
    assert ready['endpoint'] == 'http://%s:%d' % (ready['nodes'], port)
    assert ready['models'] == ['glm-5.3-flash'] and ready['max_model_len'] == 202752
    assert [j['name'] for j in ready['chain']] == [setup, serve]
    assert unauthorized.get('failed') and unauthorized['changed'] is False
    assert 'another key than %s/other-key' % work.dir in unauthorized['msg']
    assert key not in proc.stdout and key not in proc.stderr          # the key never leaves the host
    assert 'not-the-key' not in proc.stdout


def test_a_duplicate_from_a_lock_that_did_not_hold_is_cancelled_and_the_oldest_adopted(work):
    """What a run on another login node does when the lock is not shared there: it missed the live job (here: a
    listing made before it, given as ``lookup``, in another folder, so with another lock and no submit record),
    submits a second one, and ``duplicate_check: always`` sees both after sbatch, cancels its own, adopts the oldest."""
    name = work.name('dup')
    script = work.script('hold.sbatch', GATED % (work.gate('never'), 600))
    other = os.path.join(work.dir, 'other-login-node')
    os.mkdir(other)
    os.chown(other, work.uid, work.gid)
    (first,), unused_proc = work.play([job(name=name, script=script, chdir=work.dir)])
    assert first['submitted'] and first['job_id'], first
    stale = {'user': 'glmuser', 'names': [name], 'folder': other, 'taken_at': time.time(), 'records': {name: None}, 'jobs': []}
    (second, shared), unused_proc = work.play([
        job(name=name, script=script, chdir=other, lookup=stale, duplicate_check='always'),
        # the listing shared the usual way: a second name looked up in the same squeue, passed to the next task
        job(name=work.name('first'), script=script, chdir=other, lookup_also=[name], recreate=False),
    ])
    assert second['job_id'] == first['job_id'] and second['submitted'] is False, second
    assert len(second['cancelled']) == 1 and second['cancelled'][0] != first['job_id'], second
    assert any('submitted by another run at the same time' in w for w in second.get('warnings', [])), second
    # one job of that name: the duplicate leaves the listing once slurmctld has ended it (a moment in COMPLETING or
    # CANCELLED first: scancel does not wait, and neither does the module; seen on 26.05)
    work.wait_for(lambda: [job_id for job_id, _state in work.squeue(name)] == [first['job_id']], 30,
                  'the duplicate %s leaving the queue' % second['cancelled'][0])
    listed = shared['lookup']
    assert listed['names'] == [shared['name'], name] and [j['job_id'] for j in listed['jobs']] == [first['job_id']], listed
    (adopted,), unused_proc = work.play([job(name=name, script=script, chdir=other, lookup=listed)])
    assert adopted['job_id'] == first['job_id'] and not adopted['changed'], adopted    # from the listing, no squeue


def accounting_works():
    """sacct answers on this cluster (slurmdbd configured), and MinJobAge is short enough for a test to wait for."""
    proc = as_login(['sacct', '-n', '-X', '--starttime=now-1hours', '-o', 'JobID'])
    conf = as_login(['scontrol', 'show', 'config'])
    age = [line.split('=', 1)[1].strip() for line in conf.stdout.splitlines() if line.startswith('MinJobAge')]
    return proc.returncode == 0 and age and age[0].split()[0].isdigit() and int(age[0].split()[0]) <= 60


@pytest.mark.skipif(not accounting_works(), reason='no accounting (slurmdbd) on this cluster, or MinJobAge over 60 s')
def test_a_job_slurmctld_forgot_is_read_from_accounting(work):
    """After MinJobAge, slurmctld forgets an ended job; slurm_job_info finds it in accounting by id and by name, and
    a new submission under the name says how the last job ended, before it submits (from sacct too)."""
    name = work.name('acct')
    args = dict(name=name, script=work.script('fail.sbatch', 'echo failing; exit 3\n'))
    (first,), unused_proc = work.play([job(wait=True, wait_condition=['COMPLETED'], **args)])
    assert first.get('failed') and first.get('state') == 'FAILED', first
    job_id = first['job_id']

    def forgotten():
        return as_login(['scontrol', 'show', 'job', job_id]).returncode != 0
    work.wait_for(forgotten, 240, 'slurmctld forgetting job %s (MinJobAge)' % job_id)

    results, unused_proc = work.play([info(job_ids=[job_id]), info(name=name, details=False)])
    by_id, by_name = results
    assert by_id['missing'] == [] and by_id['accounting_calls'] == 1, by_id
    (row,) = by_id['jobs']
    assert row['source'] == 'accounting' and row['state'] == 'FAILED' and row['exit_code'] == '3:0', row
    assert row['end_time'] and row['elapsed'] and row['nodes'], row
    assert [j['job_id'] for j in by_name['jobs']] == [job_id] and by_name['jobs'][0]['source'] == 'accounting'

    (again,), proc = work.play([job(**args)])
    assert again['changed'] and again['job_id'] != job_id, again
    assert again['previous']['job_id'] == job_id and again['previous']['source'] == 'accounting', again
    assert again['previous']['why'].startswith('FAILED: it exited with code 3'), again['previous']
    assert 'the last %s job, %s, ended FAILED' % (name, job_id) in proc.stdout + proc.stderr
