# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.glm.serve.plugins.test.regex_pattern import TestModule as JinjaTests, regex_pattern


@pytest.mark.parametrize('value', ['CUDA out of memory|torch\\.OutOfMemoryError', '^OUT_OF_MEMORY', '', '(?i)no space'])
def test_valid_patterns(value):
    assert regex_pattern(value) is True


@pytest.mark.parametrize('value', ['[unclosed', '(', '*oops', '(?P<x>a)(?P<x>b)', None, 42, ['a']])
def test_invalid_patterns_and_non_strings(value):
    assert regex_pattern(value) is False


def test_registered_name():
    assert JinjaTests().tests() == {'regex_pattern': regex_pattern}
