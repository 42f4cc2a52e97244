# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one retry/backoff primitive, on a fake clock."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.glm.serve.plugins.module_utils.backoff import Backoff, grow, retry


class Flaky(Exception):
    pass


def failing(times, value='ok', error=Flaky):
    """A call that raises ``error`` ``times`` times, then returns value; ``calls`` counts the calls."""
    state = {'calls': 0}

    def call():
        state['calls'] += 1
        if state['calls'] <= times:
            raise error('try %d' % state['calls'])
        return value
    call.state = state
    return call


def test_backoff_doubles_up_to_the_cap_and_resets():
    backoff = Backoff(1.0, 30.0)
    assert [backoff.next() for step in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    backoff.reset()
    assert backoff.next() == 1


def test_backoff_with_factor_one_is_a_steady_poll():
    backoff = Backoff(0.2, 0.2, factor=1)
    assert [backoff.next() for step in range(3)] == [0.2, 0.2, 0.2]


def test_jitter_takes_up_to_its_fraction_off_each_pause():
    backoff = Backoff(4.0, 30.0, jitter=0.5, rand=lambda: 1.0)
    assert [backoff.next() for step in range(3)] == [2.0, 4.0, 8.0]
    assert Backoff(4.0, jitter=0.5, rand=lambda: 0.0).next() == 4.0


def test_grow_is_one_step_of_a_capped_ramp():
    assert grow(8, 10) == 10 and grow(2, 10) == 4 and grow(2, 10, factor=1.5) == 3


def test_retry_rides_out_errors_with_the_ramp(clock):
    value, errors = retry(failing(3), clock, 120, Flaky)
    assert value == 'ok' and [str(e) for e in errors] == ['try 1', 'try 2', 'try 3']
    assert clock.sleeps == [1, 2, 4] and clock.t == 7


def test_retry_gives_up_at_the_deadline_with_the_last_error(clock):
    call = failing(100)
    with pytest.raises(Flaky, match='try 5'):
        retry(call, clock, 10, Flaky)
    assert clock.sleeps == [1, 2, 4, 3]          # the last pause is cut at the deadline
    assert clock.t == 10 and call.state['calls'] == 5


def test_retry_without_clip_sleeps_whole_pauses_and_checks_after(clock):
    with pytest.raises(Flaky):
        retry(failing(100), clock, 10, Flaky, clip=False)
    assert clock.sleeps == [1, 2, 4, 8]


def test_timeout_zero_tries_once(clock):
    with pytest.raises(Flaky):
        retry(failing(1), clock, 0, Flaky)
    assert clock.sleeps == []


def test_other_errors_are_not_retried(clock):
    with pytest.raises(KeyError):
        retry(failing(1, error=KeyError), clock, 60, Flaky)
    assert clock.sleeps == []


def test_between_can_end_the_retries_with_a_value(clock):
    seen = []

    def between(exc):
        seen.append(str(exc))
        return 'adopted' if len(seen) == 2 else None
    assert retry(failing(100), clock, 60, Flaky, between=between)[0] == 'adopted'
    assert seen == ['try 1', 'try 2'] and clock.sleeps == [1, 2]
