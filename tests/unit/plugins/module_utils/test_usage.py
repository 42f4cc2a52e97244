# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The usage per team that the router's proxy counts, summed over days (module_utils/usage.py); the filter:
tests/unit/plugins/filter/test_usage_report_filter.py."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import json

import pytest

from ansible_collections.glm.serve.plugins.module_utils import usage


def counts(requests, errors=0, limited=0, prompt=0, completion=0):
    return {'requests': requests, 'errors': errors, 'limited': limited, 'prompt_tokens': prompt, 'completion_tokens': completion}


DOC = {'version': 1, 'updated': 1764806400, 'days': {
    '2026-11-30': {'team-a': counts(5, 1, 0, 50, 40)},
    '2026-12-01': {'team-a': counts(2, 0, 1, 20, 10), 'default': counts(1, 0, 0, 9, 3)},
    '2026-12-04': {'team-b': counts(7, 2, 3, 70, 35), 'team-a': counts(1, 0, 0, 10, 5)},
    'not-a-day': {'team-x': counts(100)},
}}


def test_totals_over_a_range_sum_each_team_and_skip_what_is_not_a_day():
    assert usage.totals(DOC, '2026-12-01', '2026-12-31') == {
        'default': counts(1, 0, 0, 9, 3), 'team-a': counts(3, 0, 1, 30, 15), 'team-b': counts(7, 2, 3, 70, 35)}
    assert usage.totals(DOC)['team-a'] == counts(8, 1, 1, 80, 55)
    assert 'team-x' not in usage.totals(DOC)
    assert usage.totals(None) == {}


def test_view_has_today_and_this_month_in_utc():
    now = calendar.timegm((2026, 12, 4, 23, 59, 0))
    got = usage.view(DOC, now=now)
    assert got['today'] == {'team-a': counts(1, 0, 0, 10, 5), 'team-b': counts(7, 2, 3, 70, 35)}
    assert got['month']['team-a'] == counts(3, 0, 1, 30, 15)
    assert got['updated'] == 1764806400
    assert usage.view(None) is None
    text = usage.lines(got)
    assert text[1] == ('usage this month (UTC): team-a 3 requests (0 errors, 1 refused by its limits), 30 prompt + 15 '
                       'completion tokens; today 1 requests')
    assert usage.lines({'month': {}, 'today': {}}) == ['usage: no request through the proxy this month']


def test_read_usage_tolerates_no_file_and_a_broken_one(tmp_path):
    assert usage.read_usage(str(tmp_path / 'none.json')) is None
    (tmp_path / 'bad.json').write_text('{"days": ')
    assert usage.read_usage(str(tmp_path / 'bad.json')) is None
    (tmp_path / 'good.json').write_text(json.dumps(DOC))
    assert usage.read_usage(str(tmp_path / 'good.json'))['days']['2026-12-04']['team-b']['requests'] == 7


def test_report_refuses_a_day_that_is_not_one():
    with pytest.raises(ValueError, match='usage_from=12/01/2026 is not a day'):
        usage.report(DOC, '12/01/2026')
