# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The verbs on a fake client: what each asks Slurm and returns (the module tests drive them through the modules)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.glm.serve.plugins.module_utils import job_actions as ja
from ansible_collections.glm.serve.plugins.module_utils.slurm_errors import ActionError

from ansible_collections.glm.serve.tests.unit.plugins.module_utils.conftest import row


@pytest.fixture
def script(tmp_path):
    path = tmp_path / 'job.sbatch'
    path.write_text(u'#!/bin/bash\n#SBATCH --output=%x-%j.out\nsrun serve\n')
    return str(path)


def test_present_submits_then_adopts_from_the_record(script, make_ctx, cli):
    result = ja.present(make_ctx(script=script, wait=False))
    assert result['submitted'] and result['changed'] and result['job_id'] == '5001' and result['state'] == 'PENDING'
    assert result['output_path'].endswith('srv-5001.out')                      # from the script, no call
    assert cli.names() == ['squeue', 'submit']
    cli.jobs['5001'] = row(5001, state='PENDING', work_dir=result['output_path'].rsplit('/', 1)[0])
    cli.calls = []
    again = ja.present(make_ctx(script=script, wait=False))
    assert not again['changed'] and again['job_id'] == '5001' and cli.names() == ['show_job']   # one lookup


def test_present_fails_with_what_it_had_found(tmp_path, make_ctx):
    with pytest.raises(ja.ActionError) as caught:
        ja.present(make_ctx(script=str(tmp_path / 'no' / 's'), script_content='x', wait=False))
    assert caught.value.result['script_written'] is True and ja.fail_kwargs(caught.value)['msg'].startswith('the folder')


def test_a_refused_change_says_what_to_do_from_the_hints(script, make_ctx, cli):
    cli.jobs = {'9': row(9, script='#!/bin/bash\nsrun old\n')}      # the script Slurm stored for job 9
    hints = [{'match': 'change_strategy=fail', 'hint': 'deploy with -e server_allow_outage=true'}]
    with pytest.raises(ja.ActionError) as caught:
        ja.present(make_ctx(script=script, wait=False, recreate_on_change=True, change_strategy='fail', hints=hints))
    msg = ja.fail_kwargs(caught.value)['msg']
    assert 'differs from the one job 9 (srv) runs' in msg and msg.endswith('What to do: deploy with -e server_allow_outage=true.')
    assert caught.value.result['hints'] == ['deploy with -e server_allow_outage=true'] and 'submit' not in cli.names()


def test_absent_cancels_the_live_jobs(make_ctx, cli):
    cli.jobs = {'7': row(7), '6': row(6, state='COMPLETED')}
    result = ja.absent(make_ctx(wait=False))
    assert result['changed'] and result['cancelled'] == ['7'] and ('cancel', ['7']) in cli.calls
    assert ja.absent(make_ctx(job_id='99', wait=False))['state'] == 'PURGED'


def test_absent_with_a_signal_signals_the_running_script_and_cancels_a_pending_job(make_ctx, cli):
    # a replaced replica (change_strategy=start_first): its batch script gets USR1 and drains itself; its successor,
    # pending, is cancelled
    cli.jobs = {'7': row(7), '8': row(8, state='PENDING')}
    result = ja.absent(make_ctx(signal='USR1', wait=False))
    assert result['signalled'] == ['7'] and result['cancelled'] == ['8']
    assert ('signal_batch', ['7'], 'USR1') in cli.calls and ('cancel', ['8']) in cli.calls
    cli.calls[:] = []
    result = ja.absent(make_ctx(job_id='7', signal='USR1', wait=False, check_mode=True))
    assert result['changed'] and result['signalled'] == ['7'] and result['cancelled'] == [] and cli.names() == ['show_job']
    with pytest.raises(ActionError, match='signal must be a signal name or number'):
        ja.absent(make_ctx(job_id='7', signal='USR1; reboot', wait=False))


def test_info_lists_slurmctld_and_accounting_oldest_first(make_ctx, cli):
    cli.jobs = {'7': row(7, output_path='/o')}
    cli.accounting = [row(3, state='COMPLETED', source='accounting'), row(7, state='RUNNING')]
    result = ja.info(make_ctx(user='u'))
    assert [(j['job_id'], j['source'], j['live']) for j in result['jobs']] == [('3', 'accounting', False), ('7', 'slurmctld', True)]
    assert result['missing'] == [] and cli.names() == ['squeue', 'sacct']


def test_info_names_ids_no_one_knows(make_ctx, cli):
    result = ja.info(make_ctx(job_ids=['9'], accounting=False))
    assert result['jobs'] == [] and result['missing'] == ['9'] and cli.names() == ['squeue', 'show_job']
    with pytest.raises(ja.ActionError, match='probe_match'):
        ja.info(make_ctx(probe_match='('))


def test_the_names_other_files_import_stay_here():
    for name in ('Context', 'present', 'absent', 'info', 'fail_kwargs', 'ActionError', 'probe_options',
                 'bad_nodes_options', 'compile_hints', 'matching_hints', 'SubmitLock', 'lock_path', 'read_bad_nodes',
                 'script_digest', 'script_output_pattern', 'current_user', 'fcntl'):
        assert hasattr(ja, name), name
