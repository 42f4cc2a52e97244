# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The filter glm.serve.usage_report: the usage file summed over a range of days, its errors as filter errors."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.glm.serve.plugins.filter.usage_report import usage_report


def counts(requests, errors=0, limited=0, prompt=0, completion=0):
    return {'requests': requests, 'errors': errors, 'limited': limited, 'prompt_tokens': prompt, 'completion_tokens': completion}


DOC = {'version': 1, 'updated': 1764806400, 'days': {
    '2026-11-30': {'team-a': counts(5, 1, 0, 50, 40)},
    '2026-12-01': {'team-a': counts(2, 0, 1, 20, 10), 'default': counts(1, 0, 0, 9, 3)},
    '2026-12-04': {'team-b': counts(7, 2, 3, 70, 35), 'team-a': counts(1, 0, 0, 10, 5)},
}}


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
