# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The lookup by name: the submit record's job, the shared listing, squeue, and the rows as results."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.glm.serve.plugins.module_utils import job_lookup as jl
from ansible_collections.glm.serve.plugins.module_utils.submit_record import script_digest, write_record

from ansible_collections.glm.serve.tests.unit.plugins.module_utils.conftest import row

SCRIPT = '#!/bin/bash\n#SBATCH --output=%x-%j.out\nsrun serve\n'


def test_states_and_ids():
    assert jl.is_live(row(1, state='PENDING')) and not jl.is_live(row(1, state='COMPLETING'))
    assert jl.is_ending(row(1, state='COMPLETING')) and not jl.is_ending(row(1))
    assert jl.is_dead_pending(row(1, state='PENDING', reason='DependencyNeverSatisfied'))
    assert [jl.id_key(i) for i in ('12', '13_4', '14+0', 'x')] == [12, 13, 14, 0]


def test_newest_live_keeps_the_users_live_jobs_of_the_names(make_ctx):
    rows = [row(9), row(10), row(11, user='other'), row(12, name='x'), row(13, state='COMPLETED'), row(100)]
    assert [r['job_id'] for r in jl.newest_live(make_ctx(), rows, ['srv'])] == ['100', '10', '9']


def test_job_fields_and_chain_entries():
    job = row(4, reason=None, nodes='n1', output_path='/o')
    assert jl.job_fields(job) == {'job_id': '4', 'name': 'srv', 'user': 'u', 'state': 'RUNNING', 'nodes': 'n1',
                                  'output_path': '/o'}
    assert jl.job_fields(None) == {}
    assert jl.chain_entries([job]) == [{'job_id': '4', 'name': 'srv', 'state': 'RUNNING', 'reason': None}]


def test_the_submit_records_live_job_costs_one_lookup(tmp_path, make_ctx, cli):
    ctx = make_ctx(chdir=str(tmp_path))
    write_record(ctx, 42, 'abc')
    cli.jobs = {'42': row(42)}
    found = jl.live_jobs(ctx)
    assert found.jobs == [row(42)] and found.listing is None and found.record == ('42', row(42))
    assert cli.calls == [('show_job', '42')]


def test_an_ended_record_falls_back_to_squeue_and_keeps_its_lookup(tmp_path, make_ctx, cli):
    ctx = make_ctx(chdir=str(tmp_path))
    write_record(ctx, 42, 'abc')
    cli.jobs = {'42': row(42, state='COMPLETED'), '43': row(43, state='PENDING')}
    found = jl.live_jobs(ctx)
    assert [j['job_id'] for j in found.jobs] == ['43'] and found.record == ('42', row(42, state='COMPLETED'))
    assert cli.names() == ['show_job', 'squeue']


def test_lookup_also_lists_every_name_once_for_later_tasks(tmp_path, make_ctx, cli):
    ctx = make_ctx(chdir=str(tmp_path), lookup_also=['srv-1', 'srv'])
    cli.jobs = {'5': row(5), '6': row(6, name='srv-1')}
    found = jl.live_jobs(ctx)
    assert cli.calls == [('squeue', 'srv,srv-1', 'u')] and [j['job_id'] for j in found.jobs] == ['5']
    listing = found.listing
    assert listing['names'] == ['srv', 'srv-1'] and listing['records'] == {'srv': None, 'srv-1': None}
    assert [j['job_id'] for j in listing['jobs']] == ['6', '5'] and listing['folder'] == str(tmp_path)

    later = make_ctx(chdir=str(tmp_path), name='srv-1', lookup=listing)
    assert [j['job_id'] for j in jl.live_jobs(later).jobs] == ['6'] and len(cli.calls) == 1     # no call


def test_a_shared_listing_that_cannot_stand_for_a_lookup(tmp_path, make_ctx):
    listing = {'user': 'u', 'names': ['srv'], 'folder': str(tmp_path), 'taken_at': time.time(), 'records': {'srv': None},
               'jobs': [row(5)]}
    assert jl.shared_lookup(make_ctx(chdir=str(tmp_path), lookup=listing)) == [row(5)]
    for change in ({'user': 'v'}, {'names': ['x']}, {'folder': '/x'}, {'taken_at': time.time() - 61},
                   {'taken_at': 'x'}, {'records': {}}):
        assert jl.shared_lookup(make_ctx(chdir=str(tmp_path), lookup=dict(listing, **change))) is None, change
    ctx = make_ctx(chdir=str(tmp_path), lookup=listing)
    write_record(ctx, 9, 'abc')                     # a run submitted since the listing
    assert jl.shared_lookup(ctx) is None


def test_details_of_a_recorded_job_need_no_call(tmp_path, make_ctx, cli):
    script = tmp_path / 'job.sbatch'
    script.write_text(SCRIPT)
    ctx = make_ctx(script=str(script))
    write_record(ctx, 8, script_digest(text=SCRIPT))
    job = jl.details(ctx, row(8, work_dir=str(tmp_path)))
    assert job['output_path'] == str(tmp_path / 'srv-8.out') and cli.calls == []


def test_details_ask_slurm_otherwise_and_expand_the_pattern(make_ctx, cli):
    cli.jobs = {'8': row(8, output_path='/w/%x-%j.out', exit_code='0:0', work_dir='/w')}
    job = jl.details(make_ctx(), row(8, exit_code=None))
    assert job['output_path'] == '/w/srv-8.out' and job['exit_code'] == '0:0' and cli.calls == [('show_job', '8')]
    assert jl.details(make_ctx(), None) is None
