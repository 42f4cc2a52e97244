# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The wait step: what a wait saw, as result fields, for a wait that succeeds, fails or is sliced."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.glm.serve.plugins.module_utils import job_wait as jwt
from ansible_collections.glm.serve.plugins.module_utils.hints import compile_hints
from ansible_collections.glm.serve.plugins.module_utils.job_waiter import Target, WaitFailed
from ansible_collections.glm.serve.plugins.module_utils.slurm_errors import ActionError

from ansible_collections.glm.serve.tests.unit.plugins.module_utils.conftest import row


class FakeWaiter:
    """A JobWaiter stand-in: ``wait`` returns or raises what the test set in ``then``."""

    then = None
    made = []

    def __init__(self, cli, target, **kwargs):
        self.target, self.kwargs = target, kwargs
        self.start = 0.0
        self.targets = [type('T', (), {'port': None})()]
        self.output_paths = {}
        FakeWaiter.made.append(self)

    def wait(self, slice_seconds=None, phase=None):
        return outcome_of(self.then)

    def recent_events(self):
        return [{'line': 'PENDING'}]

    def chain(self, target):
        return [row(target.job_id, state='PENDING', reason='Resources')]

    def snapshot(self):
        return {'v': 1}

    def restore(self, snapshot):
        return snapshot == {'v': 1}


def outcome_of(then):
    """What the fake wait ends with: ``then``, raised when it is an error."""
    if isinstance(then, Exception):
        raise then
    return then


@pytest.fixture
def waiter(monkeypatch):
    FakeWaiter.made = []
    monkeypatch.setattr(jwt, 'JobWaiter', FakeWaiter)
    return FakeWaiter


def params(**extra):
    return dict(dict(wait_timeout=60, wait_sleep=5), **extra)


def test_a_wait_that_ends_well(make_ctx, waiter):
    waiter.then = {'job': row(3, exit_code='0:0'), 'chain': [row(3)], 'events': ['e'], 'duration': 4.5}
    outcome, fields = jwt.run_wait(make_ctx(**params()), Target('3'))
    assert outcome is waiter.then
    assert fields == {'job_id': '3', 'name': 'srv', 'user': 'u', 'state': 'RUNNING', 'exit_code': '0:0', 'events': ['e'],
                      'chain': [{'job_id': '3', 'name': 'srv', 'state': 'RUNNING', 'reason': None}], 'duration': 4.5}
    assert waiter.made[0].kwargs['policy'].timeout == 60 and waiter.made[0].kwargs['cancel_dead'] is True


def test_a_failed_wait_carries_what_it_saw_and_its_hints(make_ctx, waiter, clock):
    clock.t = 2.0
    waiter.then = WaitFailed('job 3 ended FAILED', job=row(3, state='FAILED'), log_tail=['CUDA OOM'], cancelled=['4'])
    with pytest.raises(WaitFailed) as caught:
        jwt.run_wait(make_ctx(**params()), Target('3'), hints=compile_hints([{'match': 'OOM', 'hint': 'less memory'}]))
    exc = caught.value
    assert exc.hints == ['less memory'] and exc.wait_fields['hints'] == ['less memory']
    assert exc.wait_fields['wait_cancelled'] == ['4'] and exc.wait_fields['log_tail'] == ['CUDA OOM']
    assert exc.wait_fields['duration'] == 2.0 and exc.wait_fields['state'] == 'FAILED'


def test_a_slice_that_is_over_gives_resume(make_ctx, waiter, monkeypatch):
    class Progress:
        def __init__(self, **kwargs):
            pass

        def describe(self, chain, **kwargs):
            return {'phase': 'queued', 'line': 'queued: Resources', 'sample': None, 'about': None}
    monkeypatch.setattr(jwt.serve_progress, 'Progress', Progress)
    waiter.then = None
    ctx = make_ctx(**params(wait_slice=30))
    outcome, fields = jwt.run_wait(ctx, Target('3'), snapshot={'v': 2})
    assert outcome is None and fields['wait_done'] is False and fields['phase'] == 'queued'
    assert fields['resume'] == {'job_id': '3', 'waiter': {'v': 1}, 'sample': None,
                                'floor': {'about': None, 'phase': 'queued', 'line': 'queued: Resources'}}
    assert 'does not fit job 3' in ctx.warnings[0]                  # the snapshot given was another's


def test_merge_wait_adds_the_cancelled_jobs():
    result = {'cancelled': ['1'], 'changed': False, 'state': None}
    jwt.merge_wait(result, {'wait_cancelled': ['1'], 'state': 'FAILED'})
    assert result == {'cancelled': ['1'], 'changed': False, 'state': 'FAILED'}
    jwt.merge_wait(result, {'wait_cancelled': ['2']})
    assert result['cancelled'] == ['1', '2'] and result['changed'] is True


def test_wait_into_merges_also_on_failure(make_ctx, waiter):
    waiter.then = WaitFailed('timed out', job=row(3, state='PENDING'), timed_out=True)
    result = {'cancelled': [], 'changed': False}
    with pytest.raises(WaitFailed):
        jwt.wait_into(make_ctx(**params()), result, Target('3'), until_gone=True)
    assert result['state'] == 'PENDING' and result['chain'] == [] and waiter.made[0].kwargs['cancel_dead'] is False


def test_probe_and_policy(tmp_path):
    assert jwt.make_probe(None) == (None, ())
    with pytest.raises(ActionError):
        jwt.make_probe({'port': 1, 'key_file': str(tmp_path / 'missing'), 'model': 'm'})
    key = tmp_path / 'key'
    key.write_text(u'sk-secret\n')
    probe, secrets = jwt.make_probe({'port': 8000, 'key_file': str(key), 'model': 'm'})
    assert secrets == ('sk-secret',) and probe.model == 'm'
    assert jwt.policy(params(), timeout=7).timeout == 7 and jwt.policy(params()).cap == 5
