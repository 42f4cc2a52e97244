# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Accounting: used when there, done without when not; how the last job of a name ended."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.glm.serve.plugins.module_utils import accounting as ac
from ansible_collections.glm.serve.plugins.module_utils.slurm_cli import SlurmAccountingUnavailable
from ansible_collections.glm.serve.plugins.module_utils.submit_record import write_record

from ansible_collections.glm.serve.tests.unit.plugins.module_utils.conftest import row


def test_accounting_off_asks_nothing(cli):
    assert ac.Accounting(cli, enabled=False).rows(job_ids=['1']) == [] and cli.calls == []


def test_accounting_unavailable_is_said_once(cli):
    logged = []

    def sacct(**query):
        raise SlurmAccountingUnavailable('slurmdbd is not configured')
    cli.sacct = sacct
    accounting = ac.Accounting(cli, log=logged.append)
    assert accounting.rows(name='x') == [] and accounting.rows(name='y') == []
    assert logged == ['accounting not used: slurmdbd is not configured']


def test_why_ended():
    assert ac.why_ended(row(1, state='TIMEOUT', time_limit='8:00:00', end_time='2026-12-01T18:00:00', elapsed='8:00:00',
                            exit_code='0:0', reason='TimeLimit')) == (
        'TIMEOUT: it reached its time limit (--time 8:00:00) (reason TimeLimit) at 2026-12-01T18:00:00 after 8:00:00, '
        'exit code 0:0')
    assert ac.why_ended(row(1, state='FAILED', exit_code='3:0', nodes='n1', reason='NonZeroExitCode')) == (
        'FAILED: it exited with code 3, on n1')
    assert ac.why_ended(row(1, state='CANCELLED', cancelled_by='1000')).startswith('CANCELLED: it was cancelled by uid 1000')
    assert ac.why_ended({}) == 'UNKNOWN'


def test_report_previous_uses_the_lookup_already_made(tmp_path, make_ctx, cli):
    ctx = make_ctx(chdir=str(tmp_path))
    write_record(ctx, 30, 'abc')
    previous = ac.report_previous(ctx, ('30', row(30, state='FAILED', exit_code='1:0')))
    assert cli.calls == [] and previous['job_id'] == '30' and previous['source'] == 'slurmctld'
    assert previous['why'] == 'FAILED: it exited with code 1'
    assert ctx.warnings == ['the last srv job, 30, ended FAILED: it exited with code 1; a new one is submitted']


def test_report_previous_asks_accounting_when_slurmctld_forgot(tmp_path, make_ctx, cli):
    ctx = make_ctx(chdir=str(tmp_path))
    write_record(ctx, 30, 'abc')
    cli.accounting = [row(30, state='COMPLETED', source='accounting')]
    previous = ac.report_previous(ctx)
    assert cli.names() == ['show_job', 'sacct'] and previous['source'] == 'accounting' and ctx.warnings == []


def test_nothing_to_report(tmp_path, make_ctx, cli):
    ctx = make_ctx(chdir=str(tmp_path))
    assert ac.report_previous(ctx) is None and cli.calls == []                   # no record
    write_record(ctx, 30, 'abc')
    assert ac.report_previous(ctx, ('30', row(30, state='RUNNING'))) is None      # not ended
    assert ac.report_previous(ctx, ('30', row(30, name='x', state='FAILED'))) is None
