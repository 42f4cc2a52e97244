# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The hints: their patterns checked up front, matched against a failure, filled in."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.glm.serve.plugins.module_utils.hints import compile_hints, matching_hints
from ansible_collections.glm.serve.plugins.module_utils.job_waiter import WaitFailed
from ansible_collections.glm.serve.plugins.module_utils.slurm_errors import ActionError


def failed(tail=(), **job):
    job = dict(dict(job_id='7', name='srv', state='FAILED', reason='NonZeroExitCode', exit_code='1:0'), **job)
    return WaitFailed('job 7 ended FAILED', job=job, log_tail=list(tail), log_path='/w/srv-7.out')


def test_a_bad_pattern_is_named():
    with pytest.raises(ActionError, match=r"hints\[1\].match '\(' is not a valid regular expression"):
        compile_hints([{'match': 'ok', 'hint': 'h'}, {'match': '(', 'hint': 'h'}])
    assert compile_hints(None) == []


def test_hints_match_state_message_and_tail_and_are_filled_in():
    hints = compile_hints([
        {'match': r'out of memory.*?(?P<gib>\d+) GiB', 'hint': 'job {job_id} ({name}) needed {gib} GiB: see {log}'},
        {'match': '^failed nonzeroexitcode', 'hint': 'it failed'},              # the state line, any case
        {'match': 'never', 'hint': 'not this'},
        {'match': 'FAILED', 'hint': 'it failed'},                               # the same text once
    ])
    assert matching_hints(hints, failed(['CUDA out of memory: tried 12 GiB'])) == [
        'job 7 (srv) needed 12 GiB: see /w/srv-7.out', 'it failed']


def test_a_hint_for_one_job_applies_to_that_job_only():
    hints = compile_hints([{'match': '.', 'hint': 'download: {x}', 'job': 'dl'}, {'match': '(?P<x>zzz)?', 'hint': '{x}'}])
    assert matching_hints(hints, failed()) == ['?']
    assert matching_hints(hints, failed(name='dl'))[0] == 'download: {x}'
