# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The failure builders (wait_failures): each kind of failure's words, exactly as the waiter said them before they
moved beside WaitFailed (the module's tests and the integration tests assert on these messages)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.glm.serve.plugins.module_utils import model_probe as mp
from ansible_collections.glm.serve.plugins.module_utils import wait_failures as wf
from ansible_collections.glm.serve.plugins.module_utils import wait_rules as wr

from ansible_collections.glm.serve.tests.unit.plugins.module_utils.test_job_waiter import FakeClock, FakeProbe, job


def test_the_rules_module_still_names_the_failures():
    assert wr.WaitFailed is wf.WaitFailed and wr.STATE_MEANINGS is wf.STATE_MEANINGS and wr.ENDED == wf.ENDED


def test_ended_completed_too_early_and_failed():
    done = job('2', 'COMPLETED', name='srv')
    exc = wf.ended(done, ('RUNNING',), [done], ['bye'], '/w/job2.out')
    assert exc.kind == wf.ENDED and exc.msg == (
        'job 2 (srv) COMPLETED (exit code 0:0) before reaching RUNNING: the job ended before reaching RUNNING; add '
        'COMPLETED to wait_condition if a finished job is what you wait for. Last lines of /w/job2.out:\nbye')
    failed = job('2', 'FAILED', reason='NonZeroExitCode', name='srv', exit_code='1:0')
    exc = wf.ended(failed, ('RUNNING',), [failed], [], '/w/job2.out', endpoint='http://node1:30000', probe_path='/v1/models')
    assert exc.msg == ('job 2 (srv) ended FAILED (reason NonZeroExitCode, exit code 1:0): it exited with a non-zero '
                       'code. The server at http://node1:30000 had not answered /v1/models. Its output file /w/job2.out '
                       'is missing or empty')


def test_dependency_says_what_became_of_the_child():
    child = job('2', 'PENDING', reason='DependencyNeverSatisfied', name='srv', dependency='afterok:1(failed)')
    parent = job('1', 'FAILED', reason='NonZeroExitCode', name='dl', exit_code='2:0')
    start = 'job 2 (srv) can never start: its dependency afterok:1(failed) failed: dl 1 FAILED (NonZeroExitCode), ' \
            'exit code 2:0 (it exited with a non-zero code); '
    assert wf.dependency(child, parent, [], [], None, cancelled=['2']).msg == \
        start + 'so it was cancelled (scancel 2), since it could never run'
    assert wf.dependency(child, parent, [], [], None, cancel_error='denied').msg == \
        start + 'it stays PENDING (DependencyNeverSatisfied) and cancelling it failed (denied): run scancel 2'
    exc = wf.dependency(child, parent, [], ['err'], '/w/job1.out')
    assert exc.msg == start + 'it stays PENDING (DependencyNeverSatisfied) until cancelled: run scancel 2. Last lines ' \
        'of /w/job1.out:\nerr'
    assert exc.failed_job is parent and exc.kind == wf.DEPENDENCY
    purged = wf.dependency(dict(child, state='CANCELLED'), {'job_id': '1', 'name': None, 'state': None}, [], [], None)
    assert 'failed: job 1 (purged), exit code unknown; Slurm cancelled it (kill_on_invalid_dep)' in purged.msg


def test_requeued_gone_and_probe_refused():
    back = dict(job('2', 'PENDING', reason='BeginTime'), restarts='1')
    assert wf.requeued(back, [], [], None).summary == \
        'job 2 (job2) was requeued by Slurm after it had started (now job2 2 PENDING (BeginTime), restarts 1)'
    seen = wf.gone('2', job('2', 'RUNNING'), [], ['last'], '/w/job2.out')
    assert seen.kind == wf.PURGED and seen.msg == ('job 2 (job2), last seen RUNNING, is no longer known to Slurm: it '
                                                   'ended and was purged from the controller. Its output file '
                                                   '/w/job2.out ends with:\nlast')
    assert wf.gone('2', None, [], [], None).msg == (
        'job 2 is no longer known to Slurm (squeue -t all and scontrol show job: Invalid job id specified): it ended '
        'more than MinJobAge ago and was purged, so its final state is unknown')
    probe = FakeProbe(FakeClock())
    refused = wf.probe_refused('http://node1:30000', probe, mp.ProbeResult(mp.UNAUTHORIZED, 'HTTP 401', True), {}, [])
    assert refused.kind == wf.UNAUTHORIZED and refused.msg == (
        'the server at http://node1:30000 answered /v1/models with HTTP 401: the server runs with another key than '
        '/home/u/glm/api-key: restart the server job (deploy with rotation) or fix the key file')
    other = wf.probe_refused('http://node1:30000', probe, mp.ProbeResult(mp.WRONG_MODEL, 'serves other', True), {}, [])
    assert other.msg == 'the server at http://node1:30000 serves other: check the served model name of the server job'


def test_timed_out_notes():
    waiting = job('2', 'PENDING', reason='Resources')
    exc = wf.timed_out(30, 'RUNNING', waiting, [waiting], ['x'], None, last_error='boom')
    assert exc.kind == wf.TIMEOUT and exc.timed_out and exc.log_tail == []
    assert exc.msg.startswith('timed out after 30s waiting for job 2 (job2) to be RUNNING; last seen: job2 2 PENDING '
                              '(Resources). The job is waiting for a free node (PENDING Resources): no node of '
                              'partition compute-h100 that fits')
    assert exc.msg.endswith('The last controller call failed: boom')
    parent = job('1', 'RUNNING', name='dl', nodes='node2')
    child = job('2', 'PENDING', reason='Dependency')
    assert 'It waits for its dependency: dl 1 RUNNING on node2' in wf.timed_out(30, 'RUNNING', child, [parent, child], [], None).msg

    class Port:
        endpoint = 'http://node1:30000'
        last = mp.ProbeResult(mp.STARTING, 'HTTP 503')
    running = job('2', 'RUNNING', nodes='node1')
    exc = wf.timed_out(30, 'RUNNING', running, [running], ['t'], '/w/job2.out', port=Port, probe=FakeProbe(FakeClock()))
    assert 'The job runs but http://node1:30000/v1/models did not list glm-5.3-flash; last answer: HTTP 503' in exc.msg
    assert exc.log_tail == ['t'] and 'Last lines' not in exc.msg
