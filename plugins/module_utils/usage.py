# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The usage per team that the router's front door counts (router_proxy=glm or litellm), summed over days.

The proxy (roles/router/files/glm_gateway.py, UsageBook) keeps one JSON file in the work dir (layout.USAGE):
``{"version": 1, "updated": UNIX_TIME, "days": {"YYYY-MM-DD": {TEAM: {"requests", "errors", "limited",
"prompt_tokens", "completion_tokens"}}}}``, days in UTC, no key and no hash in it. deployment_info (status) shows
today's and this month's sums; the usage_report filter (playbook glm.serve.usage) any range of days.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
import time

COUNTERS = ('requests', 'errors', 'limited', 'prompt_tokens', 'completion_tokens')
DAY_RE = re.compile(r'^[0-9]{4}-[0-9]{2}-[0-9]{2}$')


def read_usage(path):
    """The usage document at PATH, or None when there is none (no proxy yet) or it cannot be read."""
    try:
        with open(path) as handle:
            doc = json.load(handle)
    except (IOError, OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get('days'), dict) else None


def _count(value):
    try:
        return max(int(value), 0)
    except (TypeError, ValueError):
        return 0


def totals(doc, first=None, last=None):
    """{team: {counter: sum}} over the days FIRST to LAST (YYYY-MM-DD, both included; None: no bound), teams sorted."""
    found = {}
    for day, teams in sorted(((doc or {}).get('days') or {}).items()):
        if not DAY_RE.match(day) or not isinstance(teams, dict):
            continue
        if (first and day < first) or (last and day > last):
            continue
        for team, counts in teams.items():
            if not isinstance(counts, dict):
                continue
            mine = found.setdefault(team, dict((c, 0) for c in COUNTERS))
            for counter in COUNTERS:
                mine[counter] += _count(counts.get(counter))
    return dict(sorted(found.items()))


def overall(by_team):
    """The sums of BY_TEAM (totals' result) over all teams."""
    return dict((c, sum(counts[c] for counts in by_team.values())) for c in COUNTERS)


def view(doc, now=None):
    """What status shows: today's and this month's sums per team (UTC days), and when the proxy last wrote; None
    without a usage file."""
    if doc is None:
        return None
    today = time.strftime('%Y-%m-%d', time.gmtime(now if now is not None else time.time()))
    return {'updated': doc.get('updated'), 'today': totals(doc, today, today),
            'month': totals(doc, today[:8] + '01', today)}


def team_text(team, counts):
    return '%s %d requests (%d errors, %d refused by its limits), %d prompt + %d completion tokens' % (
        team, counts['requests'], counts['errors'], counts['limited'], counts['prompt_tokens'], counts['completion_tokens'])


def lines(usage):
    """Status lines of view()'s result: one per team for this month, today's requests beside it."""
    if not usage:
        return []
    month, today = usage.get('month') or {}, usage.get('today') or {}
    if not month:
        return ['usage: no request through the proxy this month']
    return ['usage this month (UTC): %s; today %d requests' % (team_text(team, counts), (today.get(team) or {}).get('requests', 0))
            for team, counts in month.items()]


def report(doc, first=None, last=None):
    """The usage_report filter's result: the range, the sums per team and over all, and lines to print."""
    for name, day in (('usage_from', first), ('usage_to', last)):
        if day and not DAY_RE.match(day):
            raise ValueError('%s=%s is not a day: write it as YYYY-MM-DD (UTC), e.g. 2026-12-01' % (name, day))
    if first and last and first > last:
        raise ValueError('usage_from=%s is after usage_to=%s: give the first day, then the last' % (first, last))
    days = sorted(d for d in ((doc or {}).get('days') or {}) if DAY_RE.match(d) and (not first or d >= first) and (not last or d <= last))
    by_team = totals(doc, first, last)
    span = '%s to %s' % (first or (days[0] if days else '-'), last or (days[-1] if days else '-'))
    said = '%d teams' % len(by_team) if by_team else 'no request'
    out = ['usage %s (UTC days, %d with requests): %s' % (span, len(days), said)]
    out += ['  ' + team_text(team, counts) for team, counts in by_team.items()]
    if by_team:
        out.append('  ' + team_text('all teams:', overall(by_team)))
    return {'from': first, 'to': last, 'days': days, 'teams': by_team, 'total': overall(by_team), 'lines': out}
