# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""deployment_info's module: the exact Slurm commands it runs (one squeue with the comment field) and what it returns."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp
from ansible_collections.glm.serve.plugins.modules import deployment_info


def run(run_module, args, answers):
    """deployment_info's result, and the commands it ran (each answered by the first ``answers`` entry that matches)."""
    calls = []

    def run_command(module, argv, **kwargs):
        calls.append(list(argv))
        for match, answer in answers:
            if match(argv):
                return answer
        return pytest.fail('unexpected command %r' % (argv,))
    return run_module(deployment_info.main, args, run_command), calls


def squeue_line(*values):
    return sp.SEP.join(values)


def test_one_squeue_with_the_comment(run_module, tmp_path):
    # job_id state reason nodes user partition elapsed time_limit end_time dependency work_dir comment name
    listing = '\n'.join([
        squeue_line('41', 'RUNNING', 'None', 'node1', 'u', 'p', '1:00', '8:00:00', '2026-12-01T18:00:00', '(null)', '/w',
                    'glm.serve:glm-serve:replica:1', 'glm-serve'),
        squeue_line('42', 'RUNNING', 'None', 'node2', 'u', 'p', '1:00', '8:00:00', '2026-12-01T18:00:00', '(null)', '/w',
                    'glm.serve:glm-serve-2:replica:1', 'glm-serve-2'),
        squeue_line('40', 'COMPLETED', 'None', 'node3', 'u', 'p', '5:00', '2:00:00', '2026-12-01T10:00:00', '(null)', '/w',
                    'glm.serve:glm-serve:download', 'glm-download'),
    ]) + '\n'
    result, calls = run(run_module, {'work_dir': str(tmp_path), 'user': 'u'}, [
        (lambda argv: argv[1:] == ['--version'], (0, 'slurm 22.05.8\n', '')),
        (lambda argv: argv[0].endswith('squeue'), (0, listing, '')),
    ])
    assert not result['failed'], result
    squeues = [c for c in calls if c[0].endswith('squeue') and '--version' not in c]
    assert squeues == [['/usr/bin/squeue', '--local', '-h', '-t', 'all', '-u', 'u', '-o', sp.squeue_format(
        tuple(f for f in sp.SQUEUE_FIELDS if f[0] != 'name') + (('comment', '%k'), ('name', '%j')))]]
    assert result['polls'] == 1 and result['accounting_calls'] == 0
    assert [(j['job_id'], j['role'], j['replica']) for j in result['jobs']] == [('40', 'download', None), ('41', 'replica', 1)]
    assert result['server']['job_id'] == '41' and result['replicas'] == [] and result['router'] is None
    assert result['layout']['files']['router_workers'] == str(tmp_path / 'router-workers.json')
