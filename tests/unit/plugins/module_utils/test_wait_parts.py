# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The waiter's parts on their own: the poll schedule, the cheap signals, the rules, failures as data; and the
two seams of the loop (several jobs at once, the progress callback)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.glm.serve.plugins.module_utils import job_waiter as jw
from ansible_collections.glm.serve.plugins.module_utils import model_probe as mp
from ansible_collections.glm.serve.plugins.module_utils import wait_rules as wr
from ansible_collections.glm.serve.plugins.module_utils.wait_policy import PollSchedule, RoundOutcome, WaitPolicy
from ansible_collections.glm.serve.plugins.module_utils.wait_signals import OutputSignals, PortSignal, Signal

from ansible_collections.glm.serve.tests.unit.plugins.module_utils.test_job_waiter import FakeCli, FakeClock, FakeFiles, FakeProbe, job


# -- the schedule ----------------------------------------------------------------------------------


def rounds(schedule, outcomes, start=0.0):
    """Run rounds at the times the schedule asks for; returns those times."""
    times = []
    now = start
    for outcome in outcomes:
        now = schedule.next_round
        times.append(now)
        schedule.done(now, outcome)
    return times


def test_schedule_doubles_up_to_the_cap():
    schedule = PollSchedule(WaitPolicy(cap=10), first_round=0)
    # the first round sees the job for the first time (a change), then nothing new
    assert rounds(schedule, [RoundOutcome(target_changed=True)] + [RoundOutcome()] * 6) == [0, 1, 3, 7, 15, 25, 35]


def test_schedule_restarts_at_base_on_a_change_of_the_job_and_steps_back_by_half_once_it_runs():
    schedule = PollSchedule(WaitPolicy(cap=60), first_round=0)
    rounds(schedule, [RoundOutcome()] * 6)                        # interval now 60
    schedule.done(100, RoundOutcome(target_changed=True, target_running=True))
    assert schedule.next_round == 130                              # half of 60
    schedule.done(130, RoundOutcome(target_changed=True, target_running=True))
    assert schedule.next_round == 145
    schedule.done(145, RoundOutcome(target_changed=True, target_running=True))
    schedule.done(152.5, RoundOutcome(target_changed=True, target_running=True))
    assert schedule.next_round == 152.5 + 4                        # never below 4 x base
    schedule.done(200, RoundOutcome(target_changed=True))          # PENDING again, say: from the start
    assert schedule.next_round == 201


def test_schedule_a_parent_that_ended_brings_the_next_round_a_gap_later():
    schedule = PollSchedule(WaitPolicy(cap=60, min_gap=1), first_round=0)
    rounds(schedule, [RoundOutcome()] * 5)
    schedule.done(50, RoundOutcome(changed=True, parent_ended=True))
    assert schedule.next_round == 51
    assert schedule.interval == 32                                 # the ramp itself is left as it was


def test_schedule_signals_are_spaced_by_a_gap_that_doubles_while_nothing_changes():
    schedule = PollSchedule(WaitPolicy(cap=8, min_gap=1), first_round=0)
    schedule.done(0, RoundOutcome())
    schedule.signal(0.2)
    assert schedule.trigger_at == 1 and not schedule.due(0.5) and schedule.due(1)
    schedule.signal(0.7)                                           # one trigger per round
    assert schedule.trigger_at == 1
    gaps = []
    now = 1
    for dummy in range(6):
        schedule.done(now, RoundOutcome())                         # a chatty log, nothing changes
        schedule.signal(now)
        gaps.append(schedule.trigger_at - now)
        now = schedule.trigger_at
    assert gaps == [2, 4, 8, 8, 8, 8]
    schedule.done(now, RoundOutcome(changed=True))                 # a change resets the gap
    schedule.signal(now)
    assert schedule.trigger_at - now == 1


def test_schedule_wakes_at_the_earliest_of_round_trigger_deadline_and_others():
    schedule = PollSchedule(WaitPolicy(), first_round=10)
    assert schedule.wake(0, deadline=20) == 10
    assert schedule.wake(0, deadline=5) == 5
    assert schedule.wake(0, deadline=20, other=[3, None]) == 3
    schedule.signal(2)
    assert schedule.wake(0, deadline=20) == 2


def test_policy_cap_is_at_least_the_base():
    assert WaitPolicy(cap=0).cap == 1.0
    assert 'cap=60' in repr(WaitPolicy())


# -- the cheap signals -----------------------------------------------------------------------------


def test_output_signals_report_appearance_and_error_lines_redacted():
    clock = FakeClock()
    files = FakeFiles(clock, {'/w/a.out': [(1, 'start\n'), (2, "start\nError: key='sekrit' refused\n")]})
    outputs = OutputSignals(files, secrets=['sekrit'])
    outputs.watch('1', '/w/a.out')
    outputs.watch('2', None)
    assert outputs.check(['1', '2']) == []
    clock.t = 1
    found = outputs.check(['1', '2'])
    assert [(s.kind, s.job_id) for s in found] == [(Signal.APPEARED, '1')]
    clock.t = 2
    found = outputs.check(['1'])
    assert [(s.kind, s.text) for s in found] == [(Signal.ERROR_LINE, "output of job 1: Error: key='********' refused")]
    assert outputs.check(['2', '3']) == []                         # unwatched ids are ignored


def test_port_signal_ready_news_and_lost():
    clock = FakeClock()

    class Probe(FakeProbe):
        answers = []

        def check(self, node, job_id=None):
            return self.answers.pop(0)

    probe = Probe(clock)
    Probe.answers = [mp.ProbeResult(mp.STARTING, 'no answer'), mp.ProbeResult(mp.STARTING, 'no answer'),
                     mp.ProbeResult(mp.STARTING, 'HTTP 503', answered=True), mp.ProbeResult(mp.STARTING, 'no answer'),
                     mp.ProbeResult(mp.READY, 'serves glm-5.3-flash', answered=True, models=['glm-5.3-flash'])]
    port = PortSignal(probe, interval=1.0, start=0)
    assert port.due(0) and port.check(None) is None             # no node yet: nothing asked
    port.check('node1')
    port.checked(0)
    assert port.news and not port.lost and not port.ready and not port.due(0.5) and port.due(1)
    port.check('node1')
    assert not port.news                                           # the same answer again
    port.check('node1')
    assert port.news and not port.lost
    port.check('node1')
    assert port.lost                                               # it answered, and no longer does
    port.check('node1')
    assert port.ready and port.endpoint == 'http://node1:30000'


# -- the rules -------------------------------------------------------------------------------------


def view(state, reason='None', until_gone=False, success=('RUNNING',), probing=False, requeued=False, parents=(),
         dependency=None):
    return wr.JobView(job('2', state, reason=reason, dependency=dependency), parents, success, until_gone, probing, requeued)


@pytest.mark.parametrize('case, expected', [
    (dict(state='CANCELLED', until_gone=True), ('gone', wr.SUCCESS)),
    (dict(state='PURGED', until_gone=True), ('gone', wr.SUCCESS)),
    (dict(state='COMPLETING', until_gone=True), ('still there', wr.WAIT)),
    (dict(state='RUNNING', until_gone=True), ('still there', wr.WAIT)),
    (dict(state='PENDING', reason='BeginTime', requeued=True), ('requeued after it started', wr.FAIL)),
    (dict(state='PENDING', reason='BeginTime', requeued=True, success=('PENDING', 'RUNNING')), ('reached', wr.SUCCESS)),
    (dict(state='PENDING', reason='Dependency', dependency='afterok:1(unfulfilled)',
          parents=[job('1', 'FAILED', exit_code='1:0')]), ('a parent failed', wr.FAIL)),
    (dict(state='PENDING', reason='Dependency', dependency='afterok:1(unfulfilled)',
          parents=[job('1', 'RUNNING')]), ('on its way', wr.WAIT)),
    (dict(state='CANCELLED', reason='DependencyNeverSatisfied', dependency='afterok:1(failed)',
          parents=[job('1', 'TIMEOUT')]), ('a parent failed', wr.FAIL)),
    (dict(state='RUNNING', probing=True), ('runs: ask the server', wr.PROBE)),
    (dict(state='RUNNING', probing=True, success=('COMPLETED',)), ('on its way', wr.WAIT)),
    (dict(state='RUNNING'), ('reached', wr.SUCCESS)),
    (dict(state='COMPLETED', success=('RUNNING', 'COMPLETED')), ('reached', wr.SUCCESS)),
    (dict(state='COMPLETED'), ('ended', wr.FAIL)),
    (dict(state='NODE_FAIL'), ('ended', wr.FAIL)),
    (dict(state='PENDING', reason='Resources'), ('on its way', wr.WAIT)),
])
def test_rules_table(case, expected):
    rule = wr.decide(view(**case))
    assert (rule.name, rule.verdict) == expected


def test_requeue_tracker_sees_a_pending_after_running_or_more_restarts():
    tracker = wr.RequeueTracker()
    assert not tracker.requeued(dict(job('2', 'PENDING'), restarts='0'))
    assert tracker.requeued(dict(job('2', 'PENDING'), restarts='1'))
    tracker = wr.RequeueTracker()
    assert not tracker.requeued(job('2', 'RUNNING'))
    assert tracker.requeued(job('2', 'PENDING'))
    assert wr.RequeueTracker().requeued(job('2', 'REQUEUE_HOLD'))


# -- failures as data ------------------------------------------------------------------------------


def test_wait_failed_renders_its_parts_once():
    exc = wr.WaitFailed('job 2 (srv) ended FAILED (reason NonZeroExitCode, exit code 1:0)', kind=wr.ENDED,
                        reason='it exited with a non-zero code', notes=['The server at http://node1:30000 had not answered /v1/models'],
                        job=job('2', 'FAILED'), log_path='/w/job2.out', log_tail=['a', 'b'])
    assert exc.msg == ('job 2 (srv) ended FAILED (reason NonZeroExitCode, exit code 1:0): it exited with a non-zero code. '
                       'The server at http://node1:30000 had not answered /v1/models. Last lines of /w/job2.out:\na\nb')
    exc.hints = ['Read the log.', 'rerun']
    assert 'had not answered /v1/models. What to do: Read the log. rerun. Last lines of /w/job2.out:\na\nb' in exc.msg
    data = exc.as_dict()
    assert data['kind'] == 'ended' and data['state'] == 'FAILED' and data['hints'] == ['Read the log.', 'rerun']
    assert data['summary'].startswith('job 2 (srv) ended FAILED') and data['log_tail'] == ['a', 'b']
    assert str(exc) == exc.msg


def test_wait_failed_tail_styles():
    base = dict(job=job('2', 'RUNNING'), log_path='/w/job2.out')
    assert wr.WaitFailed('s', **base).msg == 's. Its output file /w/job2.out is missing or empty'
    assert wr.WaitFailed('s', tail_style='ends', log_tail=['x'], **base).msg == 's. Its output file /w/job2.out ends with:\nx'
    timeout = wr.WaitFailed('s', timed_out=True, tail_style=None, log_tail=['x'], **base)
    assert timeout.msg == 's' and timeout.kind == wr.TIMEOUT and timeout.log_tail == ['x']
    assert wr.WaitFailed('s', hints=['h']).msg == 's. What to do: h.'


# -- the loop's seams: several jobs, progress events -----------------------------------------------


def test_waits_for_several_jobs_at_once_and_succeeds_when_all_reached_their_state():
    clock = FakeClock()
    timeline = {
        '2': [(0, job('2', 'PENDING', reason='Resources')), (10.2, job('2', 'RUNNING', nodes='node1'))],
        '3': [(0, job('3', 'PENDING', reason='Resources')), (30.2, job('3', 'RUNNING', nodes='node2'))],
    }
    files = FakeFiles(clock, {'/w/job2.out': [(10.2, 'x\n')], '/w/job3.out': [(30.2, 'y\n')]})
    cli = FakeCli(clock, timeline)
    events = []
    waiter = jw.JobWaiter(cli, [jw.Target('2'), jw.Target('3')], clock=clock, files=files, on_event=events.append)
    result = waiter.wait()
    assert [t['job']['state'] for t in result['targets']] == ['RUNNING', 'RUNNING']
    assert 30.2 <= clock.t <= 31.7                                 # the later start, seen from its file
    assert ('show', ('3',)) in [(k, ids) for _t, k, ids in cli.calls if _t > 11]   # job 2 is not asked once it ran
    assert all(ids != ('2',) for t, _k, ids in cli.calls if t > 11)
    assert [e['line'] for e in events] == result['events']
    assert any('output file /w/job3.out appeared' in e['text'] for e in events)


def test_several_jobs_fail_at_the_first_failure():
    clock = FakeClock()
    timeline = {
        '2': [(0, job('2', 'RUNNING', nodes='node1'))],
        '3': [(0, job('3', 'RUNNING', nodes='node2')), (5, job('3', 'FAILED', reason='NonZeroExitCode', exit_code='1:0'))],
    }
    files = FakeFiles(clock, {'/w/job2.out': [(0, 'x\n')], '/w/job3.out': [(0, 'y\n'), (4.9, 'y\nTraceback (most recent call last):\nValueError: boom\n')]})
    waiter = jw.JobWaiter(FakeCli(clock, timeline), [jw.Target('2', success=['COMPLETED']), jw.Target('3', success=['COMPLETED'])],
                          clock=clock, files=files)
    with pytest.raises(jw.WaitFailed) as err:
        waiter.wait()
    assert err.value.kind == wr.ENDED and err.value.job['job_id'] == '3' and 'ValueError: boom' in err.value.msg
    assert clock.t < 7


def test_one_round_asks_for_every_job_of_several_in_one_state_only_call():
    clock = FakeClock()
    timeline = {'2': [(0, job('2', 'RUNNING', nodes='node1'))], '3': [(0, job('3', 'RUNNING', nodes='node2'))]}
    cli = FakeCli(clock, timeline, only_state=True)
    waiter = jw.JobWaiter(cli, [jw.Target('2', success=['COMPLETED']), jw.Target('3', success=['COMPLETED'])],
                          policy=WaitPolicy(timeout=60), clock=clock, files=FakeFiles(clock))
    with pytest.raises(jw.WaitFailed):
        waiter.wait()
    assert ('states', ('2', '3')) in [(k, ids) for _t, k, ids in cli.calls]


def test_progress_events_reach_the_callback_with_elapsed_time():
    clock = FakeClock()
    timeline = {'2': [(0, job('2', 'PENDING', reason='Priority')), (3.5, job('2', 'RUNNING', nodes='node1'))]}
    events = []
    waiter = jw.JobWaiter(FakeCli(clock, timeline), jw.Target('2'), clock=clock, files=FakeFiles(clock), on_event=events.append)
    waiter.wait()
    assert [e['text'] for e in events] == ['job2 2 PENDING (Priority): waiting for a free node', 'job2 2 RUNNING on node1']
    assert events[0]['elapsed'] == 0 and events[1]['elapsed'] == pytest.approx(7)
    assert events[1]['line'] == '+7.0s job2 2 RUNNING on node1'


# -- the backstop: while growing output files show the jobs alive, rounds are a backstop apart --------------


def growing(start, end, every, word='progress'):
    """A file that gets a line every ``every`` seconds from start to end: [(t, text so far)]."""
    entries, text, t = [], '', float(start)
    while t < end:
        text += '%s %d\n' % (word, t)
        entries.append((t, text))
        t += every
    return entries


def deploy_chain(download_end=480.0, server_dies=None, ready_at=720.0, child_cancelled=None, parent_fails=None):
    """The deploy's long wait: a download that prints progress, then a server that prints while it loads."""
    clock = FakeClock()
    parent_end = parent_fails if parent_fails is not None else download_end
    parent_state = 'FAILED' if parent_fails is not None else 'COMPLETED'
    timeline = {
        '1': [(0, job('1', 'RUNNING', name='dl', nodes='node2')),
              (parent_end, job('1', parent_state, name='dl', nodes='node2', exit_code='1:0' if parent_fails else '0:0'))],
        '2': [(0, job('2', 'PENDING', reason='Dependency', dependency='afterok:1(unfulfilled)'))],
    }
    if parent_fails is not None:
        never = job('2', 'CANCELLED', reason='DependencyNeverSatisfied', dependency='afterok:1(failed)')
        timeline['2'].append((parent_fails + 2, never))
    elif child_cancelled is not None:
        timeline['2'].append((child_cancelled, job('2', 'CANCELLED', reason='None', dependency='afterok:1(unfulfilled)')))
    else:
        timeline['2'].append((download_end + 0.5, job('2', 'RUNNING', nodes='node1')))
        if server_dies is not None:
            timeline['2'].append((server_dies, job('2', 'FAILED', reason='NonZeroExitCode', nodes='node1', exit_code='1:0')))
    server_end = server_dies if server_dies is not None else ready_at
    files = FakeFiles(clock, {'/w/job1.out': growing(0, parent_end, 2),
                              '/w/job2.out': growing(download_end + 0.5, server_end, 10, 'loading')})
    cli = FakeCli(clock, timeline)
    known = job('2', 'PENDING', reason='Dependency', dependency='afterok:1(unfulfilled)')
    target = jw.Target('2', parents=['1'], probe=FakeProbe(clock, ready_at=ready_at), known=known)
    waiter = jw.JobWaiter(cli, target, policy=WaitPolicy(timeout=1800, cap=60), clock=clock, files=files)
    return waiter, cli, clock


def test_a_long_chain_with_live_outputs_costs_a_few_rounds_and_sees_each_step_at_once():
    waiter, cli, clock = deploy_chain()
    result = waiter.wait()
    assert result['models'] == ['glm-5.3-flash']
    assert 720 <= clock.t <= 721.5                      # the first answer, within a second or so
    assert len(cli.calls) <= 8, cli.calls               # 23 calls with the ramp alone (cap 60)
    assert any(t >= 480.5 and t <= 482 and '2' in ids for t, _k, ids in cli.calls)   # the start, from its file


def test_a_silent_death_while_loading_is_seen_within_the_cap():
    waiter, cli, clock = deploy_chain(server_dies=600)
    with pytest.raises(jw.WaitFailed) as err:
        waiter.wait()
    assert err.value.kind == wr.ENDED and err.value.job['state'] == 'FAILED'
    assert clock.t <= 600 + 60 + 2, cli.calls           # the output stopped: a round within the cap
    assert any('still for 60s' in e for e in waiter.events)


def test_a_download_that_fails_silently_is_seen_within_the_cap():
    waiter, cli, clock = deploy_chain(parent_fails=200)
    with pytest.raises(jw.WaitFailed) as err:
        waiter.wait()
    assert err.value.kind == wr.DEPENDENCY and err.value.failed_job['job_id'] == '1'
    assert clock.t <= 200 + 60 + 2, cli.calls


def test_the_job_cancelled_while_it_waits_has_no_signal_and_is_seen_at_the_backstop():
    waiter, cli, clock = deploy_chain(child_cancelled=100)
    with pytest.raises(jw.WaitFailed) as err:
        waiter.wait()
    assert err.value.job['state'] == 'CANCELLED'
    assert clock.t <= 100 + waiter.policy.backstop + 2, cli.calls


def test_output_signals_a_file_that_grew_and_stays_still_stalls_once():
    clock = FakeClock()
    files = FakeFiles(clock, {'/w/a.out': [(0, 'a\n'), (5, 'a\nb\n')], '/w/b.out': [(0, 'x\n')]})
    outputs = OutputSignals(files, stall_after=10)
    outputs.watch('1', '/w/a.out')
    outputs.watch('2', '/w/b.out')                       # there before the wait and never grows: tells nothing
    kinds = []
    for t in range(0, 40):
        clock.t = t
        kinds += [(t, s.job_id, s.kind) for s in outputs.check(['1', '2'], now=t) if s.kind == Signal.STALLED]
        if t == 5:
            assert outputs.alive('1', t) and not outputs.alive('2', t)
    assert kinds == [(15, '1', Signal.STALLED)]
    assert not outputs.alive('1', 15)


def test_a_covered_wait_names_the_parent_as_it_ended_not_as_last_seen():
    # the wait asked for the job alone while the download's log grew; Slurm cancelled the job when the download
    # hit its time limit: the message reads the download again (TIMEOUT), not its old RUNNING row
    clock = FakeClock()
    timeline = {
        '1': [(0, job('1', 'RUNNING', name='dl', nodes='node2')),
              (200, job('1', 'TIMEOUT', reason='TimeLimit', name='dl', nodes='node2', exit_code='0:15'))],
        '2': [(0, job('2', 'PENDING', reason='Dependency', dependency='afterok:1(unfulfilled)')),
              (201, job('2', 'CANCELLED', reason='DependencyNeverSatisfied', dependency='afterok:1(failed)'))],
    }
    files = FakeFiles(clock, {'/w/job1.out': growing(0, 200, 2)})
    known = job('2', 'PENDING', reason='Dependency', dependency='afterok:1(unfulfilled)')
    waiter = jw.JobWaiter(FakeCli(clock, timeline), jw.Target('2', parents=['1'], known=known),
                          policy=WaitPolicy(timeout=1800, cap=60), clock=clock, files=files)
    with pytest.raises(jw.WaitFailed) as err:
        waiter.wait()
    assert err.value.kind == wr.DEPENDENCY and err.value.failed_job['state'] == 'TIMEOUT'
    assert 'dl 1 TIMEOUT' in err.value.msg and 'RUNNING' not in err.value.reason
