# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The jobs of a wait (wait_jobs): what a round asks for (Target.ids_to_ask), the rows it reads (JobBook), and a job
that ended and left slurmctld between two rounds, asked of accounting once before it is called lost."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.glm.serve.plugins.module_utils import job_waiter as jw
from ansible_collections.glm.serve.plugins.module_utils.slurm_cli import SlurmAccountingUnavailable
from ansible_collections.glm.serve.plugins.module_utils.wait_jobs import JobBook, Target

from ansible_collections.glm.serve.tests.unit.plugins.module_utils.test_job_waiter import FakeCli, FakeClock, FakeFiles, job


class AccountingCli(FakeCli):
    """FakeCli with sacct: ``accounting`` is its rows, or an exception to raise (no slurmdbd)."""

    def __init__(self, clock, timeline, accounting=()):
        super(AccountingCli, self).__init__(clock, timeline)
        self.accounting = accounting
        self.sacct_calls = []

    def sacct(self, job_ids=None, **query):
        self.sacct_calls.append((self.clock.t, tuple(job_ids or ())))
        if isinstance(self.accounting, Exception):
            raise self.accounting
        return [dict(r) for r in self.accounting if r['job_id'] in (job_ids or ())]


def test_a_pending_child_asks_for_its_pending_parent_alone_then_for_itself_every_third_round():
    book = JobBook(None, FakeFiles(FakeClock()))
    book.merge(job('1', 'PENDING', reason='Resources', name='dl'))
    book.merge(job('2', 'PENDING', reason='Dependency'))
    target = Target('2', parents=['1'])
    assert [target.ids_to_ask(book) for unused_round in range(4)] == [['1'], ['1'], ['2', '1'], ['1']]
    target.own_signal = True
    assert target.ids_to_ask(book) == ['2', '1']


def test_a_pending_child_of_running_parents_is_asked_for_alone():
    """Its row shows a parent's end (it starts, or can no longer run): one call where the parents too make more."""
    book = JobBook(None, FakeFiles(FakeClock()))
    book.merge(job('1', 'RUNNING', name='dl'))
    book.merge(job('3', 'RUNNING', name='other'))
    book.merge(job('2', 'PENDING', reason='Dependency'))
    target = Target('2', parents=['1', '3'])
    assert [target.ids_to_ask(book) for unused_round in range(4)] == [['2']] * 4
    target.parent_changed = True                                            # a parent's file spoke: its row too
    assert target.ids_to_ask(book) == ['2', '1', '3'] and target.ids_to_ask(book) == ['2']
    book.merge(job('3', 'PENDING', reason='Priority', name='other'))        # one parent not started: asked
    assert target.ids_to_ask(book) == ['1', '3']


def test_held_needs_a_dependency_on_live_parents_and_files_that_show_their_end():
    book = JobBook(None, FakeFiles(FakeClock()))
    book.merge(job('1', 'RUNNING', name='dl'))
    book.merge(job('2', 'PENDING', reason='Dependency'))
    target = Target('2', parents=['1'])

    def every(unused_job_id, unused_running):
        return True
    assert book.held([target], every)
    assert not book.held([], every)
    assert not book.held([target], lambda job_id, running: not running)     # the running parent's file is not there
    assert not book.held([target], lambda job_id, running: job_id != '2')   # the job's own path unknown
    book.merge(job('2', 'PENDING', reason='Resources'))
    assert not book.held([target], every)                                   # no longer held by its parent
    book.merge(job('2', 'PENDING', reason='Dependency'))
    book.merge(job('1', 'COMPLETED', name='dl'))
    assert not book.held([target], every)                                   # its parent ended


def test_a_job_released_from_its_dependency_names_its_parents_to_read_again():
    book = JobBook(None, FakeFiles(FakeClock()))
    book.merge(job('1', 'RUNNING', name='dl'))
    book.merge(job('4', 'COMPLETED', name='done'))
    book.merge(job('2', 'RUNNING', nodes='n1'))
    target = Target('2', parents=['1', '4', '9'])                           # 9: never seen, 4: final already
    assert book.released(target, ('PENDING', 'Dependency')) == ['1']
    assert book.released(target, ('PENDING', 'Priority')) == []             # it was not held
    assert book.released(target, None) == []
    book.merge(job('2', 'PENDING', reason='Dependency'))
    assert book.released(target, ('PENDING', 'Dependency')) == []           # still held


def test_the_book_merges_rows_learns_parents_and_asks_an_output_path_once():
    clock = FakeClock()
    cli = FakeCli(clock, {'1': [(0, job('1', 'FAILED', name='dl'))], '3': [(0, job('3', 'RUNNING', output_path='/w/%x-%j.out'))]})
    merged = []
    book = JobBook(cli, FakeFiles(clock), on_merge=merged.append)
    book.merge(job('2', 'PENDING', reason='Dependency', nodes='n1'))
    book.merge({'job_id': '2', 'state': 'CANCELLED', 'reason': None, 'nodes': None, 'name': None})
    assert book.jobs['2']['reason'] is None and book.jobs['2']['nodes'] is None and book.jobs['2']['name'] == 'job2'
    book.learn(['1', '2'])
    assert book.state('1') == 'FAILED' and cli.calls == [(0, 'show', ('1',))]
    assert book.output_path('3') == '/w/job3-3.out' and book.output_path('3') == '/w/job3-3.out'
    assert len(cli.calls) == 2 and len(merged) == 4
    assert [r['job_id'] for r in book.chain(Target('2', parents=['1', '9']))] == ['1', '2']


def _gone_between_rounds(rows, success=('COMPLETED',), **kwargs):
    """Job 2 RUNNING, then it ends and slurmctld forgets it (MinJobAge) before the next round sees it."""
    clock = FakeClock()
    cli = AccountingCli(clock, {'2': [(0, job('2', 'RUNNING', nodes='node1')), (30, None)]}, rows)
    waiter = jw.JobWaiter(cli, jw.Target('2', success=success), clock=clock, files=FakeFiles(clock), **kwargs)
    return waiter, cli


def test_a_job_gone_between_two_rounds_is_asked_of_accounting_once_and_succeeds():
    waiter, cli = _gone_between_rounds([dict(job('2', 'COMPLETED', nodes='node1'), source='accounting')])
    result = waiter.wait()
    assert result['job']['state'] == 'COMPLETED' and result['job']['source'] == 'accounting'
    assert len(cli.sacct_calls) == 1 and cli.sacct_calls[0][1] == ('2',)
    assert any('accounting says job2 2 COMPLETED' in e for e in waiter.events)


def test_a_job_gone_that_accounting_says_failed_fails_with_its_state():
    waiter, cli = _gone_between_rounds([job('2', 'FAILED', reason='NonZeroExitCode', exit_code='3:0')])
    with pytest.raises(jw.WaitFailed) as err:
        waiter.wait()
    assert err.value.kind == 'ended' and 'ended FAILED (reason NonZeroExitCode, exit code 3:0)' in err.value.msg
    assert len(cli.sacct_calls) == 1


@pytest.mark.parametrize('accounting', [[], SlurmAccountingUnavailable('Slurm accounting storage is disabled'),
                                        [job('2', 'RUNNING')]])
def test_a_job_gone_that_accounting_cannot_end_is_lost_as_before(accounting):
    waiter, cli = _gone_between_rounds(accounting)
    with pytest.raises(jw.WaitFailed) as err:
        waiter.wait()
    assert err.value.kind == 'purged' and 'last seen RUNNING, is no longer known to Slurm' in err.value.msg
    assert len(cli.sacct_calls) == 1


def test_without_accounting_or_in_a_teardown_accounting_is_not_asked():
    waiter, cli = _gone_between_rounds([job('2', 'COMPLETED')], accounting=False)
    with pytest.raises(jw.WaitFailed):
        waiter.wait()
    waiter, gone_cli = _gone_between_rounds([job('2', 'COMPLETED')], until_gone=True)
    assert waiter.wait()['job']['state'] == 'PURGED'
    assert cli.sacct_calls == [] and gone_cli.sacct_calls == []
