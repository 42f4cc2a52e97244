# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""duration_seconds: the seconds of a duration written as a person would (90, 90s, 15m, 15min, 2h), for YAML."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

DURATION = re.compile(r'^([0-9]+)\s*(s|m|min|h)?$')
UNIT = {None: 1, 's': 1, 'm': 60, 'min': 60, 'h': 3600}


def duration_seconds(value):
    """Whole seconds of VALUE (a number of seconds, or a number with s, m, min or h), None when it is none of those."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    match = DURATION.match(str(value).strip().lower())
    return int(match.group(1)) * UNIT[match.group(2)] if match else None


class FilterModule(object):
    def filters(self):
        return {'duration_seconds': duration_seconds}
