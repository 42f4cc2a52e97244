# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The usage per team that the router's proxy counts, summed over days (module_utils/usage.py), and the filter."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import json

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.glm.serve.plugins.filter.usage_report import usage_report
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


def test_report_and_the_filter():
    got = usage_report(DOC, '2026-12-01', '2026-12-04')
    assert got['days'] == ['2026-12-01', '2026-12-04']
    assert got['total'] == counts(11, 2, 4, 109, 53)
    assert got['lines'][0] == 'usage 2026-12-01 to 2026-12-04 (UTC days, 2 with requests): 3 teams'
    assert got['lines'][-1].startswith('  all teams: 11 requests (2 errors, 4 refused by its limits)')
    assert usage_report({}, '', '')['lines'] == ['usage - to - (UTC days, 0 with requests): no request']
    with pytest.raises(AnsibleFilterError, match='usage_from=12/01/2026 is not a day: write it as YYYY-MM-DD'):
        usage_report(DOC, '12/01/2026')
    with pytest.raises(AnsibleFilterError, match='after usage_to'):
        usage_report(DOC, '2026-12-05', '2026-12-01')
    with pytest.raises(AnsibleFilterError, match='expects the usage file as a dict'):
        usage_report('text')
