# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The bad-node policy: the list and its TTL, the --exclude it makes, and when a failure puts a node on it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from ansible_collections.glm.serve.plugins.module_utils import bad_nodes as bn
from ansible_collections.glm.serve.plugins.module_utils.job_waiter import WaitFailed
from ansible_collections.glm.serve.plugins.module_utils.slurm_errors import ActionError

PATTERN = r'GPU check failed on (?P<node>\S+): (?P<cause>.+)$'


def spec(path, **extra):
    return dict(dict(file=str(path), pattern=PATTERN, ttl=3600, retries=2, nodes=[], job_nodes=1), **extra)


def failure(job_id='10', tail=('GPU check failed on n2: ECC errors',), timed_out=False):
    job = {'job_id': job_id, 'name': 'srv', 'state': 'FAILED', 'nodes': 'n2'}
    return WaitFailed('job %s ended FAILED' % job_id, job=job, log_tail=list(tail), timed_out=timed_out)


def test_entries_expire_after_the_ttl(tmp_path):
    path = tmp_path / 'bad.json'
    path.write_text(json.dumps({'n1': {'since': 1000, 'cause': 'a'}, 'n2': {'since': 4000, 'cause': 'b'},
                                'n3': {'cause': 'no since'}, 'n4': 'junk'}))
    assert sorted(bn.read_bad_nodes(str(path), 3600, now=4599)) == ['n1', 'n2']
    assert sorted(bn.read_bad_nodes(str(path), 3600, now=4600)) == ['n2']       # n1 is an hour old
    assert bn.read_bad_nodes(str(path), 3600, now=7600) == {}


def test_a_missing_or_broken_list_is_empty(tmp_path):
    assert bn.read_bad_nodes(str(tmp_path / 'missing'), 60) == {}
    (tmp_path / 'l').write_text(u'[]')
    assert bn.read_bad_nodes(str(tmp_path / 'l'), 60) == {}


def test_sbatch_excludes_collects_every_form():
    assert bn.sbatch_excludes(['--exclude=a,b', '-x', 'c', '-xd', '--time=1', '--exclude', 'e']) == (['--time=1'], list('abcde'))


def test_sbatch_args_join_the_list_and_the_users_exclude(tmp_path):
    path = tmp_path / 'bad.json'
    assert bn.sbatch_args_avoiding({'sbatch_args': ['-x', 'n9']}) == (['-x', 'n9'], None)
    assert bn.sbatch_args_avoiding({'sbatch_args': ['-t', '5'], 'bad_nodes': spec(path)}) == (['-t', '5'], None)
    bn.write_bad_nodes(str(path), {'n2': {'since': 2e9, 'cause': 'ECC'}}, None)
    assert bn.sbatch_args_avoiding({'sbatch_args': ['-x', 'n9', '-t', '5'], 'bad_nodes': spec(path)}) == (
        ['-t', '5', '--exclude=n2,n9'], ['n2'])
    assert oct(os.stat(str(path)).st_mode & 0o777) == '0o600'


def test_nothing_is_submitted_when_too_few_nodes_are_left(tmp_path):
    path = tmp_path / 'bad.json'
    bn.write_bad_nodes(str(path), {'n1': {'since': 2e9, 'cause': 'ECC'}}, None)
    with pytest.raises(ActionError) as caught:
        bn.sbatch_args_avoiding({'bad_nodes': spec(path, nodes=['n1', 'n2'], job_nodes=2)})
    assert caught.value.msg.startswith('the job needs 2 nodes and only n2 of the nodes it can run on (n1, n2) is not')
    assert 'entries expire 1 h after' in caught.value.msg
    assert caught.value.fields == {'excluded_nodes': ['n1']}
    with pytest.raises(ActionError, match='every node the job can run on'):
        bn.sbatch_args_avoiding({'bad_nodes': spec(path, nodes=['n1'])})


def test_bad_node_of_a_failure(tmp_path):
    assert bn.bad_node_of(spec(tmp_path), failure(), '10') == ('n2', 'ECC errors')
    assert bn.bad_node_of(spec(tmp_path), failure(), '11') == (None, None)                 # another job failed
    assert bn.bad_node_of(spec(tmp_path), failure(timed_out=True), '10') == (None, None)
    assert bn.bad_node_of(spec(tmp_path, pattern='Xid'), failure(tail=['Xid 79']), '10') == ('n2', 'Xid')


def test_a_node_failure_is_listed_and_retried_while_retries_last(tmp_path):
    path, warnings = tmp_path / 'bad.json', []
    again, entry = bn.avoid_and_retry(spec(path), failure(), '10', 0, warnings.append, now=1000)
    assert again and entry == {'node': 'n2', 'cause': 'ECC errors', 'job_id': '10'}
    assert json.loads(path.read_text()) == {'n2': {'cause': 'ECC errors', 'since': 1000, 'job_id': '10'}}
    assert 'submitting it again without that node' in warnings[0] and 'for 1 h' in warnings[0]


def test_no_retry_after_the_last_attempt_or_without_nodes(tmp_path):
    exc = failure()
    again, entry = bn.avoid_and_retry(spec(tmp_path / 'b.json'), exc, '10', 2, lambda m: None)
    assert not again and entry['node'] == 'n2' and exc.notes[-1].endswith('not submitted again: after 3 attempts')
    exc = failure()
    again, _entry = bn.avoid_and_retry(spec(tmp_path / 'c.json', nodes=['n2']), exc, '10', 0, lambda m: None)
    assert not again and exc.notes[-1].endswith('no other node is left')
    assert bn.avoid_and_retry(spec(tmp_path / 'd.json'), failure(tail=['OOM']), '10', 0, None) == (False, None)


def test_duration():
    assert bn.duration(86400) == '24 h' and bn.duration(90) == '90 s'
