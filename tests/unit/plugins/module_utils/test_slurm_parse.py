# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parsers over output captured from the local Slurm 22.05 cluster (fixtures/capture.sh)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp

FIXTURES = os.path.join(os.path.dirname(__file__), 'fixtures')


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def test_squeue_format_uses_unit_separator():
    assert sp.squeue_format() == '\x1f'.join(code for _k, code in sp.SQUEUE_FIELDS)
    assert sp.squeue_format(sp.SQUEUE_STATE_FIELDS) == '%i\x1f%T'


def test_parse_squeue_chain():
    jobs = dict((j['job_id'], j) for j in sp.parse_squeue(fixture('squeue_chain.txt')))
    assert set(jobs) == set(['20', '21', '22', '23', '24'])
    assert jobs['20']['state'] == 'FAILED' and jobs['20']['reason'] == 'NonZeroExitCode'
    assert jobs['20']['dependency'] is None
    assert jobs['21']['state'] == 'CANCELLED' and jobs['21']['reason'] == 'DependencyNeverSatisfied'
    assert jobs['21']['dependency'] == 'afterok:20(failed)'
    assert jobs['21']['nodes'] is None
    assert jobs['22']['state'] == 'PENDING' and jobs['22']['reason'] == 'DependencyNeverSatisfied'
    assert jobs['24']['reason'] == 'Dependency' and jobs['24']['dependency'] == 'afterok:23(unfulfilled)'
    assert jobs['23']['state'] == 'RUNNING' and jobs['23']['nodes'] == 'node1' and jobs['23']['reason'] == 'None'
    assert jobs['23']['end_time'] == 'NONE'
    assert jobs['23']['work_dir'] == '/home/glmuser/capture'
    assert jobs['23']['name'] == 'cap-long' and jobs['23']['user'] == 'glmuser' and jobs['23']['partition'] == 'compute-h100'


def test_parse_squeue_pending_reasons():
    jobs = sp.parse_squeue(fixture('squeue_mixed_early.txt'))
    assert [(j['job_id'], j['state'], j['reason']) for j in jobs] == [
        ('20', 'PENDING', 'Priority'), ('21', 'PENDING', 'Dependency'), ('22', 'PENDING', 'Dependency'),
        ('23', 'PENDING', 'Priority'), ('24', 'PENDING', 'Dependency')]
    assert jobs[0]['end_time'] is None  # N/A


def test_parse_squeue_name_with_separator_characters():
    (job,) = sp.parse_squeue(fixture('squeue_odd_name.txt'))
    assert job['name'] == 'odd|name x'
    assert job['state'] == 'RUNNING'


def test_parse_squeue_completed_and_empty():
    (job,) = sp.parse_squeue(fixture('squeue_completed.txt'))
    assert job['state'] == 'COMPLETED'
    assert sp.parse_squeue('') == []
    assert sp.parse_squeue('squeue: warning: something\n') == []


def test_parse_squeue_state_only():
    assert sp.parse_squeue('4123\x1fRUNNING\n4124\x1fPENDING\n', sp.SQUEUE_STATE_FIELDS) == [
        {'job_id': '4123', 'state': 'RUNNING'}, {'job_id': '4124', 'state': 'PENDING'}]


@pytest.mark.parametrize('name, state, reason, dependency, exit_code', [
    ('scontrol_pending_dependency.txt', 'PENDING', 'Dependency', 'afterok:23(unfulfilled)', '0:0'),
    ('scontrol_running.txt', 'RUNNING', 'None', None, '0:0'),
    ('scontrol_failed.txt', 'FAILED', 'NonZeroExitCode', None, '3:0'),
    ('scontrol_cancelled.txt', 'CANCELLED', 'None', None, '0:15'),
    ('scontrol_completed.txt', 'COMPLETED', 'None', None, '0:0'),
    ('scontrol_cancelled_never_satisfied.txt', 'CANCELLED', 'DependencyNeverSatisfied', 'afterok:20(failed)', '0:0'),
    ('scontrol_pending_never_satisfied.txt', 'PENDING', 'DependencyNeverSatisfied', 'afterok:20(failed)', '0:0'),
])
def test_parse_scontrol(name, state, reason, dependency, exit_code):
    (job,) = sp.parse_scontrol_jobs(fixture(name))
    assert job['state'] == state
    assert job['reason'] == reason
    assert job['dependency'] == dependency
    assert job['exit_code'] == exit_code
    assert job['user'] == 'glmuser'
    assert job['output_path'].startswith('/home/glmuser/capture/')
    assert job['output_path'].endswith('-%s.out' % job['job_id'])
    assert job['work_dir'] == '/home/glmuser/capture'


def test_parse_scontrol_running_details():
    (job,) = sp.parse_scontrol_jobs(fixture('scontrol_running.txt'))
    assert job['nodes'] == 'node1'
    assert job['name'] == 'cap-long'
    assert job['partition'] == 'compute-h100'
    assert job['time_limit'] == 'UNLIMITED'


def test_parse_scontrol_odd_name():
    (job,) = sp.parse_scontrol_jobs(fixture('scontrol_odd_name.txt'))
    assert job['name'] == 'odd|name x'
    assert job['output_path'] == '/home/glmuser/capture/odd|name x-30.out'


def test_parse_scontrol_empty():
    assert sp.parse_scontrol_jobs('') == []


def test_invalid_job_id_and_controller_down():
    assert sp.is_invalid_job_id(fixture('squeue_invalid.stderr'))
    assert sp.is_invalid_job_id(fixture('scontrol_invalid.stderr'))
    assert not sp.is_transient_error(fixture('scontrol_invalid.stderr'))
    assert sp.is_transient_error(fixture('squeue_down.stderr'))
    assert sp.is_transient_error(fixture('scontrol_down.stderr'))
    assert sp.is_transient_error('slurm_load_jobs error: Socket timed out on send/recv operation')
    assert sp.is_transient_error('sbatch: error: Batch job submission failed: Zero Bytes were transmitted or received')
    assert not sp.is_transient_error(fixture('sbatch_invalid_partition.stderr'))


@pytest.mark.parametrize('name, words', [
    ('sbatch_invalid_partition.stderr', 'sinfo -s'),
    ('sbatch_node_config.stderr', 'no node of the partition offers'),
    ('sbatch_memory.stderr', 'no node has that much memory'),
])
def test_sbatch_hints(name, words):
    assert words in sp.sbatch_hint(fixture(name))


def test_sbatch_hint_unknown():
    assert sp.sbatch_hint('sbatch: error: something new') is None


@pytest.mark.parametrize('text, expected', [
    ('4123\n', ('4123', None)),
    ('4123;west\n', ('4123', 'west')),
    ('sbatch: warning: foo\n77\n', ('77', None)),
])
def test_parse_sbatch_parsable(text, expected):
    assert sp.parse_sbatch_parsable(text) == expected


def test_parse_sbatch_parsable_error():
    with pytest.raises(ValueError):
        sp.parse_sbatch_parsable('Submitted batch job\n')


@pytest.mark.parametrize('text, version, parts', [
    (None, None, None),
    ('slurm 24.11.1\n', '24.11.1', (24, 11, 1)),
    ('slurm 25.05.0-0rc1\n', '25.05.0', (25, 5, 0)),
    ('slurm 23.11\n', '23.11', (23, 11, 0)),
])
def test_parse_version(text, version, parts):
    assert sp.parse_version(text) == (version, parts)


def test_parse_version_captured():
    assert sp.parse_version(fixture('squeue_version.txt')) == ('22.05.8', (22, 5, 8))


def test_parse_dependency():
    assert sp.parse_dependency('afterok:20(failed)') == [{'type': 'afterok', 'job_id': '20', 'status': 'failed'}]
    assert sp.parse_dependency('afterok:1:2(unfulfilled),afterany:7_*(failed)') == [
        {'type': 'afterok', 'job_id': '1', 'status': 'unfulfilled'},
        {'type': 'afterok', 'job_id': '2', 'status': 'unfulfilled'},
        {'type': 'afterany', 'job_id': '7', 'status': 'failed'}]
    assert sp.parse_dependency('after:5+10(unfulfilled)') == [{'type': 'after', 'job_id': '5', 'status': 'unfulfilled'}]
    assert sp.parse_dependency('singleton(unfulfilled)') == [{'type': 'singleton', 'job_id': None, 'status': 'unfulfilled'}]
    assert sp.parse_dependency(None) == []
    assert sp.parse_dependency('(null)') == []


def test_format_dependency():
    assert sp.format_dependency([{'type': 'afterok', 'job_ids': ['1', '2']}, {'type': 'afterany', 'job_ids': ['3;west']},
                                 {'type': 'singleton', 'job_ids': None}]) == 'afterok:1:2,afterany:3,singleton'
    assert sp.format_dependency(None) == ''
    with pytest.raises(ValueError):
        sp.format_dependency([{'type': 'afterok', 'job_ids': []}])


@pytest.mark.parametrize('nodes, first', [
    ('node1', 'node1'), ('node[1-2]', 'node1'), ('gpu-[007-008,010]', 'gpu-007'), ('a1,b2', 'a1'),
    ('rack[2-3]-n[1-4]', 'rack2-n[1-4]'), ('', None), (None, None),
])
def test_first_host(nodes, first):
    assert sp.first_host(nodes) == first


# -- sacct (Slurm 24.11.5 with slurmdbd, captured: fixtures/sacct-trixie-*.txt) -----------------------------------

_CAPTURED_FIELDS = ('JobID', 'JobName', 'State', 'ExitCode', 'DerivedExitCode', 'Reason', 'Restarts', 'Submit', 'Start',
                    'End', 'Elapsed', 'Timelimit', 'NodeList')


@pytest.mark.parametrize('name, state, exit_code, elapsed, extra', [
    ('completed', 'COMPLETED', '0:0', '00:00:00', {}),
    ('failed', 'FAILED', '3:0', '00:00:00', {}),
    ('cancelled', 'CANCELLED', '0:0', '00:00:03', {'cancelled_by': '1000'}),
    ('timeout', 'TIMEOUT', '0:0', '00:01:21', {'time_limit': '00:01:00'}),
])
def test_parse_sacct_of_real_output(name, state, exit_code, elapsed, extra):
    """The captured lines (with a header, and the batch step, which is skipped) in the capture's field order."""
    with open(os.path.join(FIXTURES, 'sacct-trixie-%s.txt' % name)) as handle:
        jobs = sp.parse_sacct(handle.read(), fields=_CAPTURED_FIELDS)
    assert len(jobs) == 1, jobs
    job = jobs[0]
    assert job['state'] == state and job['exit_code'] == exit_code and job['elapsed'] == elapsed
    assert job['nodes'] == 'node1' and job['source'] == 'accounting' and job['reason'] is None
    assert job['name'] == 'cap-' + name and job['end_time'].startswith('2026-12-01T23:4')
    for key, value in extra.items():
        assert job[key] == value, (key, job)


# Output of newer Slurm, captured in the Debian roots of tests/tooling/cluster (fixtures/capture-release.sh):
# trixie = Slurm 24.11.5, sid = Slurm 26.05.5.
@pytest.mark.parametrize('release', ['trixie', 'sid'])
@pytest.mark.parametrize('name, state, reason, exit_code', [
    ('running', 'RUNNING', 'None', '0:0'),
    ('pending', 'PENDING', 'Dependency', '0:0'),
    ('pending-after-cancel', 'PENDING', 'DependencyNeverSatisfied', '0:0'),
    ('completed', 'COMPLETED', 'None', '0:0'),
    ('failed', 'FAILED', 'NonZeroExitCode', '3:0'),
    ('cancelled', 'CANCELLED', 'None', '0:15'),
    ('timeout', 'TIMEOUT', 'TimeLimit', '0:15'),
])
def test_parse_scontrol_of_newer_slurm(release, name, state, reason, exit_code):
    (job,) = sp.parse_scontrol_jobs(fixture('scontrol-%s-%s.txt' % (release, name)))
    assert (job['state'], job['reason'], job['exit_code']) == (state, reason, exit_code)
    assert job['output_path'].endswith('-%s.out' % job['job_id'])
    assert job['user'] == 'glmuser'


def test_parse_scontrol_submit_line_is_one_value():
    """Slurm 26.05 prints SubmitLine= (the sbatch command line, with spaces and NAME=value words) on a line of
    its own: none of its words may become a field."""
    text = fixture('scontrol-sid-running.txt').replace(
        'SubmitLine=sbatch', 'SubmitLine=sbatch --comment x JobState=FAILED Reason=Oops')
    (record,) = sp.parse_scontrol_records(text)
    assert record['SubmitLine'].startswith('sbatch --comment x JobState=FAILED Reason=Oops')
    (job,) = sp.parse_scontrol_jobs(text)
    assert job['state'] == 'RUNNING' and job['reason'] == 'None'


@pytest.mark.parametrize('release', ['trixie', 'sid'])
def test_parse_squeue_only_job_state_of_newer_slurm(release):
    rows = sp.parse_squeue(fixture('squeue-only-job-state-%s-ended.txt' % release), sp.SQUEUE_STATE_FIELDS)
    assert sorted(row['state'] for row in rows) == ['CANCELLED', 'COMPLETED', 'FAILED', 'PENDING', 'TIMEOUT']


@pytest.mark.parametrize('value, seconds', [('30', 1800), ('30:15', 1815), ('08:00:00', 28800), ('1-02', 93600),
                                            ('1-02:03', 93780), ('1-02:03:04', 93784), ('UNLIMITED', None), ('INFINITE', None)])
def test_duration_seconds_reads_every_form_of_a_time_limit(value, seconds):
    assert sp.duration_seconds(value) == seconds


@pytest.mark.parametrize('value', ['', 'a', '1:2:3:4', '-1', '1-a', '1-', '2:xx'])
def test_duration_seconds_refuses_what_is_not_a_time_limit(value):
    with pytest.raises(ValueError):
        sp.duration_seconds(value)
