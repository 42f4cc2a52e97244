# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: regex_pattern
short_description: Is the value a valid Python regular expression?
version_added: 1.0.0
author:
  - glm.serve maintainers (@glm-serve)
description:
  - True when the value is a string that Python's C(re) module compiles, false otherwise (no exception).
  - The roles use it to refuse a bad C(match) in C(server_hints) or C(download_hints) with a message naming the
    variable, before anything is submitted to Slurm.
options:
  _input:
    description: The pattern to check.
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Refuse a hint whose pattern does not compile
  ansible.builtin.assert:
    that: item.match is glm.serve.regex_pattern
    fail_msg: "server_hints[{{ idx }}].match={{ item.match | to_json }} is not a valid regular expression"
  loop: "{{ server_hints }}"
  loop_control:
    index_var: idx
"""

RETURN = r"""
_value:
  description: Whether the value compiles as a regular expression.
  type: bool
"""

import re


def regex_pattern(value):
    """True when value is a string that re.compile accepts."""
    if not isinstance(value, str):
        return False
    try:
        re.compile(value)
    except (re.error, OverflowError, RecursionError):
        return False
    return True


class TestModule(object):
    """Jinja2 tests of glm.serve."""

    def tests(self):
        return {'regex_pattern': regex_pattern}
