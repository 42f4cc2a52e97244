# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""slurm_job and slurm_job_info with run_command mocked: the exact command lines they run."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import json
import os
import time

import pytest

from ansible.module_utils import basic
from ansible.module_utils.common.text.converters import to_bytes

from ansible_collections.glm.serve.plugins.modules import slurm_job, slurm_job_info
from ansible_collections.glm.serve.plugins.module_utils import model_probe as mp
from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp

FIXTURES = os.path.join(os.path.dirname(__file__), '..', 'module_utils', 'fixtures')
FMT = sp.squeue_format()


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


class ExitJson(Exception):
    pass


class FailJson(Exception):
    pass


def set_module_args(args):
    try:
        from ansible.module_utils.testing import patch_module_args  # ansible-core >= 2.19
    except ImportError:
        patch_module_args = None
    if patch_module_args is not None:
        return patch_module_args(args)
    basic._ANSIBLE_ARGS = to_bytes(json.dumps({'ANSIBLE_MODULE_ARGS': args}))

    class _Null:
        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False
    return _Null()


def squeue_row(job_id, state, name='glm-serve', reason='None', nodes='', user='glmuser', dependency='(null)'):
    return sp.SEP.join([job_id, state, reason, nodes, user, 'compute-h100', '0:05', '8:00:00', 'N/A', dependency,
                        '/home/glmuser/glm', name]) + '\n'


def scontrol(job_id, state, name='glm-serve', reason='None', nodes='(null)', end='Unknown'):
    return ('JobId=%s JobName=%s\n   UserId=glmuser(1001) GroupId=glmuser(1001) MCS_label=N/A\n'
            '   JobState=%s Reason=%s Dependency=(null)\n   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0\n'
            '   RunTime=00:00:05 TimeLimit=08:00:00 TimeMin=N/A\n   StartTime=Unknown EndTime=%s Deadline=N/A\n'
            '   Partition=compute-h100 AllocNode:Sid=localhost:1\n   NodeList=%s\n'
            '   WorkDir=/home/glmuser/glm\n   StdOut=/home/glmuser/glm/%s-%s.out\n\n') % (
                job_id, name, state, reason, end, nodes, name, job_id)


class Slurm:
    """Answers run_command from a list of (argv prefix, (rc, out, err)); records every call."""

    def __init__(self, version='slurm-wlm 22.05.8\n'):
        self.calls = []
        # a site without accounting unless a test says otherwise (sacct's own message and rc)
        self.rules = [(['/usr/bin/squeue', '--version'], (0, version, '')),
                      (['/usr/bin/sacct'], (1, '', 'Slurm accounting storage is disabled\n'))]

    def on(self, argv, rc=0, out='', err=''):
        self.rules.insert(0, (argv, (rc, out, err)))
        return self

    def __call__(self, argv, **kwargs):
        self.calls.append((list(argv), kwargs))
        for prefix, answer in self.rules:
            if list(argv[:len(prefix)]) == prefix:
                return answer
        raise AssertionError('unexpected command %r' % (argv,))

    def argvs(self, binary=None):
        return [a for a, _k in self.calls if binary is None or a[0].endswith('/' + binary)]


@pytest.fixture
def run(monkeypatch, tmp_path):
    warnings = []

    def exit_json(module, **kwargs):
        raise ExitJson(dict(kwargs, warnings=list(warnings)) if warnings else kwargs)

    def fail_json(module, **kwargs):
        raise FailJson(kwargs)

    monkeypatch.setattr(basic.AnsibleModule, 'warn', lambda module, msg: warnings.append(msg))

    monkeypatch.setattr(basic.AnsibleModule, 'exit_json', exit_json)
    monkeypatch.setattr(basic.AnsibleModule, 'fail_json', fail_json)
    monkeypatch.setattr(basic.AnsibleModule, 'get_bin_path', lambda self, name, required=False, opt_dirs=None: '/usr/bin/' + name)
    monkeypatch.setattr('ansible_collections.glm.serve.plugins.module_utils.job_actions.current_user', lambda: 'glmuser')
    script = tmp_path / 'serve.sbatch'
    script.write_text(u'#!/bin/bash\necho hi\n')

    def runner(module, args, slurm, check_mode=False):
        monkeypatch.setattr(basic.AnsibleModule, 'run_command', lambda mod, argv, **kw: slurm(argv, **kw))
        if check_mode:
            args = dict(args, _ansible_check_mode=True)
        with set_module_args(args):
            with pytest.raises((ExitJson, FailJson)) as exc:
                module.main()
        return exc.type is ExitJson, exc.value.args[0]

    runner.script = str(script)
    runner.dir = str(tmp_path)
    return runner


def squeue_answers(slurm, answers):
    """A run_command that answers squeue --local from answers (popped in order, each call recorded) and the rest
    from slurm."""
    def call(argv, **kwargs):
        if argv[:2] == ['/usr/bin/squeue', '--local']:
            slurm.calls.append((list(argv), kwargs))
            return answers.pop(0)
        return slurm(argv, **kwargs)
    return call


LOOKUP = ['/usr/bin/squeue', '--local', '-h', '-n', 'glm-serve', '-u', 'glmuser', '-o', FMT]


def test_submit_exact_argv_with_dependency_umask_and_chdir(run):
    slurm = Slurm().on(LOOKUP).on(['/usr/bin/sbatch'], out='4124\n').on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4124'], out=scontrol('4124', 'PENDING', reason='Dependency'))
    ok, result = run(slurm_job, {
        'name': 'glm-serve', 'script': run.script,
        'dependency': [{'type': 'afterok', 'job_ids': ['4123']}, {'type': 'singleton'}],
        'sbatch_args': ['--time=08:00:00', '--partition=compute-h200'],
    }, slurm)
    assert ok, result
    (sbatch, kwargs), = [(a, k) for a, k in slurm.calls if a[0] == '/usr/bin/sbatch']
    assert sbatch == ['/usr/bin/sbatch', '--parsable', '--job-name=glm-serve', '--dependency=afterok:4123,singleton',
                      '--kill-on-invalid-dep=yes', '--time=08:00:00', '--partition=compute-h200', run.script]
    assert kwargs['cwd'] == run.dir
    assert kwargs['umask'] == 0o077
    assert result['changed'] is True and result['submitted'] is True
    assert result['job_id'] == '4124' and result['state'] == 'PENDING' and result['reason'] == 'Dependency'
    assert result['output_path'] == '/home/glmuser/glm/glm-serve-4124.out'
    assert result['slurm_version'] == '22.05.8'
    # the lookup by name and scontrol show job (the script sets no --output): no duplicate check, the lock was held
    assert result['polls'] == 2


def test_submit_kill_on_invalid_dep_no_and_federated_id(run):
    slurm = Slurm().on(LOOKUP).on(['/usr/bin/sbatch'], out='77;west\n').on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '77'], out=scontrol('77', 'PENDING'))
    work = os.path.join(run.dir, 'work')
    os.mkdir(work)
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': run.script, 'kill_on_invalid_dep': False, 'umask': '0027',
                                 'chdir': work, 'dependency': [{'type': 'afterany', 'job_ids': ['5;west', '6']}]}, slurm)
    assert ok, result
    (sbatch, kwargs), = [(a, k) for a, k in slurm.calls if a[0] == '/usr/bin/sbatch']
    assert sbatch[2:5] == ['--job-name=glm-serve', '--dependency=afterany:5:6', '--kill-on-invalid-dep=no']
    assert kwargs['cwd'] == work and kwargs['umask'] == 0o027
    assert result['cluster'] == 'west' and result['job_id'] == '77'


def test_live_job_is_idempotent(run):
    slurm = Slurm().on(LOOKUP, out=squeue_row('4124', 'RUNNING', nodes='node1')).on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4124'], out=scontrol('4124', 'RUNNING', nodes='node1'))
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': run.script}, slurm)
    assert ok and result['changed'] is False and result['submitted'] is False
    assert result['job_id'] == '4124' and result['nodes'] == 'node1'
    assert slurm.argvs('sbatch') == [] and slurm.argvs('scancel') == []


@pytest.mark.parametrize('restarts, check, updated', [(1, False, True), (0, False, False), (1, True, False)])
def test_a_requeued_job_held_for_its_begin_time_is_started_now_when_adopted(run, restarts, check, updated):
    """Slurm holds a requeued job (its node failed) until a begin time ~2 min ahead: adopting it, the module sets that
    to now. A job held by the --begin its user gave (never requeued) is left alone; check mode only says so."""
    held = scontrol('4124', 'PENDING', reason='BeginTime').replace('Restarts=0', 'Restarts=%d' % restarts)
    slurm = Slurm().on(LOOKUP, out=squeue_row('4124', 'PENDING', reason='BeginTime')).on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4124'], out=held).on(['/usr/bin/scontrol', 'update'])
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': run.script}, slurm, check_mode=check)
    assert ok and result['submitted'] is False and result['job_id'] == '4124'
    updates = [a for a in slurm.argvs('scontrol') if a[1] == 'update']
    assert updates == ([['/usr/bin/scontrol', 'update', 'JobId=4124', 'StartTime=now']] if updated else []), updates
    assert not [a for a in slurm.argvs('scontrol') if a[1:3] == ['show', 'config']]   # the requeue's moment unknown
    assert result['changed'] is bool(restarts)
    if restarts:
        assert 'was requeued by Slurm (restarts 1' in result['warnings'][0], result.get('warnings')
    assert slurm.argvs('sbatch') == []


def test_a_job_requeued_a_second_ago_starts_once_its_earlier_run_is_stopped(run, monkeypatch):
    """slurmd refuses a second copy while a step of the earlier run lives on its node (which may be chosen again):
    the module waits until the requeue (SubmitTime, as batch_requeue_fini sets it) + the cluster's KillWait + 5 s,
    then sets the begin time to now."""
    slept = []
    monkeypatch.setattr(time, 'sleep', slept.append)
    requeued = int(time.time()) - 1
    stamp = time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(requeued))
    held = scontrol('4124', 'PENDING', reason='BeginTime').replace('Restarts=0', 'Restarts=1').replace(
        '   RunTime=', '   SubmitTime=%s EligibleTime=Unknown\n   RunTime=' % stamp)
    slurm = Slurm().on(LOOKUP, out=squeue_row('4124', 'PENDING', reason='BeginTime')).on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4124'], out=held).on(['/usr/bin/scontrol', 'update']).on(
        ['/usr/bin/scontrol', 'show', 'config'], out='Configuration data as of ...\nKillWait                = 5 sec\n')
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': run.script}, slurm)
    assert ok and 8 <= result['started_now']['waited'] <= 10 and slept == [result['started_now']['waited']], result
    updates = [a for a in slurm.argvs('scontrol') if a[1] == 'update']
    assert updates == [['/usr/bin/scontrol', 'update', 'JobId=4124', 'StartTime=now']], updates
    assert "10 s after the requeue, the cluster's KillWait + 5 s for its earlier run to stop on its node" in result['warnings'][0]


def test_check_mode_submits_nothing(run):
    slurm = Slurm().on(LOOKUP)
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': run.script, 'wait': True}, slurm, check_mode=True)
    assert ok and result['changed'] is True and result['submitted'] is True and result['job_id'] is None
    assert slurm.argvs('sbatch') == [] and slurm.argvs('scancel') == []


def test_check_mode_recreate_cancels_nothing(run):
    slurm = Slurm().on(LOOKUP, out=squeue_row('4124', 'RUNNING'))
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': run.script, 'recreate': True}, slurm, check_mode=True)
    assert ok and result['changed'] is True and result['cancelled'] == ['4124']
    assert slurm.argvs('sbatch') == [] and slurm.argvs('scancel') == []


def test_recreate_cancels_then_submits(run):
    slurm = Slurm().on(LOOKUP, out=squeue_row('4124', 'RUNNING')).on(['/usr/bin/scancel']).on(
        ['/usr/bin/sbatch'], out='4125\n').on(['/usr/bin/scontrol', '--local', 'show', 'job', '4125'], out=scontrol('4125', 'PENDING'))
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': run.script, 'recreate': True}, slurm)
    assert ok and result['cancelled'] == ['4124'] and result['job_id'] == '4125'
    assert slurm.argvs('scancel') == [['/usr/bin/scancel', '4124']]
    binaries = [a[0] for a, _k in slurm.calls]
    assert binaries.index('/usr/bin/scancel') < binaries.index('/usr/bin/sbatch')


def test_dead_pending_job_is_replaced(run):
    slurm = Slurm().on(LOOKUP, out=squeue_row('4124', 'PENDING', reason='DependencyNeverSatisfied')).on(['/usr/bin/scancel']).on(
        ['/usr/bin/sbatch'], out='4125\n').on(['/usr/bin/scontrol', '--local', 'show', 'job', '4125'], out=scontrol('4125', 'PENDING'))
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': run.script}, slurm)
    assert ok and result['changed'] and result['cancelled'] == ['4124'] and result['job_id'] == '4125'


def test_missing_script_fails_before_sbatch(run):
    slurm = Slurm().on(LOOKUP)
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': '/nonexistent/serve.sbatch'}, slurm)
    assert not ok and 'does not exist' in result['msg']
    assert slurm.argvs('sbatch') == []


def test_sbatch_rejection_names_cause_and_fix(run):
    slurm = Slurm().on(LOOKUP).on(['/usr/bin/sbatch'], rc=1, err=fixture('sbatch_invalid_partition.stderr'))
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': run.script, 'sbatch_args': ['--partition=compute-a100']}, slurm)
    assert not ok
    assert 'Invalid partition name specified' in result['msg'] and 'sinfo -s' in result['msg']
    assert result['rc'] == 1 and 'invalid partition specified: compute-a100' in result['stderr']
    assert result['cmd'][0] == '/usr/bin/sbatch'


def test_absent_by_name_cancels_live_jobs(run):
    slurm = Slurm().on(LOOKUP, out=squeue_row('11', 'RUNNING') + squeue_row('12', 'PENDING', reason='Priority')).on(['/usr/bin/scancel'])
    ok, result = run(slurm_job, {'name': 'glm-serve', 'state': 'absent'}, slurm)
    assert ok and result['changed'] is True and result['cancelled'] == ['12', '11']
    assert slurm.argvs('squeue')[-1] == LOOKUP
    assert slurm.argvs('scancel') == [['/usr/bin/scancel', '12', '11']]


def test_absent_nothing_live_is_unchanged(run):
    slurm = Slurm().on(LOOKUP, out=squeue_row('11', 'COMPLETING'))
    ok, result = run(slurm_job, {'name': 'glm-serve', 'state': 'absent'}, slurm)
    assert ok and result['changed'] is False and result['cancelled'] == []
    assert slurm.argvs('scancel') == []


def test_absent_by_id_of_purged_job_is_unchanged(run):
    slurm = Slurm().on(['/usr/bin/scontrol', '--local', 'show', 'job', '999'], rc=1, err=fixture('scontrol_invalid.stderr'))
    ok, result = run(slurm_job, {'job_id': '999', 'state': 'absent'}, slurm)
    assert ok and result['changed'] is False and result['state'] == 'PURGED'


def test_absent_by_id_with_wait(run):
    slurm = Slurm().on(['/usr/bin/scontrol', '--local', 'show', 'job', '12'], out=scontrol('12', 'RUNNING', nodes='node1'))
    slurm.on(['/usr/bin/scancel'])

    def cancelled(argv):
        slurm.on(['/usr/bin/scontrol', '--local', 'show', 'job', '12'], out=scontrol('12', 'CANCELLED', nodes='node1'))
    original = slurm.__call__

    def call(argv, **kwargs):
        answer = original(argv, **kwargs)
        if argv[0] == '/usr/bin/scancel':
            cancelled(argv)
        return answer
    ok, result = run(slurm_job, {'job_id': '12', 'state': 'absent', 'wait': True, 'wait_timeout': 30}, call)
    assert ok and result['changed'] and result['cancelled'] == ['12'] and result['state'] == 'CANCELLED'
    assert slurm.argvs('scancel') == [['/usr/bin/scancel', '12']]


def test_version_22_05_polls_with_scontrol(run):
    slurm = Slurm().on(LOOKUP, out=squeue_row('4124', 'RUNNING', nodes='node1')).on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4124'], out=scontrol('4124', 'COMPLETED', nodes='node1'))
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': run.script, 'wait': True, 'wait_condition': ['COMPLETED']}, slurm)
    assert ok and result['state'] == 'COMPLETED'
    assert not [a for a in slurm.argvs('squeue') if '--only-job-state' in a]


def test_version_23_11_polls_with_only_job_state(run, monkeypatch):
    slurm = Slurm(version='slurm 24.11.1\n').on(LOOKUP, out=squeue_row('4124', 'RUNNING', nodes='node1')).on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4124'], out=scontrol('4124', 'RUNNING', nodes='node1'))
    state_argv = ['/usr/bin/squeue', '--local', '-h', '--only-job-state', '-t', 'all', '-j', '4124', '-o', '%i\x1f%T']
    slurm.on(state_argv, out='4124\x1fRUNNING\n')
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': run.script, 'wait': True, 'wait_condition': ['COMPLETED'],
                                 'wait_timeout': 2}, slurm)
    assert not ok and result['timed_out'] and 'timed out' in result['msg']
    assert state_argv in slurm.argvs('squeue')
    assert result['slurm_version'] == '24.11.1'


@pytest.mark.parametrize('version, expected', [('slurm 23.11.4\n', False), ('slurm 23.11.5\n', True), ('slurm 22.05.8\n', False)])
def test_only_job_state_from_23_11_5(run, version, expected):
    """--only-job-state appeared in 23.11.5 (NEWS), not 23.11.0: older squeue would refuse it."""
    slurm = Slurm(version=version).on(LOOKUP, out=squeue_row('4124', 'RUNNING', nodes='node1')).on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4124'], out=scontrol('4124', 'RUNNING', nodes='node1'))
    slurm.on(['/usr/bin/squeue', '--local', '-h', '--only-job-state', '-t', 'all', '-j', '4124', '-o', '%i\x1f%T'],
             out='4124\x1fRUNNING\n')
    run(slurm_job, {'name': 'glm-serve', 'script': run.script, 'wait': True, 'wait_condition': ['COMPLETED'],
                    'wait_timeout': 2}, slurm)
    assert bool([a for a in slurm.argvs('squeue') if '--only-job-state' in a]) is expected


def test_end_time_update_only_when_different(run):
    slurm = Slurm().on(LOOKUP, out=squeue_row('4124', 'RUNNING', nodes='node1')).on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4124'], out=scontrol('4124', 'RUNNING', nodes='node1', end='2026-11-30T20:00:00'))
    slurm.on(['/usr/bin/scontrol', 'update'])
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': run.script, 'end_time': '2026-11-30T18:00'}, slurm)
    assert ok and result['changed'] is True
    assert ['/usr/bin/scontrol', 'update', 'JobId=4124', 'EndTime=2026-11-30T18:00:00'] in slurm.argvs('scontrol')
    slurm2 = Slurm().on(LOOKUP, out=squeue_row('4124', 'RUNNING', nodes='node1')).on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4124'], out=scontrol('4124', 'RUNNING', nodes='node1', end='2026-11-30T18:00:00'))
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': run.script, 'end_time': '2026-11-30T18:00:00'}, slurm2)
    assert ok and result['changed'] is False
    assert not [a for a in slurm2.argvs('scontrol') if 'update' in a]


def test_transient_lookup_error_is_retried(run, monkeypatch):
    monkeypatch.setattr('time.sleep', lambda s: None)
    answers = [(1, '', fixture('squeue_down.stderr')), (0, '', ''), (0, '', '')]
    slurm = Slurm().on(['/usr/bin/sbatch'], out='5\n').on(['/usr/bin/scontrol', '--local', 'show', 'job', '5'], out=scontrol('5', 'PENDING'))

    call = squeue_answers(slurm, answers)
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': run.script}, call)
    assert ok and result['job_id'] == '5'
    assert len([a for a in slurm.argvs('squeue') if '-n' in a]) == 2  # the lookup, retried (the lock held: no duplicate check)
    # and it says so: what it waited for, how long, and the bound
    assert any('the Slurm controller did not answer' in w and 'Unable to contact slurm controller' in w
               and 'retry_timeout=120' in w for w in result.get('warnings', [])), result.get('warnings')


def test_an_outage_longer_than_retry_timeout_fails_naming_the_bound(run):
    down = (1, '', fixture('squeue_down.stderr'))
    call = squeue_answers(Slurm(), [down] * 3)     # retry_timeout 1 s: asked at 0 s and after 1 s of sleep
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': run.script, 'retry_timeout': 1}, call)
    assert not ok and 'Unable to contact slurm controller' in result['msg'], result
    assert 'retried for 1 s, retry_timeout=1' in result['msg'], result['msg']


def test_info_by_name(run):
    argv = ['/usr/bin/squeue', '--local', '-h', '-t', 'all', '-n', 'glm-serve', '-u', 'glmuser', '-o', FMT]
    slurm = Slurm().on(argv, out=squeue_row('4124', 'RUNNING', nodes='node1') + squeue_row('4120', 'COMPLETED')).on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4124'], out=scontrol('4124', 'RUNNING', nodes='node1')).on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4120'], out=scontrol('4120', 'COMPLETED'))
    ok, result = run(slurm_job_info, {'name': 'glm-serve'}, slurm)
    assert ok and result['changed'] is False
    assert [j['job_id'] for j in result['jobs']] == ['4120', '4124']
    assert result['jobs'][1]['output_path'] == '/home/glmuser/glm/glm-serve-4124.out'
    assert result['jobs'][1]['partition'] == 'compute-h100' and result['jobs'][1]['exit_code'] == '0:0'


def test_info_marks_live_and_ending_jobs_and_filters_on_live(run):
    argv = ['/usr/bin/squeue', '--local', '-h', '-t', 'all', '-n', 'glm-serve', '-u', 'glmuser', '-o', FMT]
    rows = squeue_row('4124', 'RUNNING', nodes='node1') + squeue_row('4120', 'COMPLETED') + squeue_row('4122', 'COMPLETING')
    slurm = Slurm().on(argv, out=rows)
    ok, result = run(slurm_job_info, {'name': 'glm-serve', 'details': False}, slurm)
    assert ok
    assert [(j['job_id'], j['live'], j['ending']) for j in result['jobs']] == [
        ('4120', False, False), ('4122', False, True), ('4124', True, False)]
    ok, result = run(slurm_job_info, {'name': 'glm-serve', 'details': False, 'live': True}, slurm)
    assert [j['job_id'] for j in result['jobs']] == ['4124']
    ok, result = run(slurm_job_info, {'name': 'glm-serve', 'details': False, 'live': False}, slurm)
    assert [j['job_id'] for j in result['jobs']] == ['4120', '4122']


def test_info_probe_asks_the_running_job_with_the_key_from_its_file(run, monkeypatch, tmp_path):
    key_file = tmp_path / 'api-key'
    key_file.write_text(u'sekrit-key-0123\n')
    os.chmod(str(key_file), 0o600)
    asked = []

    def check(probe, node, job_id=None):
        asked.append((node, probe._key))
        return mp.ProbeResult(mp.READY, 'serves glm-5.3-flash', answered=True, models=['glm-5.3-flash'], max_model_len=202752)
    monkeypatch.setattr(mp.ModelProbe, 'check', check)
    argv = ['/usr/bin/squeue', '--local', '-h', '-t', 'all', '-n', 'glm-serve', '-u', 'glmuser', '-o', FMT]
    slurm = Slurm().on(argv, out=squeue_row('4124', 'RUNNING', nodes='node1') + squeue_row('4125', 'PENDING'))
    probe = {'port': 30000, 'key_file': str(key_file), 'model': 'glm-5.3-flash'}
    ok, result = run(slurm_job_info, {'name': 'glm-serve', 'details': False, 'probe': probe}, slurm)
    assert ok and asked == [('node1', 'sekrit-key-0123')]
    running, pending = result['jobs'][0], result['jobs'][1]
    assert running['probe'] == {'status': 'ready', 'detail': 'serves glm-5.3-flash', 'answered': True,
                                'endpoint': 'http://node1:30000', 'models': ['glm-5.3-flash'], 'max_model_len': 202752}
    assert pending['probe'] is None
    assert 'sekrit-key-0123' not in repr(result)
    ok, result = run(slurm_job_info, {'name': 'glm-serve', 'probe': dict(probe, key_file=str(tmp_path / 'none'))}, slurm)
    assert not ok and str(tmp_path / 'none') in result['msg']
    # no running job: the key is not needed, the jobs are listed
    pending = Slurm().on(argv, out=squeue_row('4125', 'PENDING'))
    ok, result = run(slurm_job_info, {'name': 'glm-serve', 'details': False, 'probe': dict(probe, key_file=str(tmp_path / 'none'))}, pending)
    assert ok and result['jobs'][0]['probe'] is None


def test_info_probe_match_asks_only_the_jobs_it_names(run, monkeypatch, tmp_path):
    # status lists all of the user's live jobs (one squeue) and asks only the replicas and the router: another
    # running job of the user, whatever listens on its node's port, never gets the key
    key_file = tmp_path / 'api-key'
    key_file.write_text(u'sekrit-key-0123\n')
    os.chmod(str(key_file), 0o600)
    asked = []

    def check(probe, node, job_id=None):
        asked.append(node)
        return mp.ProbeResult(mp.READY, 'serves glm-5.3-flash', answered=True, models=['glm-5.3-flash'])
    monkeypatch.setattr(mp.ModelProbe, 'check', check)
    argv = ['/usr/bin/squeue', '--local', '-h', '-t', 'all', '-u', 'glmuser', '-o', FMT]
    slurm = Slurm().on(argv, out=squeue_row('7', 'RUNNING', name='notebook', nodes='node1')
                       + squeue_row('8', 'RUNNING', name='glm-serve-2', nodes='node2')
                       + squeue_row('9', 'RUNNING', name='glm-serve-router', nodes='node3')
                       + squeue_row('10', 'RUNNING', name='glm-serve-2x', nodes='node4'))
    probe = {'port': 30000, 'key_file': str(key_file), 'model': 'glm-5.3-flash'}
    ok, result = run(slurm_job_info, {'live': True, 'details': False, 'probe': probe,
                                      'probe_match': '^(glm-serve-[0-9]+|glm-serve-router)$'}, slurm)
    assert ok, result
    assert asked == ['node2', 'node3']
    assert [(j['name'], j['probe'] is not None) for j in result['jobs']] == [
        ('notebook', False), ('glm-serve-2', True), ('glm-serve-router', True), ('glm-serve-2x', False)]
    ok, result = run(slurm_job_info, {'live': True, 'details': False, 'probe': probe, 'probe_match': '(unclosed'}, slurm)
    assert not ok and 'probe_match=' in result['msg'] and 'not a valid regular expression' in result['msg']


def test_info_by_ids_falls_back_to_scontrol_and_reports_missing(run):
    argv = ['/usr/bin/squeue', '--local', '-h', '-t', 'all', '-j', '5,6', '-o', FMT]
    slurm = Slurm().on(argv, rc=1, err=fixture('squeue_invalid.stderr')).on(
        ['/usr/bin/squeue', '--local', '-h', '-t', 'all', '-j', '5', '-o', FMT], rc=1, err=fixture('squeue_invalid.stderr')).on(
        ['/usr/bin/squeue', '--local', '-h', '-t', 'all', '-j', '6', '-o', FMT], out=squeue_row('6', 'FAILED')).on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '5'], rc=1, err=fixture('scontrol_invalid.stderr')).on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '6'], out=scontrol('6', 'FAILED'))
    ok, result = run(slurm_job_info, {'job_ids': ['5', '6'], 'details': True}, slurm, check_mode=True)
    assert ok and [j['job_id'] for j in result['jobs']] == ['6'] and result['missing'] == ['5']


# -- hints, the submit lock, duplicates, recreate on change / older than --------------------------

from ansible_collections.glm.serve.plugins.module_utils import job_actions as ja  # noqa: E402
from ansible_collections.glm.serve.plugins.module_utils.job_waiter import WaitFailed  # noqa: E402

HINTS = [
    {'match': 'No space left on device', 'hint': 'free or buy storage for {name}', 'job': 'glm-download'},
    {'match': 'CUDA out of memory', 'hint': 'set server_mem_fraction_static=0.70', 'job': 'glm-serve'},
    {'match': '^TIMEOUT', 'hint': 'rerun: it resumes', 'job': None},
]


def test_hints_match_the_failed_job_its_state_and_its_log_tail():
    hints = ja.compile_hints(HINTS)
    exc = WaitFailed('job 2 (glm-serve) can never start', reason='its dependency afterok:1 failed',
                     job={'job_id': '2', 'name': 'glm-serve'}, failed_job={'job_id': '1', 'name': 'glm-download', 'state': 'FAILED'},
                     log_path='/w/dl.out', log_tail=['OSError: [Errno 28] No space left on device'])
    found = ja.matching_hints(hints, exc)
    assert found == ['free or buy storage for glm-download']
    exc.hints = found
    msg = exc.msg
    assert msg.index('What to do: free or buy storage for glm-download') < msg.index('. Last lines of /w/dl.out:\nOSError')
    assert exc.as_dict()['hints'] == found and exc.as_dict()['job_id'] == '1' and exc.as_dict()['kind'] == 'ended'
    oom = WaitFailed('job 2 (glm-serve) ended FAILED', job={'job_id': '2', 'name': 'glm-serve', 'state': 'FAILED'},
                     log_tail=['torch.OutOfMemoryError: CUDA out of memory.'])
    assert ja.matching_hints(hints, oom) == ['set server_mem_fraction_static=0.70']
    timeout = WaitFailed('x', job={'job_id': '1', 'name': 'glm-download', 'state': 'TIMEOUT', 'reason': 'TimeLimit'})
    assert ja.matching_hints(hints, timeout) == ['rerun: it resumes']


def test_a_bad_hint_pattern_is_refused_before_anything_runs(run):
    slurm = Slurm()
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': run.script, 'hints': [{'match': '(', 'hint': 'x'}]}, slurm)
    assert not ok and 'hints[0].match' in result['msg']
    assert slurm.argvs('sbatch') == [] and slurm.argvs('squeue')[1:] == []


def test_wait_failure_carries_the_hints_and_the_cancelled_child(run, monkeypatch):
    monkeypatch.setattr('time.sleep', lambda s: None)
    slurm = Slurm().on(LOOKUP).on(['/usr/bin/sbatch'], out='4125\n').on(['/usr/bin/scancel']).on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4124'],
        out=scontrol('4124', 'FAILED', name='glm-download', reason='NonZeroExitCode')).on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4125'],
        out=scontrol('4125', 'PENDING', reason='Dependency').replace('Dependency=(null)', 'Dependency=afterok:4124(unfulfilled)'))
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': run.script, 'wait': True, 'wait_timeout': 30,
                                 'dependency': [{'type': 'afterok', 'job_ids': ['4124']}],
                                 'hints': [{'match': 'FAILED', 'hint': 'read {log} and rerun', 'job': 'glm-download'}]}, slurm)
    assert not ok
    assert 'can never start' in result['msg'] and 'cancelled (scancel 4125)' in result['msg']
    assert result['hints'] == ['read /home/glmuser/glm/glm-download-4124.out and rerun']
    assert '4125' in result['cancelled'] and ['/usr/bin/scancel', '4125'] in slurm.argvs('scancel')
    # the same failure as data, for playbooks to branch on
    failure = result['failure']
    assert failure['kind'] == 'dependency' and failure['job_id'] == '4124' and failure['state'] == 'FAILED'
    assert failure['summary'] == 'job 4125 (glm-serve) can never start' and failure['hints'] == result['hints']
    assert failure['cancelled'] == ['4125'] and failure['slurm_reason'] == 'NonZeroExitCode'
    assert 'What to do: read /home/glmuser/glm/glm-download-4124.out and rerun.' in result['msg']


def test_submit_lock_serialises_two_runs(tmp_path):
    path = str(tmp_path / '.slurm_job-u-n.lock')

    class Clock:
        t = 0.0

        def now(self):
            return self.t

        def sleep(self, s):
            self.t += s
    warnings = []
    with ja.SubmitLock(path, Clock(), timeout=2, warn=warnings.append) as first:
        assert first.fd is not None
        second = ja.SubmitLock(path, Clock(), timeout=2, warn=warnings.append)
        with second:
            assert second.fd is None                    # could not take it while the first holds it
        assert 'stayed locked' in warnings[-1]
    with ja.SubmitLock(path, Clock(), timeout=2) as third:
        assert third.fd is not None                     # free again
    assert oct(os.stat(path).st_mode & 0o777) == '0o600'


def test_lock_file_lives_next_to_the_script(run):
    assert ja.lock_path({'script': run.script}, 'glm serve', 'u') == os.path.join(run.dir, '.slurm_job-u-glm_serve.lock')
    assert ja.lock_path({'script': run.script, 'chdir': '/nonexistent'}, 'n', 'u') is None


def test_duplicate_from_a_concurrent_run_keeps_the_oldest_and_cancels_ours(run):
    answers = [(0, '', ''), (0, squeue_row('4130', 'PENDING') + squeue_row('4129', 'PENDING'), '')]
    slurm = Slurm().on(['/usr/bin/sbatch'], out='4130\n').on(['/usr/bin/scancel']).on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4129'], out=scontrol('4129', 'PENDING'))

    call = squeue_answers(slurm, answers)
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': run.script, 'duplicate_check': 'always'}, call)
    assert ok and result['job_id'] == '4129' and result['cancelled'] == ['4130'] and result['submitted'] is False
    assert slurm.argvs('scancel') == [['/usr/bin/scancel', '4130']]
    assert os.path.exists(os.path.join(run.dir, '.slurm_job-glmuser-glm-serve.lock'))


def test_duplicate_check_keeps_ours_when_it_is_the_oldest(run):
    answers = [(0, '', ''), (0, squeue_row('4131', 'PENDING') + squeue_row('4130', 'PENDING'), '')]
    slurm = Slurm().on(['/usr/bin/sbatch'], out='4130\n').on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4130'], out=scontrol('4130', 'PENDING'))

    call = squeue_answers(slurm, answers)
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': run.script, 'duplicate_check': 'always'}, call)
    assert ok and result['job_id'] == '4130' and result['cancelled'] == [] and slurm.argvs('scancel') == []
    assert not answers                                                  # both listings were made


@pytest.mark.parametrize('lock_works', [True, False])
def test_duplicate_check_by_default_only_when_the_lock_could_not_be_taken(run, monkeypatch, lock_works):
    warnings = []
    if not lock_works:
        def no_flock(fd, op):
            raise IOError(errno.ENOLCK, 'No locks available')
        monkeypatch.setattr(ja.fcntl, 'flock', no_flock)
        monkeypatch.setattr(basic.AnsibleModule, 'warn', lambda self, msg: warnings.append(msg))
    answers = [(0, '', ''), (0, squeue_row('4130', 'PENDING'), '')]
    slurm = Slurm().on(['/usr/bin/sbatch'], out='4130\n').on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4130'], out=scontrol('4130', 'PENDING'))

    call = squeue_answers(slurm, answers)
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': run.script}, call)
    assert ok and result['job_id'] == '4130'
    assert len(slurm.argvs('squeue')) == (2 if lock_works else 3)    # --version, the lookup (and the check)
    assert bool(warnings) is not lock_works and (lock_works or 'No locks available' in warnings[0])


@pytest.mark.parametrize('stored, replaced', [('#!/bin/bash\necho hi\n', False), ('#!/bin/bash\necho old\n', True)])
def test_recreate_on_change_compares_the_stored_script(run, stored, replaced):
    slurm = Slurm().on(LOOKUP, out=squeue_row('4124', 'RUNNING')).on(
        ['/usr/bin/scontrol', 'write', 'batch_script', '4124', '-'], out=stored).on(['/usr/bin/scancel']).on(
        ['/usr/bin/sbatch'], out='4125\n').on(['/usr/bin/scontrol', '--local', 'show', 'job'], out=scontrol('4125', 'PENDING'))
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': run.script, 'recreate_on_change': True}, slurm)
    assert ok and result['changed'] is replaced
    assert result['job_id'] == ('4125' if replaced else '4124')
    assert bool(slurm.argvs('sbatch')) is replaced


@pytest.mark.parametrize('submitted_ago, replaced', [(3600, True), (-60, False)])
def test_recreate_if_older_than_the_key_file(run, tmp_path, submitted_ago, replaced):
    import time as _time
    key = tmp_path / 'api-key'
    key.write_text(u'k\n')
    submit = _time.strftime('%Y-%m-%dT%H:%M:%S', _time.localtime(_time.time() - submitted_ago))
    shown = scontrol('4124', 'RUNNING').replace('StartTime=Unknown', 'SubmitTime=%s StartTime=Unknown' % submit)
    slurm = Slurm().on(LOOKUP, out=squeue_row('4124', 'RUNNING')).on(['/usr/bin/scancel']).on(
        ['/usr/bin/sbatch'], out='4125\n').on(['/usr/bin/scontrol', '--local', 'show', 'job', '4125'], out=scontrol('4125', 'PENDING')).on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4124'], out=shown)
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': run.script, 'recreate_if_older_than': str(key)}, slurm)
    assert ok and result['job_id'] == ('4125' if replaced else '4124')
    assert (result['cancelled'] == ['4124']) is replaced


# -- the submit record: a re-run that changes nothing costs one lookup ------------------------------------------


def test_submit_writes_a_record_and_a_rerun_asks_slurm_nothing_but_the_lookup(run, tmp_path):
    script = tmp_path / 'serve.sbatch'
    script.write_text(u'#!/bin/bash\n#SBATCH --job-name=x\n#SBATCH --output=%x-%j.out\necho hi\n#SBATCH --output=ignored\n')
    first = Slurm().on(LOOKUP).on(['/usr/bin/sbatch'], out='4124\n').on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4124'], out=scontrol('4124', 'PENDING'))
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': str(script), 'recreate_on_change': True}, first)
    assert ok and result['submitted']
    record = tmp_path / '.slurm_job-glmuser-glm-serve.json'
    assert json.loads(record.read_text()) == {'job_id': '4124', 'sha256': ja.script_digest(str(script))}
    assert oct(os.stat(str(record)).st_mode & 0o777) == '0o600'
    # the job runs now; the same script again: its record's job asked alone (1 RPC), no squeue, no batch_script
    again = Slurm().on(['/usr/bin/scontrol', '--local', 'show', 'job', '4124'], out=scontrol('4124', 'RUNNING', nodes='node1'))
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': str(script), 'recreate_on_change': True}, again)
    assert ok and result['changed'] is False and result['job_id'] == '4124'
    assert result['output_path'] == '/home/glmuser/glm/glm-serve-4124.out'
    assert [a[:2] for a in again.argvs()] == [['/usr/bin/squeue', '--version'], ['/usr/bin/scontrol', '--local']]
    # the script changed since: replaced, still without asking Slurm for the stored script
    script.write_text(u'#!/bin/bash\n#SBATCH --output=%x-%j.out\necho changed\n')
    changed = Slurm().on(['/usr/bin/scontrol', '--local', 'show', 'job', '4124'], out=scontrol('4124', 'RUNNING', nodes='node1')).on(
        ['/usr/bin/scancel']).on(['/usr/bin/sbatch'], out='4125\n')
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': str(script), 'recreate_on_change': True}, changed)
    assert ok and result['job_id'] == '4125' and result['cancelled'] == ['4124']
    assert not [a for a in changed.argvs('scontrol') if 'batch_script' in a]
    assert result['output_path'] == os.path.join(str(tmp_path), 'glm-serve-4125.out')   # from --output, no scontrol for 4125
    assert changed.argvs('squeue')[1:] == []
    # its job ended (purged): the record's job is asked, then the name is looked up as without a record
    ended = Slurm().on(['/usr/bin/scontrol', '--local', 'show', 'job', '4125'], rc=1,
                       err='slurm_load_jobs error: Invalid job id specified\n').on(LOOKUP).on(['/usr/bin/sbatch'], out='4126\n')
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': str(script)}, ended)
    assert ok and result['job_id'] == '4126' and len(ended.argvs('squeue')) == 2


def test_a_record_of_another_job_is_not_trusted(run, tmp_path):
    script = tmp_path / 'serve.sbatch'
    script.write_text(u'#!/bin/bash\n#SBATCH --output=%x-%j.out\necho hi\n')
    (tmp_path / '.slurm_job-glmuser-glm-serve.json').write_text(
        u'{"job_id": "4000", "sha256": "%s"}' % ja.script_digest(str(script)))
    slurm = Slurm().on(LOOKUP, out=squeue_row('4124', 'RUNNING', nodes='node1')).on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4000'], out=scontrol('4000', 'COMPLETED')).on(
        ['/usr/bin/scontrol', 'write', 'batch_script', '4124', '-'], out=script.read_text()).on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4124'], out=scontrol('4124', 'RUNNING', nodes='node1'))
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': str(script), 'recreate_on_change': True}, slurm)
    assert ok and result['changed'] is False
    assert [a for a in slurm.argvs('scontrol') if 'batch_script' in a]           # asked Slurm, as before
    assert [a for a in slurm.argvs('scontrol') if 'show' in a]


def test_script_output_pattern_reads_the_header_only():
    assert ja.script_output_pattern(None) is None
    assert ja.script_output_pattern('#!/bin/bash\n#SBATCH -o out-%j.txt\necho\n#SBATCH --output=late\n') == 'out-%j.txt'
    assert ja.script_output_pattern('#SBATCH --output=a\n', ['--output=b']) is None


def test_script_content_is_written_once_and_predicts_the_restart_in_check_mode(run, tmp_path):
    script = tmp_path / 'serve.sbatch'
    text = u'#!/bin/bash\n#SBATCH --output=%x-%j.out\necho one\n'
    first = Slurm().on(LOOKUP).on(['/usr/bin/sbatch'], out='4124\n').on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4124'], out=scontrol('4124', 'PENDING'))
    params = {'name': 'glm-serve', 'script': str(script), 'script_content': text, 'recreate_on_change': True}
    ok, result = run(slurm_job, params, first)
    assert ok and result['script_written'] and result['submitted'] and script.read_text() == text
    assert oct(os.stat(str(script)).st_mode & 0o777) == '0o600'
    # the same text again: nothing written, nothing submitted, one lookup (of the record's job)
    again = Slurm().on(['/usr/bin/scontrol', '--local', 'show', 'job', '4124'], out=scontrol('4124', 'RUNNING', nodes='node1'))
    ok, result = run(slurm_job, params, again)
    assert ok and result['changed'] is False and 'script_written' not in result
    # another text in check mode: the file stays, the restart is predicted from the record, nothing runs
    mtime = os.stat(str(script)).st_mtime
    check = Slurm().on(['/usr/bin/scontrol', '--local', 'show', 'job', '4124'], out=scontrol('4124', 'RUNNING', nodes='node1'))
    ok, result = run(slurm_job, dict(params, script_content=text.replace('one', 'two')), check, check_mode=True)
    assert ok and result['changed'] and result['script_written'] and result['script_changed'] and result['submitted']
    assert result['cancelled'] == ['4124'] and script.read_text() == text and os.stat(str(script)).st_mtime == mtime
    assert check.argvs('sbatch') == [] and check.argvs('scancel') == []


def test_script_content_into_a_missing_folder_fails_before_anything_runs(run, tmp_path):
    slurm = Slurm()
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': str(tmp_path / 'no' / 's.sbatch'), 'script_content': 'x'}, slurm)
    assert not ok and 'does not exist on the host' in result['msg'] and str(tmp_path / 'no') in result['msg']
    assert slurm.argvs('sbatch') == [] and slurm.argvs('squeue')[1:] == []


# -- one listing for two names: the download task's lookup serves the server task --------------------------------

LOOKUP_BOTH = ['/usr/bin/squeue', '--local', '-h', '-n', 'glm-download,glm-serve', '-u', 'glmuser', '-o', FMT]


def shared_listing(run, serve_row=''):
    """The download task with lookup_also: one squeue for both names, a download submitted; returns its lookup."""
    slurm = Slurm().on(LOOKUP_BOTH, out=serve_row).on(['/usr/bin/sbatch'], out='4124\n').on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4124'], out=scontrol('4124', 'RUNNING', name='glm-download'))
    ok, result = run(slurm_job, {'name': 'glm-download', 'script': run.script, 'lookup_also': ['glm-serve']}, slurm)
    assert ok and result['job_id'] == '4124' and [a for a in slurm.argvs('squeue') if '-n' in a] == [LOOKUP_BOTH]
    return result['lookup']


def test_one_listing_serves_the_next_task_which_asks_slurm_nothing_before_sbatch(run):
    lookup = shared_listing(run)
    assert lookup['names'] == ['glm-download', 'glm-serve'] and lookup['jobs'] == [] and lookup['user'] == 'glmuser'
    assert lookup['records'] == {'glm-download': None, 'glm-serve': None} and lookup['folder'] == run.dir
    slurm = Slurm().on(['/usr/bin/sbatch'], out='4125\n').on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4125'], out=scontrol('4125', 'PENDING', reason='Dependency'))
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': run.script, 'lookup': lookup,
                                 'dependency': [{'type': 'afterok', 'job_ids': ['4124']}]}, slurm)
    assert ok and result['submitted'] and result['job_id'] == '4125'
    assert slurm.argvs('squeue')[1:] == []                   # no lookup: the listing stood for it


def test_a_live_job_in_the_listing_is_adopted(run):
    lookup = shared_listing(run, squeue_row('4100', 'RUNNING', nodes='node1'))
    assert [j['job_id'] for j in lookup['jobs']] == ['4100']
    slurm = Slurm().on(['/usr/bin/scontrol', '--local', 'show', 'job', '4100'], out=scontrol('4100', 'RUNNING', nodes='node1'))
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': run.script, 'lookup': lookup}, slurm)
    assert ok and not result['changed'] and result['job_id'] == '4100' and slurm.argvs('sbatch') == []
    assert slurm.argvs('squeue')[1:] == []


@pytest.mark.parametrize('spoil', ['a submit since', 'too old', 'another user', 'another folder', 'not listed'])
def test_a_listing_that_may_be_stale_is_not_used(run, tmp_path, spoil):
    lookup = shared_listing(run)
    params = {'name': 'glm-serve', 'script': run.script, 'lookup': lookup}
    if spoil == 'a submit since':       # a run (on any login node sharing the folder) submitted under the lock since
        (tmp_path / '.slurm_job-glmuser-glm-serve.json').write_text(u'{"job_id": "4130", "sha256": "x"}')
    elif spoil == 'too old':
        params['lookup'] = dict(lookup, taken_at=lookup['taken_at'] - 61)
    elif spoil == 'another user':
        params['lookup'] = dict(lookup, user='someone')
    elif spoil == 'another folder':
        params['lookup'] = dict(lookup, folder='/elsewhere')
    else:
        params['lookup'] = dict(lookup, names=['glm-download'])
    # job 4130 (submitted since the listing, which has no glm-serve) is live: found, not submitted again
    slurm = Slurm().on(LOOKUP, out=squeue_row('4130', 'PENDING')).on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4130'], out=scontrol('4130', 'PENDING'))
    ok, result = run(slurm_job, params, slurm)
    assert ok and result['job_id'] == '4130' and slurm.argvs('sbatch') == []
    if spoil == 'a submit since':                               # by its record (scontrol show job 4130)
        assert slurm.argvs('squeue')[1:] == [] and slurm.argvs('scontrol')
    else:                                                       # by name, as without a listing
        assert LOOKUP in slurm.argvs('squeue')


def test_a_job_just_submitted_after_another_is_not_asked_again_before_its_parent(run, tmp_path):
    """sbatch --dependency: the job is PENDING (Dependency) until Slurm says otherwise, so the first round of the
    wait asks the parent alone; the job is asked when its parent has ended."""
    script = tmp_path / 'serve.sbatch'
    script.write_text(u'#!/bin/bash\n#SBATCH --output=%x-%j.out\necho hi\n')
    slurm = Slurm().on(LOOKUP).on(['/usr/bin/sbatch'], out='4125\n').on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4124'], out=scontrol('4124', 'COMPLETED', name='glm-download', nodes='node2')).on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4125'], out=scontrol('4125', 'RUNNING', nodes='node1'))
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': str(script), 'wait': True, 'wait_timeout': 30,
                                 'dependency': [{'type': 'afterok', 'job_ids': ['4124']}]}, slurm)
    assert ok and result['state'] == 'RUNNING', result
    asked = [a[4] for a in slurm.argvs('scontrol')]
    assert asked[0] == '4124' and '4125' in asked, asked          # the parent first, then the job
    assert result['reason'] == 'None'                             # what Slurm said, not the assumption


def test_a_job_requeued_before_the_wait_saw_it_run_fails_as_requeued(run, tmp_path):
    """The node of a job just submitted went DOWN before a round of the wait saw the job RUNNING: the first row
    the wait gets is already the requeued one (PENDING, BeginTime, Restarts=1). The submission's row says
    Restarts=0, so this is a requeue: the wait fails at once instead of waiting out the BeginTime."""
    script = tmp_path / 'serve.sbatch'
    script.write_text(u'#!/bin/bash\n#SBATCH --output=%x-%j.out\necho hi\n')
    requeued = scontrol('4125', 'PENDING', reason='BeginTime').replace('Restarts=0', 'Restarts=1')
    slurm = Slurm().on(LOOKUP).on(['/usr/bin/sbatch'], out='4125\n').on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4125'], out=requeued)
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': str(script), 'wait': True, 'wait_timeout': 30}, slurm)
    assert not ok and 'requeued by Slurm' in result['msg'], result


# -- bad nodes: a job that failed its node's check is submitted again without that node ---------------------------

GPU_FAIL = ('gpu-check: node1 GPU 3 NVIDIA H200 00000000:5D:00.0: 73156 of 143771 MiB free, ECC 0, Default, 1 process(es): BAD\n'
            'gpu-check: FAILED on node1: GPU 3 (00000000:5D:00.0): 1 compute process (pid 4242 python3 70000 MiB)\n')
BAD_PATTERN = r'^gpu-check: FAILED on (?P<node>\S+): (?P<cause>.*)$'


def bad_node_run(run, tmp_path, monkeypatch, outcomes, bad=None, nodes=('node1', 'node2'), retries=2, extra=(), job_nodes=None,
                 pattern=BAD_PATTERN):
    """Submit with bad_nodes and wait for RUNNING; outcomes: per submission (node, state, log text)."""
    script = tmp_path / 'serve.sbatch'
    script.write_text(u'#!/bin/bash\n#SBATCH --output=%x-%j.out\necho hi\n')
    listing = tmp_path / 'bad-nodes.json'
    if bad is not None:
        listing.write_text(json.dumps(bad))
    warnings = []
    monkeypatch.setattr(basic.AnsibleModule, 'warn', lambda self, msg: warnings.append(msg))
    submitted = []

    def call(argv, **kwargs):
        submitted_ids = [str(5000 + i) for i in range(len(submitted))]
        if argv[0] == '/usr/bin/sbatch':
            submitted.append(list(argv))
            job_id = str(5000 + len(submitted) - 1)
            node, state, text = outcomes[len(submitted) - 1]
            (tmp_path / ('glm-serve-%s.out' % job_id)).write_text(text)
            return 0, job_id + '\n', ''
        if argv[:4] == ['/usr/bin/scontrol', '--local', 'show', 'job'] and argv[4] in submitted_ids:
            node, state, _text = outcomes[int(argv[4]) - 5000]
            shown = scontrol(argv[4], state, nodes=node).replace('ExitCode=0:0', 'ExitCode=%s' % ('75:0' if state == 'FAILED' else '0:0'))
            return 0, shown.replace('/home/glmuser/glm', str(tmp_path)), ''
        if argv[:4] == ['/usr/bin/scontrol', '--local', 'show', 'job']:
            return 1, '', 'slurm_load_jobs error: Invalid job id specified\n'     # a job of an earlier run, purged
        if argv[:2] == ['/usr/bin/squeue', '--local'] and '-n' in argv:
            return 0, '', ''
        if argv[:2] == ['/usr/bin/squeue', '--version']:
            return 0, 'slurm-wlm 22.05.8\n', ''
        if argv[0] == '/usr/bin/sacct':
            return 1, '', 'Slurm accounting storage is disabled\n'
        raise AssertionError('unexpected command %r' % (argv,))
    params = {'name': 'glm-serve', 'script': str(script), 'wait': True, 'wait_timeout': 60, 'sbatch_args': list(extra),
              'bad_nodes': {'file': str(listing), 'pattern': pattern, 'nodes': list(nodes), 'retries': retries}}
    if job_nodes is not None:
        params['bad_nodes']['job_nodes'] = job_nodes
    ok, result = run(slurm_job, params, call)
    saved = json.loads(listing.read_text()) if listing.exists() else {}
    return ok, result, submitted, saved, warnings


def test_a_node_that_fails_the_gpu_check_is_avoided_at_once(run, tmp_path, monkeypatch):
    ok, result, submitted, saved, warnings = bad_node_run(run, tmp_path, monkeypatch, [
        ('node1', 'FAILED', GPU_FAIL), ('node2', 'RUNNING', 'gpu-check: node2: 8 GPUs ok (0s)\n')])
    assert ok, result
    assert result['job_id'] == '5001' and result['nodes'] == 'node2' and result['state'] == 'RUNNING'
    assert not [a for a in submitted[0] if a.startswith('--exclude')]
    assert '--exclude=node1' in submitted[1]
    assert result['bad_nodes'] == [{'node': 'node1', 'job_id': '5000',
                                    'cause': 'GPU 3 (00000000:5D:00.0): 1 compute process (pid 4242 python3 70000 MiB)'}]
    assert result['excluded_nodes'] == ['node1']
    assert saved['node1']['cause'].startswith('GPU 3') and saved['node1']['job_id'] == '5000'
    assert oct(os.stat(str(tmp_path / 'bad-nodes.json')).st_mode & 0o777) == '0o600'
    assert any('failed on node node1' in w and 'without that node' in w for w in warnings), warnings


def test_the_last_node_is_never_excluded_the_run_stops_and_says_why(run, tmp_path, monkeypatch):
    ok, result, submitted, saved, _w = bad_node_run(run, tmp_path, monkeypatch, [
        ('node2', 'FAILED', GPU_FAIL.replace('node1', 'node2'))], bad={'node1': {'cause': 'ECC', 'since': int(time.time()), 'job_id': '1'}})
    assert not ok and len(submitted) == 1 and '--exclude=node1' in submitted[0]
    assert 'Node node2 failed the job' in result['msg'] and 'no other node is left' in result['msg'], result['msg']
    assert sorted(saved) == ['node1', 'node2']
    # the next run stops before submitting anything, naming the nodes and their causes
    ok, result, submitted, _saved, _w = bad_node_run(run, tmp_path, monkeypatch, [], bad=saved)
    assert not ok and submitted == []
    assert 'every node the job can run on (node1, node2) is on the bad-node list' in result['msg']
    assert 'node1: ECC' in result['msg'] and 'remove the file' in result['msg']


def test_a_job_of_several_nodes_is_not_retried_on_fewer_nodes_than_it_needs(run, tmp_path, monkeypatch):
    # a two-node job (a multi-node server) on a three-node partition: node2 fails its check; node1 and node3 are
    # enough for another attempt, which then fails on node3: one node left, no third attempt
    ok, result, submitted, saved, _w = bad_node_run(run, tmp_path, monkeypatch, [
        ('node[1-2]', 'FAILED', GPU_FAIL.replace('node1', 'node2')),
        ('node[1,3]', 'FAILED', GPU_FAIL.replace('node1', 'node3'))], nodes=('node1', 'node2', 'node3'), job_nodes=2)
    assert not ok and len(submitted) == 2 and '--exclude=node2' in submitted[1], submitted
    assert 'fewer nodes than the job needs (2) are left' in result['msg'], result['msg']
    assert sorted(saved) == ['node2', 'node3']
    # the next run stops before submitting anything, and says why
    ok, result, submitted, _saved, _w = bad_node_run(run, tmp_path, monkeypatch, [], bad=saved,
                                                     nodes=('node1', 'node2', 'node3'), job_nodes=2)
    assert not ok and submitted == []
    assert 'the job needs 2 nodes and only node1 of the nodes it can run on (node1, node2, node3) is not on the bad-node list' \
        in result['msg'], result['msg']


def test_old_entries_expire_and_the_users_own_exclude_is_kept(run, tmp_path, monkeypatch):
    old = {'node1': {'cause': 'ECC', 'since': int(time.time()) - 90000, 'job_id': '1'},
           'node3': {'cause': 'busy', 'since': int(time.time()) - 60, 'job_id': '2'}}
    ok, result, submitted, _saved, _w = bad_node_run(run, tmp_path, monkeypatch, [('node1', 'RUNNING', 'ok\n')], bad=old,
                                                     nodes=('node1', 'node2', 'node3', 'node4'), extra=['-x', 'node4'])
    assert ok and '--exclude=node3,node4' in submitted[0] and '-x' not in submitted[0], submitted
    assert result['excluded_nodes'] == ['node3']


def _role_file(*parts):
    import yaml
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', '..', 'roles', 'server', *parts)) as handle:
        return yaml.safe_load(handle)


# The server role's own pattern (vars/main.yml) and the driver's hint (defaults/main.yml, its match and text as written).
ROLE_PATTERN = _role_file('vars', 'main.yml')['_server_bad_node_pattern']
DRIVER_HINT = [h for h in _role_file('defaults', 'main.yml')['server_hints'] if 'DRIVER' in h['match']][0]
DRIVER_FAIL = ('gpu-check: node1 GPU 7 NVIDIA H200 00000000:DB:00.0: 143156 of 143771 MiB free, ECC 0, Default, no process, '
               'driver 570.172.08: DRIVER\n'
               "gpu-check: DRIVER on node1: NVIDIA driver 570.172.08 is older than 580, the minimum for SGLang 0.5.21's image "
               '(CUDA 13)\n'
               'error: the NVIDIA driver of node1 does not meet server_gpu_min_driver (580); SGLang was not started (exit 78)\n')


@pytest.mark.parametrize('pattern', [BAD_PATTERN, ROLE_PATTERN], ids=['plain', 'role'])
def test_the_role_pattern_finds_a_node_at_fault_as_before(run, tmp_path, monkeypatch, pattern):
    """The role's pattern avoids a node whose GPU failed, as the plain one does (first the plain one, then the role's)."""
    ok, result, submitted, saved, _w = bad_node_run(run, tmp_path, monkeypatch, [
        ('node1', 'FAILED', 'x\n' + GPU_FAIL + 'error: the GPU check failed on node1\n'),
        ('node2', 'RUNNING', 'gpu-check: node2: 8 GPUs ok (0s)\n')], pattern=pattern)
    assert ok and len(submitted) == 2 and list(saved) == ['node1'], result
    assert saved['node1']['cause'] == 'GPU 3 (00000000:5D:00.0): 1 compute process (pid 4242 python3 70000 MiB)'


@pytest.mark.parametrize('log', [DRIVER_FAIL, GPU_FAIL.replace('node1', 'node2') + DRIVER_FAIL], ids=['one-node', 'mixed'])
def test_a_driver_too_old_is_not_the_nodes_fault_no_retry_no_listing(run, tmp_path, monkeypatch, log):
    """The GPU check's DRIVER verdict (roles/server/files/gpu_check.bash): the role's pattern does not match it, also
    when another node of a job of several nodes printed a FAILED verdict: one submission, nothing listed."""
    ok, result, submitted, saved, warnings = bad_node_run(run, tmp_path, monkeypatch, [('node1', 'FAILED', log)],
                                                          pattern=ROLE_PATTERN)
    assert not ok and len(submitted) == 1 and saved == {} and 'bad_nodes' not in result, result
    assert not any('submitting it again' in w for w in warnings)
    assert 'gpu-check: DRIVER on node1' in result['msg'] and 'bad-node list' not in result['msg']


def test_the_driver_hint_names_the_node_and_the_driver_found():
    """A hint's {GROUP}: what the pattern's named group matched (the driver found, the node)."""
    hints = ja.compile_hints([dict(DRIVER_HINT, job='glm-serve')])
    for driver in ('570.172.08', '"[N/A]"'):
        exc = WaitFailed('job 5 (glm-serve) ended FAILED', job={'job_id': '5', 'name': 'glm-serve', 'state': 'FAILED'},
                         log_tail=DRIVER_FAIL.replace('570.172.08 is older than 580', driver + ' is older').splitlines())
        found = ja.matching_hints(hints, exc)
        assert len(found) == 1 and found[0].startswith('nvidia-smi reports the NVIDIA driver on node1 as %s; ' % driver), found
        assert '{' + 'driver}' not in found[0] and '--constraint=FEATURE' in found[0]
    plain = WaitFailed('x', job={'job_id': '5', 'name': 'glm-serve', 'state': 'FAILED'}, log_tail=GPU_FAIL.splitlines())
    assert ja.matching_hints(hints, plain) == []


def test_a_failure_that_is_not_the_nodes_is_reported_as_it_is(run, tmp_path, monkeypatch):
    ok, result, submitted, saved, _w = bad_node_run(run, tmp_path, monkeypatch, [
        ('node1', 'FAILED', 'Traceback (most recent call last):\nValueError: bad config\n')])
    assert not ok and len(submitted) == 1 and saved == {} and 'bad_nodes' not in result
    assert 'ValueError: bad config' in result['msg']


# -- accounting (sacct): jobs slurmctld forgot ------------------------------------------------------------------

FIXTURES = os.path.join(os.path.dirname(__file__), '..', 'module_utils', 'fixtures')
SACCT = ['/usr/bin/sacct', '--parsable2', '--noheader', '-X']


def sacct_line(job_id, name, state, exit_code='0:0', elapsed='00:01:21', limit='00:01:00', end='2026-12-01T23:47:22',
               reason='None'):
    """One line of sacct --parsable2 --noheader -X in SACCT_FIELDS' order, as 24.11 prints it (see the fixtures)."""
    return '|'.join([job_id, name, 'glmuser', state, exit_code, reason, '0', '2026-12-01T23:46:01',
                     '2026-12-01T23:46:01', end, elapsed, limit, 'node1', 'compute-h100', '/home/glmuser/glm']) + '\n'


def test_info_finds_a_purged_job_id_in_accounting(run):
    slurm = Slurm().on(['/usr/bin/squeue', '--local'], out='').on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4124'], rc=1, err='slurm_load_jobs error: Invalid job id specified\n').on(
        SACCT, out=sacct_line('4124', 'glm-serve', 'TIMEOUT', elapsed='08:00:13', limit='08:00:00'))
    ok, result = run(slurm_job_info, {'job_ids': ['4124']}, slurm)
    assert ok and result['missing'] == []
    job = result['jobs'][0]
    assert job['state'] == 'TIMEOUT' and job['source'] == 'accounting' and job['elapsed'] == '08:00:13'
    assert job['end_time'] == '2026-12-01T23:47:22' and job['exit_code'] == '0:0' and job['live'] is False
    assert result['accounting_calls'] == 1
    assert slurm.argvs('sacct')[0][-1] == '--jobs=4124'


def test_a_field_the_release_lacks_is_left_out_and_asked_again(run):
    """Slurm 22.05's sacct has no Restarts field (it refuses the whole format, before it asks slurmdbd): the same
    question without that field; the refused attempt is not counted as a call to slurmdbd."""
    from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp
    full = '--format=' + ','.join(sp.SACCT_FIELDS)
    short = '--format=' + ','.join(f for f in sp.SACCT_FIELDS if f != 'Restarts')
    line = sacct_line('4124', 'glm-serve', 'FAILED', exit_code='3:0').split('|')
    del line[sp.SACCT_FIELDS.index('Restarts')]
    slurm = Slurm().on(['/usr/bin/squeue', '--local'], out='').on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4124'], rc=1, err='slurm_load_jobs error: Invalid job id specified\n').on(
        SACCT + [full], rc=1, err='sacct: error: Invalid field requested: "Restarts"\n').on(SACCT + [short], out='|'.join(line))
    ok, result = run(slurm_job_info, {'job_ids': ['4124']}, slurm)
    assert ok and result['missing'] == [] and result['accounting_calls'] == 1, result
    (job,) = result['jobs']
    assert job['state'] == 'FAILED' and job['exit_code'] == '3:0' and job['work_dir'] == '/home/glmuser/glm', job
    assert [a[4] for a in slurm.argvs('sacct')] == [full, short]


def test_info_without_accounting_works_as_before(run):
    slurm = Slurm().on(['/usr/bin/squeue', '--local'], out='').on(
        ['/usr/bin/scontrol', '--local', 'show', 'job', '4124'], rc=1, err='slurm_load_jobs error: Invalid job id specified\n')
    ok, result = run(slurm_job_info, {'job_ids': ['4124']}, slurm)     # sacct: "accounting storage is disabled"
    assert ok and result['missing'] == ['4124'] and result['jobs'] == []
    ok, result = run(slurm_job_info, {'job_ids': ['4124'], 'accounting': False}, slurm)
    assert ok and result['missing'] == ['4124'] and result['accounting_calls'] == 0


def test_info_by_name_adds_the_newest_ended_jobs_from_accounting_not_live_listings(run):
    lines = ''.join(sacct_line(str(4100 + i), 'glm-serve', 'CANCELLED by 1001') for i in range(7))
    slurm = Slurm().on(['/usr/bin/squeue', '--local'], out=squeue_row('4124', 'RUNNING', nodes='node1')).on(SACCT, out=lines)
    ok, result = run(slurm_job_info, {'name': 'glm-serve', 'details': False}, slurm)
    ids = [j['job_id'] for j in result['jobs']]
    assert ids == ['4102', '4103', '4104', '4105', '4106', '4124'], ids          # 5 from accounting, oldest first
    assert [j['source'] for j in result['jobs']] == ['accounting'] * 5 + ['slurmctld']
    assert result['jobs'][0]['state'] == 'CANCELLED'
    argv = slurm.argvs('sacct')[0]
    assert '--name=glm-serve' in argv and '--user=glmuser' in argv and '--starttime=now-7days' in argv
    ok, result = run(slurm_job_info, {'name': 'glm-serve', 'details': False, 'live': True}, slurm)
    assert [j['job_id'] for j in result['jobs']] == ['4124'] and result['accounting_calls'] == 0


def after_a_forgotten_job(tmp_path, monkeypatch):
    """A submit record naming job 4124, which slurmctld has forgotten (scontrol: Invalid job id); no live job of the
    name; sbatch gives 4125. Returns (script, Slurm mock, warnings the module gives)."""
    warnings = []
    monkeypatch.setattr(basic.AnsibleModule, 'warn', lambda self, msg: warnings.append(msg))
    script = tmp_path / 'serve.sbatch'
    script.write_text(u'#!/bin/bash\n#SBATCH --output=%x-%j.out\necho hi\n')
    (tmp_path / '.slurm_job-glmuser-glm-serve.json').write_text(u'{"job_id": "4124", "sha256": "x"}')
    slurm = Slurm().on(['/usr/bin/scontrol', '--local', 'show', 'job', '4124'], rc=1,
                       err='slurm_load_jobs error: Invalid job id specified\n').on(LOOKUP).on(['/usr/bin/sbatch'], out='4125\n')
    return script, slurm, warnings


@pytest.mark.parametrize('state, why', [
    ('TIMEOUT', 'TIMEOUT: it reached its time limit (--time 00:01:00) at 2026-12-01T23:47:22 after 00:01:21'),
    ('NODE_FAIL', 'NODE_FAIL: its node failed'),
    ('OUT_OF_MEMORY', 'OUT_OF_MEMORY: it used more host memory than it asked for (--mem)'),
    ('CANCELLED by 1001', 'CANCELLED: it was cancelled by uid 1001'),
])
def test_a_deploy_says_how_the_last_job_ended_before_it_submits(run, tmp_path, monkeypatch, state, why):
    """The submit record names job 4124; slurmctld forgot it (MinJobAge); sacct knows how it ended: the module says
    so in a warning and in ``previous`` before it submits the new job."""
    script, slurm, warnings = after_a_forgotten_job(tmp_path, monkeypatch)
    slurm.on(SACCT, out=sacct_line('4124', 'glm-serve', state))
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': str(script)}, slurm)
    assert ok and result['job_id'] == '4125'
    assert result['previous']['job_id'] == '4124' and result['previous']['source'] == 'accounting'
    assert result['previous']['why'].startswith(why), result['previous']['why']
    said = [w for w in warnings if 'the last glm-serve job, 4124, ended' in w]
    assert said and why in said[0] and said[0].endswith('a new one is submitted'), warnings
    assert len(slurm.argvs('sacct')) == 1 and len([a for a in slurm.argvs('scontrol') if '4124' in a]) == 1


def test_a_deploy_without_accounting_submits_as_before_and_says_nothing(run, tmp_path, monkeypatch):
    script, slurm, warnings = after_a_forgotten_job(tmp_path, monkeypatch)    # sacct: "accounting storage is disabled"
    ok, result = run(slurm_job, {'name': 'glm-serve', 'script': str(script)}, slurm)
    assert ok and result['job_id'] == '4125' and 'previous' not in result and warnings == []
