# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The submit record: written after sbatch, read back, and what it says of a live job."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os

from ansible_collections.glm.serve.plugins.module_utils import submit_record as sr

SCRIPT = '#!/bin/bash\n#SBATCH --output=logs/%x-%j.out\nsrun serve\n'


def test_record_round_trip(tmp_path, make_ctx):
    ctx = make_ctx(chdir=str(tmp_path))
    assert sr.read_record(ctx) is None and sr.record_id(ctx) is None
    sr.write_record(ctx, 4124, sr.script_digest(text=SCRIPT))
    path = tmp_path / '.slurm_job-u-srv.json'
    assert json.loads(path.read_text()) == {'job_id': '4124', 'sha256': hashlib.sha256(SCRIPT.encode()).hexdigest()}
    assert oct(os.stat(str(path)).st_mode & 0o777) == '0o600'
    assert sr.record_id(ctx) == '4124' and sr.record_id(ctx, 'other') is None


def test_a_broken_record_is_no_record(tmp_path, make_ctx):
    (tmp_path / '.slurm_job-u-srv.json').write_text(u'[1, 2]')
    assert sr.read_record(make_ctx(chdir=str(tmp_path))) is None
    (tmp_path / '.slurm_job-u-srv.json').write_text(u'{not json')
    assert sr.read_record(make_ctx(chdir=str(tmp_path))) is None


def test_an_unwritable_record_is_warned_about(tmp_path, make_ctx):
    ctx = make_ctx(chdir=str(tmp_path))
    os.chmod(str(tmp_path), 0o500)
    try:
        sr.write_record(ctx, 1, 'abc')
    finally:
        os.chmod(str(tmp_path), 0o700)
    if os.geteuid() != 0:
        assert 'cannot write the submit record' in ctx.warnings[0]


def test_recorded_says_whether_the_live_job_runs_the_script_as_it_is(tmp_path, make_ctx):
    script = tmp_path / 'job.sbatch'
    script.write_text(SCRIPT)
    ctx = make_ctx(script=str(script))
    assert sr.recorded(ctx, {'job_id': '7'}) is None                      # no record
    sr.write_record(ctx, 7, sr.script_digest(str(script)))
    ctx = make_ctx(script=str(script))
    assert sr.recorded(ctx, {'job_id': '7'}) is True
    assert sr.recorded(ctx, {'job_id': '8'}) is None                      # another job
    script.write_text(SCRIPT + 'echo changed\n')
    assert sr.recorded(ctx, {'job_id': '7'}) is True                      # read once per run and job
    assert sr.recorded(make_ctx(script=str(script)), {'job_id': '7'}) is False


def test_script_digest_of_text_and_file(tmp_path):
    path = tmp_path / 's'
    path.write_text(SCRIPT)
    assert sr.script_digest(str(path)) == sr.script_digest(text=SCRIPT)
    assert sr.script_digest(str(tmp_path / 'missing')) is None


def test_script_output_pattern_reads_the_header_only():
    assert sr.script_output_pattern(SCRIPT) == 'logs/%x-%j.out'
    assert sr.script_output_pattern('#SBATCH -o "a.out"\n#SBATCH --output b.out\n') == 'b.out'
    assert sr.script_output_pattern('echo\n#SBATCH --output=late\n') is None
    assert sr.script_output_pattern(SCRIPT, ['-o', 'x']) is None
