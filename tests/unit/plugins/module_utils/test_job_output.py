# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""job_output: a job's output path from its --output pattern, its error lines, secrets masked, its tail (these
tests were test_slurm_parse's until issue 22 moved the functions out of slurm_parse)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.glm.serve.plugins.module_utils import job_output as jo
from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp


def test_expand_output_pattern():
    assert jo.expand_output_pattern('%x-%j.out', '42', 'glm-serve', 'u', '/home/u/glm') == '/home/u/glm/glm-serve-42.out'
    assert jo.expand_output_pattern('/abs/slurm-%5j.out', '42', 'n', 'u', '/w') == '/abs/slurm-00042.out'
    assert jo.expand_output_pattern('%u/%%-%A.log', '42', 'n', 'u', '/w') == '/w/u/%-42.log'
    assert jo.expand_output_pattern('%N-%j.out', '42', 'n', 'u', '/w') is None


def test_redact():
    key = 'abcdef0123456789'
    text = "server_args=ServerArgs(model_path='/m', api_key='%s', port=30000)\n--api-key %s\nAuthorization: Bearer %s" % (key, key, key)
    out = jo.redact(text, [key])
    assert key not in out
    assert "api_key='********'" in out
    # without knowing the key, the usual spellings are still masked
    out = jo.redact("api_key='zzzzzzzz' --api-key=yyyyyyy token: xxxxxxx")
    assert 'zzzzzzzz' not in out and 'yyyyyyy' not in out and 'xxxxxxx' not in out


def test_error_line_regex():
    assert jo.ERROR_LINE_RE.search('Traceback (most recent call last):')
    assert jo.ERROR_LINE_RE.search('srun: error: node1: task 0: Exited with exit code 1')
    assert jo.ERROR_LINE_RE.search('slurmstepd: error: *** JOB 12 ON node1 CANCELLED AT 2026-11-30T09:00:00 ***')
    assert not jo.ERROR_LINE_RE.search('INFO: loading weights 10/100')


def test_tail_lines():
    assert jo.tail_lines('\n'.join(str(i) for i in range(50)), 3) == ['47', '48', '49']
    assert jo.tail_lines('x' * 500, 1, max_line=10) == ['x' * 10 + '...']


def test_slurm_parse_still_names_them():
    """The callers that ask slurm_parse for them get the same objects."""
    for name in ('expand_output_pattern', 'ERROR_LINE_RE', 'REDACTED', 'redact', 'tail_lines'):
        assert getattr(sp, name) is getattr(jo, name)
