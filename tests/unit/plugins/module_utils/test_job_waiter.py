# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The waiter on a fake clock: a whole wait of minutes runs in milliseconds."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.glm.serve.plugins.module_utils import job_waiter as jw
from ansible_collections.glm.serve.plugins.module_utils import model_probe as mp
from ansible_collections.glm.serve.plugins.module_utils.slurm_cli import SlurmTransientError


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def now(self):
        return self.t

    def sleep(self, seconds):
        assert seconds >= 0
        self.t += max(seconds, 0.001)


def job(job_id, state, reason='None', name=None, nodes=None, dependency=None, exit_code='0:0', output_path=None):
    return {'job_id': job_id, 'name': name or 'job%s' % job_id, 'user': 'u', 'state': state, 'reason': reason,
            'nodes': nodes, 'partition': 'compute-h100', 'dependency': dependency, 'exit_code': exit_code,
            'work_dir': '/w', 'output_path': output_path if output_path is not None else '/w/job%s.out' % job_id}


class FakeCli:
    """Slurm as a timeline: {job_id: [(from_t, job dict or None for purged)]}."""

    def __init__(self, clock, timeline, only_state=False, down=None):
        self.clock = clock
        self.timeline = timeline
        self.only_state = only_state
        self.down = down or []   # [(from_t, to_t)] the controller does not answer
        self.calls = []          # (t, kind, ids)
        self.polls = 0

    def _at(self, job_id):
        current = None
        for start, value in self.timeline.get(job_id, []):
            if start <= self.clock.t:
                current = value
        return dict(current) if current else None

    def _call(self, kind, ids):
        self.polls += 1
        self.calls.append((round(self.clock.t, 3), kind, tuple(ids)))
        for start, end in self.down:
            if start <= self.clock.t < end:
                self.clock.t += 9  # an unreachable controller takes 9 s to fail (squeue --local)
                raise SlurmTransientError('Slurm controller unreachable or busy: Unable to contact slurm controller (connect failure)')

    def only_job_state(self):
        return self.only_state

    def states(self, ids):
        if not self.only_state:
            return None
        self._call('states', ids)
        rows = []
        for i in ids:
            j = self._at(i)
            if j:
                rows.append({'job_id': i, 'state': j['state']})
        return rows

    def poll(self, ids, cheap=False):
        rows = []
        for i in ids:
            j = self.show_job(i)
            if j:
                rows.append(j)
        return rows

    def show_job(self, job_id):
        self._call('show', [job_id])
        return self._at(job_id)

    def poll_times(self):
        return [c[0] for c in self.calls]


class FakeFiles:
    """{path: [(from_t, text)]}: the file exists from the first entry on, with that content."""

    def __init__(self, clock, files=None):
        self.clock = clock
        self.files = files or {}

    def _text(self, path):
        current = None
        for start, text in self.files.get(path, []):
            if start <= self.clock.t:
                current = text
        return current

    def stat(self, path):
        text = self._text(path)
        if text is None:
            return None
        return (1, len(text.encode()), 0)

    def read(self, path, offset, size):
        text = self._text(path) or ''
        return text.encode()[offset:offset + size]


class FakeProbe:
    key_file = '/home/u/glm/api-key'
    path = '/v1/models'
    model = 'glm-5.3-flash'

    def __init__(self, clock, ready_at=None, unauthorized=False):
        self.clock = clock
        self.ready_at = ready_at
        self.unauthorized = unauthorized
        self.checks = []

    def endpoint(self, node, job_id=None):
        return 'http://%s:30000' % node

    def check(self, node, job_id=None):
        self.checks.append((self.clock.t, node))
        if self.unauthorized:
            return mp.ProbeResult(mp.UNAUTHORIZED, 'HTTP 401', answered=True)
        if self.ready_at is not None and self.clock.t >= self.ready_at:
            return mp.ProbeResult(mp.READY, 'serves glm-5.3-flash', answered=True, models=['glm-5.3-flash'], max_model_len=202752)
        return mp.ProbeResult(mp.STARTING, 'no answer (Connection refused)')


def make(timeline, success=('RUNNING',), timeout=600, cap=60, files=None, only_state=False, down=None, probe=None,
         parents=(), secrets=(), until_gone=False, known=None):
    clock = FakeClock()
    cli = FakeCli(clock, timeline, only_state=only_state, down=down)
    fs = FakeFiles(clock, files)
    target = jw.Target('2', success=success, parents=parents, probe=probe(clock) if probe else None, known=known)
    waiter = jw.JobWaiter(cli, target, policy=jw.WaitPolicy(timeout=timeout, cap=cap), clock=clock, files=fs,
                          secrets=secrets, until_gone=until_gone)
    waiter.probe = target.probe
    return waiter, cli, clock


def test_backoff_sequence_on_a_running_job():
    waiter, cli, clock = make({'2': [(0, job('2', 'RUNNING', nodes='node1')), (200, job('2', 'COMPLETED', nodes='node1'))]},
                              success=('COMPLETED',), files={'/w/job2.out': [(0, 'started\n')]})
    result = waiter.wait()
    assert result['job']['state'] == 'COMPLETED'
    # a running job is first asked again after 4 s, then the interval doubles up to the cap
    assert cli.poll_times() == [0, 4, 12, 28, 60, 120, 180, 240]
    assert result['duration'] == pytest.approx(240)


def test_backoff_sequence_on_a_pending_job():
    waiter, cli, clock = make({'2': [(0, job('2', 'PENDING', reason='Priority')), (100, job('2', 'RUNNING', nodes='node1'))]})
    result = waiter.wait()
    assert result['job']['state'] == 'RUNNING'
    assert cli.poll_times() == [0, 1, 3, 7, 15, 31, 63, 123]


def test_chain_asks_for_the_job_alone_while_its_parent_runs():
    timeline = {
        '1': [(0, job('1', 'RUNNING', name='dl', nodes='node2')), (60, job('1', 'COMPLETED', name='dl', nodes='node2'))],
        '2': [(0, job('2', 'PENDING', reason='Dependency', dependency='afterok:1(unfulfilled)')),
              (61, job('2', 'RUNNING', nodes='node1')), (121, job('2', 'COMPLETED', nodes='node1'))],
    }
    waiter, cli, clock = make(timeline, success=('COMPLETED',), files={'/w/job2.out': [(61, 'hi\n')]}, parents=['1'])
    result = waiter.wait()
    assert result['job']['state'] == 'COMPLETED'
    # fewer than one call per 10 s over the wait: the child's start does not restart the ramp from 1 s
    assert len(cli.calls) * 10 < clock.t, (len(cli.calls), clock.t, cli.calls)
    # completion has no free signal: it is seen within one backoff interval (at most the 60 s cap)
    assert 121 <= clock.t <= 121 + 60
    # while the child waits on the running parent, the rounds ask for the child alone (its row shows the parent's
    # end); the parent is asked at the start and once more when the child left its dependency (its final row)
    waiting = [ids for t, _kind, ids in cli.calls if 0 < t < 60]
    assert waiting and all(ids == ('2',) for ids in waiting), cli.calls
    assert [t for t, _kind, ids in cli.calls if '1' in ids] == [0, 61.001], cli.calls
    assert [(j['job_id'], j['state']) for j in result['chain']] == [('1', 'COMPLETED'), ('2', 'COMPLETED')]


def test_a_held_job_whose_parent_prints_an_error_asks_for_the_parent_too_and_fails_at_once():
    """The parent fails with an error line; Slurm marks the held job DependencyNeverSatisfied 2 s later. The round
    the line brings asks for the parent too (its row says FAILED at once): the wait ends then, not at the next
    round a cap later (test_slurm_job_live's chain failure)."""
    timeline = {
        '1': [(0, job('1', 'RUNNING', name='dl', nodes='node2')),
              (100, job('1', 'FAILED', reason='NonZeroExitCode', name='dl', nodes='node2', exit_code='3:0'))],
        '2': [(0, job('2', 'PENDING', reason='Dependency', dependency='afterok:1(unfulfilled)')),
              (102, job('2', 'PENDING', reason='DependencyNeverSatisfied', dependency='afterok:1(failed)'))],
    }
    files = {'/w/job1.out': [(-1, 'loading\n'), (100, 'loading\nError: weights not found\n')]}
    waiter, cli, clock = make(timeline, files=files, parents=['1'], timeout=300)
    with pytest.raises(jw.WaitFailed) as err:
        waiter.wait()
    assert 'can never start' in err.value.msg and 'dl 1 FAILED' in err.value.msg, err.value.msg
    assert 'Error: weights not found' in err.value.msg
    assert 100 <= clock.t <= 101.6, (clock.t, cli.calls)
    first = min(t for t, _kind, _ids in cli.calls if t >= 100)
    assert sorted(ids for t, _kind, ids in cli.calls if t == first) == [('1',), ('2',)], cli.calls


def test_a_job_held_by_its_running_parent_is_asked_cap_apart_not_on_the_ramp():
    """The ramp looks for a job's own quick changes; a job PENDING (Dependency) has none before its parent ends,
    and the files show that end (the job's own file appears, the parent's shows an error line): while held, rounds
    are the cap apart. The parent's log is there but silent (a container being imported): not 'covered'."""
    timeline = {
        '1': [(0, job('1', 'RUNNING', name='dl', nodes='node2')), (400, job('1', 'COMPLETED', name='dl', nodes='node2'))],
        '2': [(0, job('2', 'PENDING', reason='Dependency', dependency='afterok:1(unfulfilled)')),
              (400.5, job('2', 'RUNNING', nodes='node1'))],
    }
    files = {'/w/job1.out': [(-1, 'pyxis: importing docker image\n')], '/w/job2.out': [(400.5, 'hi\n')]}
    waiter, cli, clock = make(timeline, files=files, parents=['1'])
    result = waiter.wait()
    assert result['job']['state'] == 'RUNNING' and clock.t <= 401.6
    held = [t for t, _kind, ids in cli.calls if t < 400]
    assert held == [0, 0, 60, 120, 180, 240, 300, 360], cli.calls
    # the same wait without the parent's log (nothing shows its end): the ramp, as before
    waiter, cli, clock = make(timeline, files={'/w/job2.out': [(400.5, 'hi\n')]}, parents=['1'])
    waiter.wait()
    assert [t for t, _kind, _ids in cli.calls if t < 16] == [0, 0, 1, 3, 7, 15], cli.calls


@pytest.mark.parametrize('ends', [2.5, 5, 13])
def test_dependent_job_start_is_seen_from_its_output_file_even_while_only_the_parent_is_polled(ends):
    # bench case "a dependent job starts": the parent ends, the child starts 0.1 s later and its output file
    # appears; the call this triggers must ask for the child itself, even in a round meant for the parent alone
    timeline = {
        '1': [(0, job('1', 'RUNNING', name='dl', nodes='node2')), (ends, job('1', 'COMPLETED', name='dl', nodes='node2'))],
        '2': [(0, job('2', 'PENDING', reason='Dependency', dependency='afterok:1(unfulfilled)')),
              (ends + 0.1, job('2', 'RUNNING', nodes='node1'))],
    }
    waiter, cli, clock = make(timeline, files={'/w/job2.out': [(ends + 0.1, 'hi\n')]}, parents=['1'])
    result = waiter.wait()
    assert result['job']['state'] == 'RUNNING'
    assert clock.t <= ends + 1.6, (clock.t, cli.calls)


@pytest.mark.parametrize('ends', [2.5, 5, 13])
def test_a_parent_that_ends_makes_the_waiter_ask_for_the_job_soon(ends):
    # no output file to watch: the parent's end alone brings a call for the job within about a second
    timeline = {
        '1': [(0, job('1', 'RUNNING', name='dl', nodes='node2')), (ends, job('1', 'COMPLETED', name='dl', nodes='node2'))],
        '2': [(0, job('2', 'PENDING', reason='Dependency', dependency='afterok:1(unfulfilled)')),
              (ends + 0.1, job('2', 'RUNNING', nodes='node1'))],
    }
    waiter, cli, clock = make(timeline, parents=['1'])
    result = waiter.wait()
    assert result['job']['state'] == 'RUNNING'
    ended_seen = min(t for t, _kind, ids in cli.calls if t >= ends and '1' in ids)
    assert clock.t <= ended_seen + 1.5, (clock.t, cli.calls)


def test_controller_calls_over_120s_wait_stay_under_one_per_10s():
    waiter, cli, clock = make({'2': [(0, job('2', 'RUNNING', nodes='node1'))]}, success=('COMPLETED',), timeout=120,
                              files={'/w/job2.out': [(0, 'x\n')]})
    with pytest.raises(jw.WaitFailed):
        waiter.wait()
    assert len(cli.calls) <= 12  # 1 call per 10 s at most, fewer as the wait grows


def test_start_detected_from_output_file_without_waiting_for_the_backoff():
    timeline = {'2': [(0, job('2', 'PENDING', reason='Resources')), (100.2, job('2', 'RUNNING', nodes='node1'))]}
    waiter, cli, clock = make(timeline, files={'/w/job2.out': [(100.2, 'hello\n')]})
    result = waiter.wait()
    assert result['job']['state'] == 'RUNNING'
    assert clock.t - 100.2 <= 1.5          # seen within a tick or two, not at the next backoff (127)
    assert len(cli.calls) <= 9
    assert any('appeared' in e for e in result['events'])


def test_error_line_triggers_a_poll_and_terminal_state_fails_at_once_with_log_tail():
    timeline = {'2': [(0, job('2', 'RUNNING', nodes='node1')), (50.5, job('2', 'FAILED', reason='NonZeroExitCode', exit_code='1:0'))]}
    log = 'loading\n' + 'step\n' * 30 + 'Traceback (most recent call last):\nValueError: bad --tp-size\n'
    waiter, cli, clock = make(timeline, success=('COMPLETED',), files={'/w/job2.out': [(0, 'loading\n'), (50.4, log)]})
    with pytest.raises(jw.WaitFailed) as err:
        waiter.wait()
    msg = err.value.msg
    assert 'FAILED' in msg and 'NonZeroExitCode' in msg and 'exit code 1:0' in msg
    assert 'ValueError: bad --tp-size' in msg
    assert len(err.value.log_tail) == 20
    assert clock.t < 53   # the backoff alone would have polled at 63


def test_completed_while_waiting_for_running_fails():
    waiter, cli, clock = make({'2': [(0, job('2', 'COMPLETED'))]}, success=('RUNNING',))
    with pytest.raises(jw.WaitFailed) as err:
        waiter.wait()
    assert 'ended before reaching RUNNING' in err.value.msg


def test_completed_is_success_when_listed():
    waiter, cli, clock = make({'2': [(0, job('2', 'COMPLETED'))]}, success=('RUNNING', 'COMPLETED'))
    assert waiter.wait()['job']['state'] == 'COMPLETED'


def test_transient_errors_are_retried_until_the_controller_is_back():
    timeline = {'2': [(0, job('2', 'PENDING', reason='Priority')), (20, job('2', 'RUNNING', nodes='node1'))]}
    waiter, cli, clock = make(timeline, down=[(0.5, 40)])
    result = waiter.wait()
    assert result['job']['state'] == 'RUNNING'
    assert any('controller call failed' in e for e in result['events'])


def test_transient_errors_until_timeout_report_the_controller_not_a_job_failure():
    waiter, cli, clock = make({'2': [(0, job('2', 'PENDING', reason='Priority'))]}, timeout=60, down=[(0.5, 1000)])
    with pytest.raises(jw.WaitFailed) as err:
        waiter.wait()
    assert err.value.timed_out
    assert 'Unable to contact slurm controller' in err.value.msg
    assert 'last seen: job2 2 PENDING (Priority)' in err.value.msg


def test_timeout_names_the_wait_for_a_free_node():
    waiter, cli, clock = make({'2': [(0, job('2', 'PENDING', reason='Resources'))]}, timeout=30)
    with pytest.raises(jw.WaitFailed) as err:
        waiter.wait()
    assert err.value.timed_out
    assert 'timed out after 30s' in err.value.msg
    assert 'waiting for a free node (PENDING Resources)' in err.value.msg
    assert err.value.job['state'] == 'PENDING'


def test_chain_in_events_and_timeout():
    timeline = {
        '1': [(0, job('1', 'RUNNING', name='glm-download', nodes='node2'))],
        '2': [(0, job('2', 'PENDING', reason='Dependency', name='glm-serve', dependency='afterok:1(unfulfilled)'))],
    }
    waiter, cli, clock = make(timeline, timeout=45)
    with pytest.raises(jw.WaitFailed) as err:
        waiter.wait()
    assert 'glm-download 1 RUNNING on node2; glm-serve 2 PENDING (Dependency)' in err.value.msg
    assert [j['job_id'] for j in err.value.chain] == ['1', '2']
    assert 'waits for its dependency' in err.value.msg


def test_chain_success_after_parent_completes():
    timeline = {
        '1': [(0, job('1', 'RUNNING', name='dl', nodes='node2')), (30, job('1', 'COMPLETED', name='dl', nodes='node2'))],
        '2': [(0, job('2', 'PENDING', reason='Dependency', dependency='afterok:1(unfulfilled)')),
              (31, job('2', 'RUNNING', nodes='node1'))],
    }
    waiter, cli, clock = make(timeline, success=('RUNNING',), files={'/w/job2.out': [(31, 'hi\n')]}, parents=['1'])
    result = waiter.wait()
    assert [(j['job_id'], j['state']) for j in result['chain']] == [('1', 'COMPLETED'), ('2', 'RUNNING')]
    assert clock.t < 33


@pytest.mark.parametrize('child_state', ['PENDING', 'CANCELLED'])
def test_dependency_never_satisfied_names_the_parent_and_its_log(child_state):
    timeline = {
        '1': [(0, job('1', 'FAILED', reason='NonZeroExitCode', name='glm-download', exit_code='1:0'))],
        '2': [(0, job('2', child_state, reason='DependencyNeverSatisfied', name='glm-serve', dependency='afterok:1(failed)'))],
    }
    files = {'/w/job1.out': [(0, "hf: error: 401 Client Error api_key='sekrit-value'\n")]}
    waiter, cli, clock = make(timeline, files=files, parents=['1'], secrets=['sekrit-value'])
    with pytest.raises(jw.WaitFailed) as err:
        waiter.wait()
    msg = err.value.msg
    assert 'can never start' in msg and 'glm-download 1 FAILED' in msg and 'exit code 1:0' in msg
    assert '/w/job1.out' in msg and 'hf: error: 401' in msg
    assert 'sekrit-value' not in msg
    assert clock.t < 1


def test_afterok_parent_failed_is_reported_before_slurm_notices():
    timeline = {
        '1': [(0, job('1', 'FAILED', reason='NonZeroExitCode', name='dl', exit_code='2:0'))],
        '2': [(0, job('2', 'PENDING', reason='Dependency', dependency='afterok:1(unfulfilled)'))],
    }
    waiter, cli, clock = make(timeline, parents=['1'])
    with pytest.raises(jw.WaitFailed) as err:
        waiter.wait()
    assert 'dl 1 FAILED' in err.value.msg


def test_purged_job_is_said_plainly():
    waiter, cli, clock = make({'2': [(0, None)]})
    with pytest.raises(jw.WaitFailed) as err:
        waiter.wait()
    assert 'no longer known to Slurm' in err.value.msg
    assert 'purged' in err.value.msg


def test_probe_until_ready():
    timeline = {'2': [(0, job('2', 'RUNNING', nodes='node[1-2]'))]}
    waiter, cli, clock = make(timeline, probe=lambda c: FakeProbe(c, ready_at=95.3), files={'/w/job2.out': [(0, 'x\n')]})
    result = waiter.wait()
    assert result['endpoint'] == 'http://node1:30000'
    assert result['models'] == ['glm-5.3-flash'] and result['max_model_len'] == 202752
    assert 95.3 <= clock.t <= 96.5                   # the port is polled every second
    assert len(cli.calls) <= 8                       # the controller is asked with backoff only
    assert all(node == 'node1' for _t, node in waiter.probe.checks)


def test_probe_unauthorized_fails_at_once_without_the_key():
    waiter, cli, clock = make({'2': [(0, job('2', 'RUNNING', nodes='node1'))]}, probe=lambda c: FakeProbe(c, unauthorized=True))
    with pytest.raises(jw.WaitFailed) as err:
        waiter.wait()
    assert 'another key than /home/u/glm/api-key' in err.value.msg
    assert 'restart the server job' in err.value.msg


def test_probe_job_ends_fails_with_log_tail():
    timeline = {'2': [(0, job('2', 'RUNNING', nodes='node1')), (20, job('2', 'FAILED', reason='NonZeroExitCode', exit_code='1:0'))]}
    files = {'/w/job2.out': [(0, 'start\n'), (19.8, 'start\nsrun: error: node1: task 0: Exited with exit code 1\n')]}
    waiter, cli, clock = make(timeline, probe=FakeProbe, files=files)
    with pytest.raises(jw.WaitFailed) as err:
        waiter.wait()
    assert 'FAILED' in err.value.msg and 'had not answered /v1/models' in err.value.msg
    assert 'srun: error' in err.value.msg
    assert clock.t < 23


def test_only_job_state_used_for_running_jobs_on_23_11():
    timeline = {'2': [(0, job('2', 'RUNNING', nodes='node1')), (40, job('2', 'COMPLETED', nodes='node1'))]}
    waiter, cli, clock = make(timeline, success=('COMPLETED',), only_state=True, files={'/w/job2.out': [(0, 'x\n')]})
    result = waiter.wait()
    kinds = [c[1] for c in cli.calls]
    assert kinds[0] == 'show'                 # details (output path) once
    assert 'states' in kinds                  # cheap polls while it runs
    assert kinds[-1] == 'show'                # a change is read in detail (exit code)
    assert result['job']['exit_code'] == '0:0'


def test_known_details_save_the_first_call():
    known = job('2', 'PENDING', reason='Priority')
    timeline = {'2': [(0, known), (0.5, job('2', 'RUNNING', nodes='node1'))]}
    waiter, cli, clock = make(timeline, known=known, files={'/w/job2.out': [(0.5, 'x\n')]})
    result = waiter.wait()
    assert result['job']['state'] == 'RUNNING'
    assert cli.poll_times()[0] >= 0.5


def test_until_gone():
    timeline = {'2': [(0, job('2', 'RUNNING')), (1.5, job('2', 'COMPLETING')), (2.5, job('2', 'CANCELLED'))]}
    waiter, cli, clock = make(timeline, until_gone=True)
    result = waiter.wait()
    assert result['job']['state'] == 'CANCELLED'


def test_until_gone_purged_is_gone():
    waiter, cli, clock = make({'2': [(0, None)]}, until_gone=True)
    assert waiter.wait()['job']['state'] == 'PURGED'


def test_output_watcher_appearance_errors_and_partial_lines():
    clock = FakeClock()
    fs = FakeFiles(clock, {'/f': [(1, 'a\nError: x'), (2, 'a\nError: x\nok\n'), (3, 'new\n')]})
    watcher = jw.OutputWatcher('/f', fs)
    assert watcher.check() == (False, [])
    clock.t = 1
    assert watcher.check() == (True, [])            # the unfinished line waits for its end
    clock.t = 2
    assert watcher.check() == (False, ['Error: x'])
    clock.t = 3
    assert watcher.check() == (False, [])           # truncated: read again from the start


def test_read_tail_redacts():
    clock = FakeClock()
    fs = FakeFiles(clock, {'/f': [(0, "a\nserver_args=ServerArgs(api_key='k3y-value-123')\nb\n")]})
    tail = jw.read_tail('/f', fs, count=2, secrets=['k3y-value-123'])
    assert tail == ["server_args=ServerArgs(api_key='********')", 'b']
    assert jw.read_tail('/missing', fs) == []


# -- faults: a failed parent cancels the child, requeues, hints ------------------------------------


class CancellingCli(FakeCli):
    def __init__(self, *args, **kwargs):
        FakeCli.__init__(self, *args, **kwargs)
        self.cancelled = []

    def cancel(self, ids):
        self.cancelled += list(ids)


def test_failed_parent_cancels_the_child_that_can_never_start_and_says_so():
    clock = FakeClock()
    timeline = {
        '1': [(0, job('1', 'FAILED', reason='NonZeroExitCode', name='dl', exit_code='1:0'))],
        '2': [(0, job('2', 'PENDING', reason='Dependency', name='srv', dependency='afterok:1(unfulfilled)'))],
    }
    cli = CancellingCli(clock, timeline)
    waiter = jw.JobWaiter(cli, jw.Target('2', parents=['1']), clock=clock, files=FakeFiles(clock), cancel_dead=True)
    with pytest.raises(jw.WaitFailed) as err:
        waiter.wait()
    assert cli.cancelled == ['2'] and err.value.cancelled == ['2']
    assert 'it was cancelled (scancel 2), since it could never run' in err.value.msg
    assert err.value.failed_job['job_id'] == '1'


def test_without_cancel_dead_the_child_is_left_and_the_message_says_how_to_cancel():
    clock = FakeClock()
    timeline = {
        '1': [(0, job('1', 'TIMEOUT', reason='TimeLimit', name='dl', exit_code='0:15'))],
        '2': [(0, job('2', 'PENDING', reason='DependencyNeverSatisfied', name='srv', dependency='afterok:1(failed)'))],
    }
    cli = CancellingCli(clock, timeline)
    waiter = jw.JobWaiter(cli, jw.Target('2', parents=['1']), clock=clock, files=FakeFiles(clock))
    with pytest.raises(jw.WaitFailed) as err:
        waiter.wait()
    assert cli.cancelled == [] and 'run scancel 2' in err.value.msg
    assert 'it reached its time limit' in err.value.msg


def test_requeued_job_fails_at_once():
    timeline = {'2': [(0, job('2', 'RUNNING', nodes='node1')),
                      (5, dict(job('2', 'PENDING', reason='BeginTime'), restarts='1'))]}
    files = {'/w/job2.out': [(0, 'hi\n'), (5, 'hi\n*** JOB 2 ON node1 CANCELLED AT 2026 DUE TO NODE FAILURE ***\n')]}
    waiter, cli, clock = make(timeline, files=files, probe=FakeProbe)
    with pytest.raises(jw.WaitFailed) as err:
        waiter.wait()
    assert 'requeued by Slurm' in err.value.msg and 'scancel 2' in err.value.msg
    assert clock.t < 8


def test_a_target_known_at_restarts_0_sees_a_requeue_in_its_first_round():
    # the node went DOWN before any round saw the job RUNNING: the first row asked is already the requeued one
    requeued = dict(job('2', 'PENDING', reason='BeginTime'), restarts='1')
    target = jw.Target('2', known=dict(job('2', 'PENDING'), restarts='0'))
    assert target.requeue.restarts == 0 and target.requeue.requeued(requeued)
    # a job adopted as found: its first Restarts is where it stands, not a requeue
    waiter, cli, clock = make({'2': [(0, requeued), (30, job('2', 'RUNNING', nodes='node2'))]}, timeout=60)
    assert waiter.wait()['job']['state'] == 'RUNNING'


def test_node_fail_and_cancel_are_explained():
    for state, words in (('NODE_FAIL', 'its node failed'), ('CANCELLED', 'it was cancelled')):
        waiter, cli, clock = make({'2': [(0, job('2', state))]})
        with pytest.raises(jw.WaitFailed) as err:
            waiter.wait()
        assert words in err.value.msg


def test_waiting_for_a_free_node_is_progress_and_the_timeout_says_how_to_cancel():
    waiter, cli, clock = make({'2': [(0, job('2', 'PENDING', reason='Resources'))]}, timeout=30)
    with pytest.raises(jw.WaitFailed) as err:
        waiter.wait()
    assert any('waiting for a free node' in e for e in waiter.events)
    assert 'stays queued and starts when a node frees' in err.value.msg and 'scancel 2' in err.value.msg


def _growing(start, end, step=5, prefix='dl'):
    """A log that grows by one line every ``step`` seconds from ``start`` to ``end``."""
    return [(t, ''.join('%s %d\n' % (prefix, i) for i in range(int((t - start) // step) + 1)))
            for t in range(int(start), int(end), step)]


def _sliced_chain(slice_seconds, phase=None):
    """The 12-minute chain of the bench (480 s download, 240 s loading, the server answers at 725 s), waited for
    whole (slice_seconds None) or in slices, each a new waiter restored from the last one's JSON snapshot."""
    import json
    timeline = {
        '1': [(0, job('1', 'RUNNING', name='dl', nodes='node2')), (480, job('1', 'COMPLETED', name='dl', nodes='node2'))],
        '2': [(0, job('2', 'PENDING', reason='Dependency', dependency='afterok:1(unfulfilled)')),
              (480.5, job('2', 'RUNNING', nodes='node1'))],
    }
    files = {'/w/job1.out': _growing(0, 481), '/w/job2.out': _growing(480.5, 800, prefix='load')}
    clock = FakeClock()
    cli = FakeCli(clock, timeline)
    fs = FakeFiles(clock, files)
    probe = FakeProbe(clock, ready_at=725)
    snap, slices, result = None, 0, None
    while result is None:
        target = jw.Target('2', parents=['1'], probe=probe,
                           known=None if snap else job('2', 'PENDING', reason='Dependency', dependency='afterok:1'))
        waiter = jw.JobWaiter(cli, target, policy=jw.WaitPolicy(timeout=3600, cap=60), clock=clock, files=fs)
        if snap is not None:
            assert waiter.restore(json.loads(json.dumps(snap)))
            clock.t += 0.7   # the module's start-up between two slices
        result = waiter.wait(slice_seconds=slice_seconds, phase=phase and (lambda: phase(waiter)))
        slices += 1
        if result is None:
            snap = waiter.snapshot()
    return result, cli, clock, slices


def test_a_wait_cut_into_slices_asks_the_controller_no_more_than_a_whole_one():
    whole, whole_cli, whole_clock = _sliced_chain(None)[:3]
    sliced, cli, clock, slices = _sliced_chain(60)
    assert whole['endpoint'] == sliced['endpoint'] == 'http://node1:30000'
    assert slices >= 12                       # about one slice a minute over the 12-minute chain
    assert len(cli.calls) <= len(whole_cli.calls), (cli.calls, whole_cli.calls)
    assert len(cli.calls) <= 12, cli.calls    # the figure of the bench: at most one round a minute
    assert clock.t - 725 <= 2 and whole_clock.t - 725 <= 2


def test_a_slice_ends_early_when_the_phase_changes():
    # the phase: which job runs; the slices end within 2 s of the download's end, not at their full minute
    sliced, cli, clock, slices = _sliced_chain(600, phase=lambda w: tuple(sorted(
        i for i, j in w.jobs.items() if j.get('state') == 'RUNNING')))
    assert sliced['endpoint'] == 'http://node1:30000'
    assert 2 <= slices <= 4, slices


def test_a_snapshot_of_other_jobs_is_not_resumed():
    waiter, cli, clock = make({'2': [(0, job('2', 'PENDING', reason='Priority')), (5, job('2', 'RUNNING', nodes='n1'))]})
    assert waiter.wait(slice_seconds=2) is None
    snap = waiter.snapshot()
    other = jw.JobWaiter(cli, jw.Target('3'), clock=clock)
    assert not other.restore(snap)
    assert not other.restore(dict(snap, version=0))
    again = jw.JobWaiter(cli, jw.Target('2'), clock=clock, files=waiter.files)
    assert again.restore(snap)
    assert again.wait()['job']['state'] == 'RUNNING'
