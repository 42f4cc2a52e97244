# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The act of state=present: the script written, the live job adopted, or a job submitted (once)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time

import pytest

from ansible_collections.glm.serve.plugins.module_utils import job_submit as js
from ansible_collections.glm.serve.plugins.module_utils.slurm_cli import SlurmTransientError
from ansible_collections.glm.serve.plugins.module_utils.slurm_errors import ActionError
from ansible_collections.glm.serve.plugins.module_utils.submit_record import record_id, write_record

from ansible_collections.glm.serve.tests.unit.plugins.module_utils.conftest import row

SCRIPT = '#!/bin/bash\nsrun serve\n'


@pytest.fixture
def script(tmp_path):
    path = tmp_path / 'job.sbatch'
    path.write_text(SCRIPT)
    return str(path)


def test_parse_umask():
    assert js.parse_umask('0077') == 0o77
    with pytest.raises(ActionError, match='umask must be an octal string'):
        js.parse_umask('rw')


def test_write_script_writes_0600_once(tmp_path, make_ctx):
    path = str(tmp_path / 'new.sbatch')
    assert js.write_script(make_ctx(script=path, script_content=SCRIPT, check_mode=True)) == {
        'changed': True, 'script_written': True}
    assert not os.path.exists(path)                                  # check mode writes nothing
    assert js.write_script(make_ctx(script=path, script_content=SCRIPT))['script_written'] is True
    assert open(path).read() == SCRIPT and oct(os.stat(path).st_mode & 0o777) == '0o600'
    assert js.write_script(make_ctx(script=path, script_content=SCRIPT)) == {}
    assert js.write_script(make_ctx(script=path)) == {}


def test_write_script_into_a_missing_folder_fails_with_what_it_found(tmp_path, make_ctx):
    with pytest.raises(ActionError, match='does not exist on the host') as caught:
        js.write_script(make_ctx(script=str(tmp_path / 'no' / 's'), script_content=SCRIPT))
    assert caught.value.fields == {'changed': True, 'script_written': True}
    with pytest.raises(ActionError, match='script_content needs script'):
        js.write_script(make_ctx(script_content=SCRIPT))


def test_sbatch_rides_out_an_outage_and_records_the_job(script, make_ctx, cli, clock):
    errors = [SlurmTransientError('busy'), SlurmTransientError('busy')]
    submit = cli.submit

    def flaky(argv, chdir, umask):
        if errors:
            raise errors.pop()
        return submit(argv, chdir, umask)
    cli.submit = flaky
    ctx = make_ctx(script=script)
    job, fields = js.submit(ctx, ['3'])
    assert job['job_id'] == '5001' and job['restarts'] == '0' and fields['cluster'] is None
    assert fields['cancelled'] == ['3'] and fields['submitted'] and fields['sbatch_cmd'][-1] == script
    assert clock.sleeps == [1.0, 2.0] and cli.names() == ['cancel', 'squeue', 'squeue', 'submit']
    assert record_id(ctx) == '5001'


def test_an_sbatch_that_lost_its_answer_adopts_the_job_that_appeared(script, make_ctx, cli, clock):
    def lost(argv, chdir, umask):
        cli.jobs['77'] = row(77, state='PENDING')
        raise SlurmTransientError('Socket timed out on send/recv operation')
    cli.submit = lost
    ctx = make_ctx(script=script)
    job, fields = js.submit(ctx, [])
    assert job['job_id'] == '77' and fields['cluster'] is None and clock.sleeps == [1.0]
    assert ctx.warnings == ['sbatch lost its answer; job 77 of that name has appeared and was adopted']
    assert record_id(ctx) is None


def test_sbatch_gives_up_after_retry_timeout(script, make_ctx, cli, clock):
    def down(argv, chdir, umask):
        raise SlurmTransientError('down')
    cli.submit = down
    with pytest.raises(SlurmTransientError) as caught:
        js.submit(make_ctx(script=script, retry_timeout=20), [])
    assert clock.sleeps == [1, 2, 4, 8, 16] and caught.value.fields['sbatch_cmd'][-1] == script


def test_submit_in_check_mode_only_says_it(script, make_ctx, cli):
    job, fields = js.submit(make_ctx(script=script, check_mode=True), ['1'])
    assert job == {'job_id': None, 'name': 'srv', 'user': 'u'} and fields['changed'] and 'submit' not in cli.names()


def test_find_or_submit_adopts_the_live_job(script, make_ctx, cli):
    cli.jobs = {'9': row(9), '8': row(8)}
    ctx = make_ctx(script=script)
    job, fields = js.find_or_submit(ctx)
    assert job['job_id'] == '9' and fields == {} and 'submit' not in cli.names()
    assert ctx.warnings[0].startswith('2 live jobs are named srv for user u (9, 8)')


def test_find_or_submit_adopts_the_serving_job_not_its_successor(script, make_ctx, cli):
    # service_until: job 9 serves, 12 waits on after:9+58 (its successor), 13 on after:12 (the one after): 9 is the job
    cli.jobs = {'9': row(9), '12': row(12, state='PENDING', reason='Dependency', dependency='after:9+58(unfulfilled)'),
                '13': row(13, state='PENDING', reason='Dependency', dependency='after:12+58(unfulfilled)')}
    ctx = make_ctx(script=script)
    job, fields = js.find_or_submit(ctx)
    assert job['job_id'] == '9' and fields == {} and 'submit' not in cli.names() and ctx.warnings == []
    # the successor running, loading: the newest that is no one's successor
    cli.jobs = {'9': row(9), '12': row(12)}
    job, _fields = js.find_or_submit(make_ctx(script=script))
    assert job['job_id'] == '12'
    # afterok is a chain, not a successor: the newest, with the warning, as before
    cli.jobs = {'9': row(9), '12': row(12, state='PENDING', reason='Dependency', dependency='afterok:9(unfulfilled)')}
    ctx = make_ctx(script=script)
    job, _fields = js.find_or_submit(ctx)
    assert job['job_id'] == '12' and ctx.warnings[0].startswith('2 live jobs are named srv')


def test_find_or_submit_replaces_a_changed_job(script, make_ctx, cli):
    ctx = make_ctx(script=script, recreate_on_change=True)
    write_record(ctx, 9, 'old digest')
    cli.jobs = {'9': row(9)}
    job, fields = js.find_or_submit(ctx)
    assert job['job_id'] == '5001' and fields['script_changed'] is True and fields['cancelled'] == ['9']
    assert 'previous' not in fields                                # the live job is replaced, not reported
    assert cli.names() == ['show_job', 'cancel', 'submit']         # the record answered for the script


def test_start_first_submits_beside_the_live_jobs_and_names_them(script, make_ctx, cli):
    # a rolling change: job 9 serves with the old script, its successor 12 waits on after:9+58; the new job starts
    # beside them (nothing cancelled) and both are returned as the ones it replaces
    ctx = make_ctx(script=script, recreate_on_change=True, change_strategy='start_first')
    write_record(ctx, 9, 'old digest')
    cli.jobs = {'9': row(9), '12': row(12, state='PENDING', reason='Dependency', dependency='after:9+58(unfulfilled)')}
    job, fields = js.find_or_submit(ctx)
    assert job['job_id'] == '5001' and fields['script_changed'] is True and fields['cancelled'] == []
    assert sorted(fields['replacing']) == ['12', '9']
    assert 'cancel' not in cli.names() and ctx.warnings == []
    # the rerun of an interrupted deploy: 5001 runs the script as it is now, adopted; 9 and 12 still to end, but not
    # 5002, 5001's own successor
    cli.jobs.update({'5001': row(5001), '5002': row(5002, state='PENDING', reason='Dependency',
                                                    dependency='after:5001+58(unfulfilled)')})
    ctx = make_ctx(script=script, recreate_on_change=True, change_strategy='start_first')
    job, fields = js.find_or_submit(ctx)
    assert job['job_id'] == '5001' and sorted(fields['replacing']) == ['12', '9'] and cli.names().count('submit') == 1
    assert ctx.warnings == []                   # two live jobs of the name, but one replaces the other: no warning
    # all in place: nothing to replace, nothing returned
    cli.jobs = {'5001': row(5001)}
    job, fields = js.find_or_submit(make_ctx(script=script, recreate_on_change=True, change_strategy='start_first'))
    assert job['job_id'] == '5001' and fields == {}


def test_start_first_with_a_duplicate_check_keeps_the_jobs_it_replaces(script, make_ctx, cli):
    ctx = make_ctx(script=script, recreate_on_change=True, change_strategy='start_first', duplicate_check='always')
    write_record(ctx, 9, 'old digest')
    cli.jobs = {'9': row(9)}
    job, fields = js.find_or_submit(ctx)
    # job 9 is older than ours, but it is the one being replaced, not a concurrent run's: ours is kept
    assert job['job_id'] == '5001' and fields['replacing'] == ['9'] and 'cancel' not in cli.names()


def test_fail_strategy_refuses_a_change_before_anything_is_done(script, make_ctx, cli):
    ctx = make_ctx(script=script, recreate_on_change=True, change_strategy='fail')
    write_record(ctx, 9, 'old digest')
    cli.jobs = {'9': row(9)}
    with pytest.raises(ActionError, match=r'differs from the one job 9 \(srv\) runs.*nothing was cancelled or submitted'):
        js.find_or_submit(ctx)
    assert 'cancel' not in cli.names() and 'submit' not in cli.names()
    # the same script: adopted, as ever
    write_record(ctx, 9, js.script_digest(text=SCRIPT))
    assert js.find_or_submit(make_ctx(script=script, recreate_on_change=True, change_strategy='fail'))[0]['job_id'] == '9'


def test_find_or_submit_cancels_a_job_that_can_never_run(script, make_ctx, cli):
    cli.jobs = {'9': row(9), '4': row(4, state='PENDING', reason='DependencyNeverSatisfied')}
    job, fields = js.find_or_submit(make_ctx(script=script, recreate=True))
    assert job['job_id'] == '5001' and fields['cancelled'] == ['4', '9']


def test_find_or_submit_reports_how_the_last_job_ended(script, make_ctx, cli):
    ctx = make_ctx(script=script)
    write_record(ctx, 9, 'abc')
    cli.jobs = {'9': row(9, state='TIMEOUT')}
    job, fields = js.find_or_submit(ctx)
    assert fields['previous']['state'] == 'TIMEOUT' and cli.names() == ['show_job', 'squeue', 'submit']
    assert js.find_or_submit(make_ctx(script=script), report=False)[1].get('previous') is None


def test_keep_oldest_cancels_ours_when_another_run_was_first(make_ctx, cli):
    cli.jobs = {'20': row(20, state='PENDING'), '21': row(21, state='PENDING')}
    ctx = make_ctx()
    job, fields = js.keep_oldest(ctx, row(21), [], ['3'])
    assert job['job_id'] == '20' and fields == {'cancelled': ['3', '21'], 'submitted': False, 'cluster': None}
    assert ('cancel', ['21']) in cli.calls
    assert js.keep_oldest(ctx, row(20), [], []) == (row(20), {})             # ours is the oldest


def _slurm_time(seconds):
    return time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(seconds))


def test_a_requeued_job_is_started_now(make_ctx, cli, clock):
    """Requeued long ago (its earlier run stopped for longer than KillWait + 5 s): its begin time is set to now, at
    once, without asking the cluster's KillWait."""
    cli.jobs = {'5': row(5, state='PENDING', reason='BeginTime', restarts='1', start_time='T',
                         submit_time=_slurm_time(time.time() - 600))}
    job, fields = js.start_requeued_now(make_ctx(), row(5, state='PENDING', reason='BeginTime'))
    assert fields == {'changed': True, 'started_now': {'job_id': '5', 'was': 'T', 'restarts': 1, 'waited': 0}}
    assert ('start_now', '5') in cli.calls and ('kill_wait',) not in cli.calls and clock.sleeps in ([], [0])
    cli.jobs['5']['restarts'] = '0'                                              # its user's --begin: left alone
    assert js.start_requeued_now(make_ctx(), row(5))[1] == {}


@pytest.mark.parametrize('kill_wait, settle', [(5, 10), (None, 35)])
def test_a_job_requeued_just_now_starts_once_its_earlier_run_is_stopped(make_ctx, cli, clock, kill_wait, settle):
    """Requeued a second ago: slurmd would refuse a second copy while the earlier run's steps live on the node, which
    may be chosen again; the module waits until the requeue + KillWait (30 s when unreadable) + 5 s, asks again
    whether the job still waits, then sets the begin time to now (a scheduling pass at once; a begin time ahead
    would wait for the next pass)."""
    requeued = int(time.time()) - 1
    cli.kill_wait_seconds = kill_wait
    cli.jobs = {'5': row(5, state='PENDING', reason='BeginTime', restarts='1', start_time=_slurm_time(requeued + 121),
                         submit_time=_slurm_time(requeued))}
    _job, fields = js.start_requeued_now(make_ctx(), row(5, state='PENDING', reason='BeginTime'))
    assert settle - 2 <= fields['started_now']['waited'] <= settle, fields
    assert clock.sleeps == [fields['started_now']['waited']]
    assert [c for c in cli.calls if c[0] in ('kill_wait', 'show_job', 'start_now')][-2:] == [('show_job', '5'), ('start_now', '5')]


def test_a_requeued_job_left_to_slurm_when_it_starts_meanwhile_or_its_begin_time_comes_first(make_ctx, cli, clock):
    requeued = int(time.time()) - 1
    held = row(5, state='PENDING', reason='BeginTime', restarts='1', start_time=_slurm_time(requeued + 121),
               submit_time=_slurm_time(requeued))
    # its begin time (Slurm's cred_expire + 1 on this site: 8 s) comes before KillWait + 5 s: left alone, no wait
    cli.jobs = {'5': dict(held, start_time=_slurm_time(requeued + 8))}
    assert js.start_requeued_now(make_ctx(), row(5))[1] == {} and clock.sleeps == []
    # it started while the module waited: no update, nothing said
    cli.jobs = {'5': dict(held)}
    ctx = make_ctx()
    original = cli.show_job
    seen = []

    def show_job(job_id):
        seen.append(job_id)
        return original(job_id) if len(seen) == 1 else dict(held, state='RUNNING', reason='None')
    cli.show_job = show_job
    assert js.start_requeued_now(ctx, row(5))[1] == {} and ('start_now', '5') not in cli.calls
    # no longer pending when the update came (Slurm's ESLURM_JOB_NOT_PENDING): nothing changed, no failure
    cli.show_job = original
    cli.start_now_answer = False
    assert js.start_requeued_now(make_ctx(), row(5))[1] == {}


def test_settle_delay():
    assert js.settle_delay(None, None, 35, 1000.0) == 0
    assert js.settle_delay('garbage', None, 35, 1000.0) == 0
    moment = time.mktime(time.strptime('2026-12-05T16:51:36', '%Y-%m-%dT%H:%M:%S'))
    assert js.settle_delay('2026-12-05T16:51:36', '2026-12-05T16:53:37', 35, moment + 2) == 33
    assert js.settle_delay('2026-12-05T16:51:36', '2026-12-05T16:53:37', 35, moment + 1.5) == 34
    assert js.settle_delay('2026-12-05T16:51:36', '2026-12-05T16:53:37', 35, moment + 35) == 0
    assert js.settle_delay('2026-12-05T16:51:36', 'Unknown', 35, moment - 3600) == 35        # a misread moment: at most 35
    assert js.settle_delay('2026-12-05T16:51:36', '2026-12-05T16:51:50', 35, moment + 2) is None   # Slurm's comes first


def test_apply_end_time(make_ctx, cli):
    ctx = make_ctx(end_time='2026-12-01 18:00')
    fields = js.apply_end_time(ctx, row(5, end_time='2026-12-01T20:00:00'))
    assert fields == {'changed': True, 'end_time_changed': {'before': '2026-12-01T20:00:00', 'after': '2026-12-01T18:00:00'}}
    assert cli.calls == [('update_end_time', '5', '2026-12-01T18:00:00')]
    assert js.apply_end_time(ctx, row(5, end_time='2026-12-01T18:00:00')) == {}
    assert js.apply_end_time(ctx, row(5, state='PENDING')) == {} and 'end_time applies to a RUNNING job' in ctx.warnings[0]


def test_dependency_ids():
    assert js.dependency_ids({'dependency': [{'job_ids': ['4;c', 5]}, {}]}) == ['4', '5']
