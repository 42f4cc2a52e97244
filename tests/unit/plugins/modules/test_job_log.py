# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""job_log: the newest job's file, the tail, following by offset, secrets masked, no Slurm."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import threading
import time

import pytest

from ansible_collections.glm.serve.plugins.modules import job_log

KEY = 'f00d' * 12


@pytest.fixture
def work(tmp_path):
    (tmp_path / 'api-key').write_text(KEY + '\n')
    (tmp_path / 'glm-serve-99.out').write_text(u'old job\n')
    (tmp_path / 'glm-serve-1000.out').write_text(
        u''.join('line %d\n' % i for i in range(1, 61))
        + u"server_args={'api_key': '%s', 'port': 30000}\n" % KEY + u'curl -H "Authorization: Bearer %s"\n' % KEY)
    (tmp_path / 'glm-download-1001.out').write_text(u'Fetching 41 files\n')
    (tmp_path / 'other-2000.out').write_text(u'not ours\n')
    return tmp_path


def test_the_newest_jobs_tail_with_the_key_masked(run_module, work):
    result = run_module(job_log.main, {'name': 'glm-serve', 'chdir': str(work), 'lines': 5, 'key_file': str(work / 'api-key')})
    assert not result['failed'] and result['job_id'] == '1000' and result['path'] == str(work / 'glm-serve-1000.out')
    assert result['lines'][:3] == ['line 58', 'line 59', 'line 60']
    assert "'api_key': '********'" in result['lines'][3] and 'Bearer ********' in result['lines'][4]
    assert KEY not in json.dumps(result)
    assert result['offset'] == result['size'] == (work / 'glm-serve-1000.out').stat().st_size


def test_following_returns_what_was_written_after_the_offset_and_keeps_a_partial_line(run_module, work):
    first = run_module(job_log.main, {'name': 'glm-serve', 'chdir': str(work), 'lines': 1})
    log = work / 'glm-serve-1000.out'

    def write():
        time.sleep(0.3)
        with open(str(log), 'a') as handle:
            handle.write('loading 1\nloading 2\nloa')
    writer = threading.Thread(target=write)
    writer.start()
    step = run_module(job_log.main, {'name': 'glm-serve', 'chdir': str(work), 'job_id': '1000', 'offset': first['offset'], 'wait': 1})
    writer.join()
    assert step['lines'] == ['loading 1', 'loading 2']                     # the partial "loa" waits
    with open(str(log), 'a') as handle:
        handle.write('ded\n')
    last = run_module(job_log.main, {'name': 'glm-serve', 'chdir': str(work), 'job_id': '1000', 'offset': step['offset']})
    assert last['lines'] == ['loaded'] and last['offset'] == log.stat().st_size


def test_no_file_and_a_missing_job(run_module, work):
    none = run_module(job_log.main, {'name': 'nothing', 'chdir': str(work)})
    assert not none['failed'] and none['path'] is None and none['lines'] == []
    missing = run_module(job_log.main, {'name': 'glm-serve', 'chdir': str(work), 'job_id': '5'})
    assert missing['failed'] and 'glm-serve-5.out does not exist' in missing['msg']


def test_secrets_of_an_unreadable_key_file_masks_by_pattern_only(work):
    """secrets_of (issue 22 split it out of main): the key of the file, none when it cannot be read."""
    assert job_log.secrets_of(str(work / 'api-key')) == (KEY,)
    assert job_log.secrets_of(str(work / 'no-such-key')) == ()
    assert job_log.secrets_of(None) == ()


def test_the_replicas_key_of_the_work_dir_is_masked_too(run_module, work):
    """A replica behind the router serves the work dir's replica-key (issue 37 item 2), which SGLang prints in its
    start-up line; the logs playbook passes the operator's key only."""
    replica = 'cd' * 24
    (work / 'replica-key').write_text(replica + '\n')
    (work / 'glm-serve-2-1002.out').write_text(u'the key %s\nthe operator key %s\n' % (replica, KEY))
    result = run_module(job_log.main, {'name': 'glm-serve-2', 'chdir': str(work), 'key_file': str(work / 'api-key')})
    assert not result['failed'] and result['lines'] == ['the key ********', 'the operator key ********'], result
    assert job_log.secrets_of(str(work / 'api-key'), str(work)) == (KEY, replica)
