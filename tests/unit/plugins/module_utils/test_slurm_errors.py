# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Error mapping: what fail_json gets for each error, and the fields a failed step carries."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.glm.serve.plugins.module_utils.job_waiter import WaitFailed
from ansible_collections.glm.serve.plugins.module_utils.slurm_cli import SlurmError
from ansible_collections.glm.serve.plugins.module_utils.slurm_errors import ActionError, attach, carrying, fail_kwargs, failed_result


def test_slurm_error_gives_its_command_and_output():
    exc = SlurmError('sbatch failed', cmd=['sbatch', 'x'], rc=1, stdout='', stderr='invalid partition')
    kwargs = fail_kwargs(exc, {'changed': True, 'msg': 'old'})
    assert kwargs['msg'] == 'sbatch failed' and kwargs['rc'] == 1 and kwargs['stderr'] == 'invalid partition'
    assert kwargs['changed'] is True and kwargs['cmd'] == ['sbatch', 'x']


def test_wait_failed_gives_the_failure_as_data():
    exc = WaitFailed('job 3 timed out', job={'job_id': '3'}, log_tail=['last'], timed_out=True)
    exc.result = {'job_id': '3'}
    kwargs = fail_kwargs(exc)
    assert kwargs['timed_out'] is True and kwargs['log_tail'] == ['last'] and kwargs['job_id'] == '3'
    assert kwargs['msg'] == exc.msg and kwargs['failure'] == exc.as_dict()


def test_action_error_gives_its_message():
    assert fail_kwargs(ActionError('umask must be octal', key=1)) == {'msg': 'umask must be octal'}
    assert fail_kwargs(ValueError('boom'))['msg'] == 'boom'


def test_carrying_attaches_what_the_steps_had_found_inner_first():
    with pytest.raises(ActionError) as caught:
        with carrying({'changed': True, 'submitted': False}) as outer:
            outer['lookup'] = 'listing'
            with carrying({'submitted': True, 'sbatch_cmd': ['sbatch']}):
                raise ActionError('sbatch failed')
    assert caught.value.fields == {'changed': True, 'submitted': True, 'sbatch_cmd': ['sbatch'], 'lookup': 'listing'}
    result = failed_result(caught.value, {'changed': False, 'job_id': None})
    assert caught.value.result is result and result == dict(caught.value.fields, job_id=None)


def test_attach_returns_the_error_and_a_plain_error_has_no_fields():
    exc = attach(ActionError('x'), {'a': 1})
    assert exc.fields == {'a': 1}
    assert failed_result(ValueError('y'), {'a': 2}) == {'a': 2}
