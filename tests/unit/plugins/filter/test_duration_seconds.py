# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The duration_seconds filter: durations as people write them, None for the rest (a role's check names it)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.glm.serve.plugins.filter.duration_seconds import duration_seconds


@pytest.mark.parametrize('value, seconds', [(60, 60), ('60', 60), ('90s', 90), ('15m', 900), ('15 min', 900),
                                            (' 2H ', 7200), (0, 0), ('0', 0)])
def test_durations(value, seconds):
    assert duration_seconds(value) == seconds


@pytest.mark.parametrize('value', ['15 minutes', '1.5h', '-5', -5, '', None, True, '15m30s', [15]])
def test_what_is_not_a_duration(value):
    assert duration_seconds(value) is None
