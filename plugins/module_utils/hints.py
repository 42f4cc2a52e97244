# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``hints`` option: what to do, said beside a failure whose text matches a pattern."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.glm.serve.plugins.module_utils.slurm_errors import ActionError


def compile_hints(hints):
    """Check the hints' patterns; returns [(compiled, hint, job)]. Raises ActionError naming a bad pattern."""
    compiled = []
    for index, hint in enumerate(hints or []):
        try:
            compiled.append((re.compile(hint['match'], re.IGNORECASE | re.MULTILINE), hint['hint'], hint.get('job')))
        except re.error as exc:
            raise ActionError('hints[%d].match %r is not a valid regular expression: %s' % (index, hint['match'], exc))
    return compiled


def failure_text(failed, exc):
    """What a hint's pattern is matched against: "STATE REASON EXIT_CODE", the failure message, the log tail."""
    head = '%s %s %s' % (failed.get('state') or '', failed.get('reason') or '', failed.get('exit_code') or '')
    return '\n'.join([head, exc.msg] + list(getattr(exc, 'log_tail', None) or []))


def fill_hint(hint, match, failed, exc):
    """The hint's text with {job_id}, {name}, {log} (the failed job's) and the pattern's named groups filled in."""
    hint = hint.replace('{job_id}', str(failed.get('job_id') or '?')).replace('{name}', str(failed.get('name') or '?'))
    hint = hint.replace('{log}', str(getattr(exc, 'log_path', None) or failed.get('output_path') or '?'))
    for group, value in match.groupdict().items():         # the pattern's named groups: {group}
        hint = hint.replace('{%s}' % group, value if value is not None else '?')
    return hint


def matching_hints(hints, exc):
    """The hint texts whose pattern matches the failed job's "STATE REASON EXIT_CODE", the failure message and
    the log tail; a hint with ``job`` applies only when that job (name or id) is the one that failed. In a hint,
    {job_id}, {name} and {log} are the job's, and {GROUP} what the pattern's named group GROUP matched."""
    failed = getattr(exc, 'failed_job', None) or getattr(exc, 'job', None) or {}
    text = failure_text(failed, exc)
    found = []
    for pattern, hint, job in hints:
        if job and job not in (failed.get('name'), failed.get('job_id')):
            continue
        match = pattern.search(text)
        if match:
            hint = fill_hint(hint, match, failed, exc)
            if hint not in found:
                found.append(hint)
    return found
