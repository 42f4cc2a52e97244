# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure functions over a job's output file: its path from the ``--output`` pattern, the lines that tell of an
error, secrets masked before a line reaches a result or a log, and its last lines.

Nothing here reads a file or runs a command (wait_signals and the job_log module read the files); each function
takes text and returns data.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

_PATTERN_RE = re.compile(r'%(%|\d*[A-Za-z])')


def expand_output_pattern(pattern, job_id, name, user, work_dir):
    """Expand the job-level ``%`` patterns of an --output path (``%j %x %u %A %%``).

    Returns None when the pattern holds node- or task-level codes (``%N %n %t %s %a``...), which
    only the node knows.
    """
    if not pattern:
        return None
    values = {'j': str(job_id), 'J': str(job_id), 'A': str(job_id), 'x': name or '', 'u': user or '', '%': '%'}
    unknown = []

    def repl(match):
        code = match.group(1)
        if code == '%':
            return '%'
        width = code[:-1]
        letter = code[-1]
        if letter not in values:
            unknown.append(letter)
            return match.group(0)
        value = values[letter]
        if width and letter in 'jJA':
            value = value.zfill(int(width))
        return value

    path = _PATTERN_RE.sub(repl, pattern)
    if unknown:
        return None
    if not path.startswith('/') and work_dir:
        path = work_dir.rstrip('/') + '/' + path
    return path


#: Lines of a job's output that make the waiter ask Slurm at once instead of waiting for the backoff.
ERROR_LINE_RE = re.compile(
    r'Traceback \(most recent call last\)|\bError\b|\bERROR\b|srun: error|slurmstepd: error|error:|'
    r'\bKilled\b|CANCELLED AT|DUE TO TIME LIMIT|Out Of Memory|oom[-_]kill|Segmentation fault|core dumped|'
    r'Exited with exit code'
)

_SECRET_RES = (
    re.compile(r'''(api[_-]?key['"]?\s*[=:]\s*['"]?)([^'"\s,)}]+)''', re.IGNORECASE),
    re.compile(r'''(--api-key[= ]['"]?)([^'"\s]+)''', re.IGNORECASE),
    re.compile(r'''(Bearer\s+)([A-Za-z0-9._~+/=-]+)'''),
    re.compile(r'''((?:token|secret|password)['"]?\s*[=:]\s*['"]?)([^'"\s,)}]+)''', re.IGNORECASE),
)

REDACTED = '********'


def redact(text, secrets=()):
    """Remove secrets from text before it reaches a result, an exception or a log.

    Known secret values are replaced wherever they appear; ``api_key=...``, ``--api-key ...``,
    ``Bearer ...``, ``token=...`` style assignments are masked whatever their value (SGLang prints its
    server arguments, key included, in the job's log).
    """
    if not text:
        return text
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    for regex in _SECRET_RES:
        text = regex.sub(lambda m: m.group(1) + REDACTED, text)
    return text


def tail_lines(data, count=20, max_line=400):
    """The last ``count`` lines of ``data`` (str), each cut to ``max_line`` characters."""
    lines = data.splitlines()[-count:]
    return [line if len(line) <= max_line else line[:max_line] + '...' for line in lines]
