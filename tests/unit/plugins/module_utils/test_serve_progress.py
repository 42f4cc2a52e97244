# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The progress line: phases from the jobs' rows and logs, the download's figures from the model directory."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import time

from ansible_collections.glm.serve.plugins.module_utils import serve_progress as sp

DL = {'job_id': '11', 'name': 'glm-download', 'state': 'RUNNING', 'reason': 'None', 'nodes': 'node2'}
SERVE = {'job_id': '12', 'name': 'glm-serve', 'state': 'PENDING', 'reason': 'Dependency', 'dependency': 'afterok:11(unfulfilled)'}

# SGLang 0.5.21's start, as the server job's log holds it (rank prefixes as the real ones)
SGLANG_LOG = [
    '[2026-12-01 10:00:01 TP0] Init torch distributed begin.',
    '[2026-12-01 10:00:02 TP0] Load weight begin. avail mem=78.40 GB',
    # tqdm's bar, not a log line (no prefix): the single-thread one, as --weight-loader-prefetch-checkpoints selects it
    'Loading safetensors checkpoint shards:  45% Completed | 42/93 [00:07<00:09,  5.10it/s]',
    '[2026-12-01 10:00:20 TP0] Load weight end. type=GlmMoeDsaForCausalLM, dtype=torch.bfloat16, avail mem=38.10 GB',
    '[2026-12-01 10:00:21 TP0] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs=[1, 2, 4], '
    'avail mem=10.2 GB',
    '[2026-12-01 10:00:40 TP0] Capture target decode CUDA graph end. elapsed=19.02 s, mem usage=0.88 GB, avail mem=9.3 GB.',
    'INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)',
    '[2026-12-01 10:00:45] The server is fired up and ready to roll!',
]


def progress(logs=None, model_dir=None, now=1000.0, sample=None):
    logs = logs or {}
    return sp.Progress(model_dir=model_dir, read_log=lambda job: logs.get(job['job_id'], ''), clock=lambda: now,
                       sample=sample)


def test_queued_with_reason_and_expected_start():
    start = time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(1000 + 4 * 60))
    said = progress().describe([dict(DL, state='PENDING', reason='Resources', start_time=start, nodes=None), SERVE])
    assert said['phase'] == 'queued'
    assert said['line'].startswith('queued: job 11 (glm-download) is PENDING (Resources), expected start ')
    assert said['line'].endswith('(in 4 min)')
    unknown = progress().describe([dict(SERVE, state='PENDING', reason='Priority', start_time='Unknown')])
    assert unknown['line'] == 'queued: job 12 (glm-serve) is PENDING (Priority), no expected start yet'


def test_saving_then_downloading_from_the_jobs_own_marker_lines():
    logs = {'11': '[glm.serve] saving the container image to /h/glm/sglang.sqsh\n'}
    assert progress(logs).describe([DL, SERVE])['phase'] == 'saving'
    logs['11'] += '[glm.serve] downloading zai-org/GLM-5.3-Flash to /h/glm/GLM\n\rFetching 93 files:   0%|'
    said = progress(logs).describe([DL, SERVE])
    assert said['phase'] == 'downloading'
    assert said['line'] == 'downloading the weights: job 11 on node2'   # no model_dir: no figures


def _model_dir(tmp_path, have, incomplete, stale, total, started):
    model = tmp_path / 'GLM'
    (model / '.cache' / 'huggingface' / 'download').mkdir(parents=True)
    (model / 'model-00001-of-00002.safetensors').write_bytes(b'x' * have)
    part = model / '.cache' / 'huggingface' / 'download' / 'abc.etag.0001.incomplete'
    part.write_bytes(b'x' * incomplete)
    old = model / '.cache' / 'huggingface' / 'download' / 'abc.etag.0000.incomplete'
    old.write_bytes(b'x' * stale)
    os.utime(str(old), (started - 3600, started - 3600))      # a killed job's leftover: not counted
    (model / sp.TOTAL_FILE).write_text(json.dumps({'total_bytes': total, 'start_bytes': 0, 'started': started}))
    return str(model)


def test_download_figures_from_the_model_dir_and_the_total_file(tmp_path):
    started = time.time() - 100
    model = _model_dir(tmp_path, 300000, 200000, 999999, 2000000, started)
    logs = {'11': '[glm.serve] downloading x to y\n'}
    # a first look: the rate is the average since the job started (500 kB in 100 s)
    said = sp.Progress(model_dir=model, read_log=lambda job: logs.get(job['job_id'], '')).describe([DL, SERVE])
    assert said['phase'] == 'downloading'
    assert said['line'].startswith('downloading: 0.5 of 2.0 MB (25%), 5 kB/s, ETA ')
    assert said['line'].endswith(' (job 11 on node2)')
    # the next slice: the rate over the last interval
    again = sp.Progress(model_dir=model, read_log=lambda job: logs.get(job['job_id'], ''),
                        sample={'at': time.time() - 10, 'bytes': 400000}).describe([DL, SERVE])
    assert ', 10 kB/s, ETA 2 min ' in again['line'], again['line']
    assert again['sample']['bytes'] == 500000


def test_download_without_the_total_says_so(tmp_path):
    model = tmp_path / 'GLM'
    model.mkdir()
    (model / 'config.json').write_bytes(b'x' * 1500000)
    said = progress({'11': '[glm.serve] downloading x\n'}, model_dir=str(model)).describe([DL, SERVE])
    assert said['line'] == 'downloading: 1.5 MB so far (the total is not known yet) (job 11 on node2)'


def test_the_server_start_phases_from_sglang_log_lines():
    running = dict(SERVE, state='RUNNING', reason='None', nodes='node1')
    done = dict(DL, state='COMPLETED')
    expected = ['starting', 'starting', 'loading', 'loading', 'loading', 'capturing', 'warming', 'warming', 'warming']
    seen = []
    for count in range(len(SGLANG_LOG) + 1):
        said = progress({'12': '\n'.join(SGLANG_LOG[:count])}).describe([done, running])
        seen.append(said['phase'])
        if count == 3:
            assert said['line'] == 'loading the weights: 42/93 shards (45%) (job 12 on node1)'
    assert seen == expected
    ready = progress().describe([done, running], ready=True, endpoint='http://node1:30000', model='glm-5.3-flash')
    assert ready == dict(ready, phase='ready', line='ready: http://node1:30000 serves glm-5.3-flash (job 12 on node1)')


# What SGLang 0.5.21 writes by default (multi-thread loading: model_loader/loader.py L602, L681-690; the bar of
# model_loader/weight_utils.py L1269-1275 with BAR_FORMAT, utils/common.py L1315) into the job's log while it loads:
# tqdm's refreshes joined by carriage returns, no newline until the bar closes. Written by tqdm 4.70.1 itself (93
# shards, 1.7 s each, the first 42 loaded), the log's last line as it is then.
MULTI_THREAD_BAR = (
    '\rMulti-thread loading shards:   0% Completed | 0/93 [00:00<?, ?it/s]'
    '\rMulti-thread loading shards:  43% Completed | 40/93 [01:08<01:30,  1.70s/it]'
    '\rMulti-thread loading shards:  44% Completed | 41/93 [01:09<01:28,  1.70s/it]'
    '\rMulti-thread loading shards:  45% Completed | 42/93 [01:11<01:26,  1.70s/it]')


def test_the_default_multi_thread_bar_shows_the_loading_progress():
    running = dict(SERVE, state='RUNNING', reason='None', nodes='node1')
    log = '\n'.join(SGLANG_LOG[:2]) + '\n' + MULTI_THREAD_BAR
    said = progress({'12': log}).describe([dict(DL, state='COMPLETED'), running])
    assert said['phase'] == 'loading'
    assert said['line'] == 'loading the weights: 42/93 shards (45%) (job 12 on node1)'


def test_between_the_jobs_and_at_the_end():
    between = progress().describe([dict(DL, state='COMPLETED'), SERVE])
    assert between['line'] == 'queued: job 12 (glm-serve) waits for 11 (COMPLETED)'
    ended = progress().describe([dict(DL, state='COMPLETED'), dict(SERVE, state='TIMEOUT')])
    assert (ended['phase'], ended['line']) == ('ended', 'ended: job 12 (glm-serve) is TIMEOUT')
    # without a server job, a running download still says how far it is
    assert progress().describe([DL, None])['phase'] == 'saving'
    assert progress().describe([dict(DL, state='COMPLETED'), None])['line'] == \
        'no server job: the download job 11 on node2 is COMPLETED'


def test_the_phase_alone_is_cheap_and_matches_the_line():
    calls = []

    def read_log(job):
        calls.append(job['job_id'])
        return '[glm.serve] downloading x\n'

    reader = sp.Progress(model_dir='/nonexistent', read_log=read_log)
    assert reader.phase([DL, SERVE]) == 'downloading'
    assert calls == ['11']


def test_durations():
    assert [sp.duration(s) for s in (5, 89, 90, 3000, 5400, 7320)] == ['5 s', '89 s', '2 min', '50 min', '1 h 30 min', '2 h 02 min']


def test_an_idle_stop_is_said_plainly_and_the_activity_file_read(tmp_path):
    log = {'12': '[2026-12-01 10:00:45] The server is fired up and ready to roll!\n[glm.serve] idle: no request for 7204 s '
                 '(server_idle_timeout=2h): stopping the server; deploy again to start it\nINFO:     Shutting down\n'
                 '[glm.serve] stopped after 2h idle (server_idle_timeout); deploy again to start it\n'}
    said = progress(log).describe([dict(DL, state='COMPLETED'), dict(SERVE, state='COMPLETED')])
    assert said['line'] == 'ended: job 12 (glm-serve) stopped after 2h idle (server_idle_timeout); deploy again to start it'
    path = tmp_path / 'glm-serve-12.activity'
    path.write_text('{"job_id": "12", "checked": 1000, "last_request": 900, "requests_total": 5, "running": 0, "queued": 0, '
                    '"idle_timeout": 7200, "stopped_idle": null}\n')
    record = sp.read_activity(str(path), now=1030)
    assert record['idle_for'] == 130 and record['requests_total'] == 5 and record['stopped_idle'] is None
    assert sp.read_activity(str(tmp_path / 'missing')) is None


def test_a_phase_never_goes_back_for_the_same_job():
    running = dict(SERVE, state='RUNNING', reason='None', nodes='node1')
    floor = {'about': '12', 'phase': 'capturing', 'line': 'capturing CUDA graphs: job 12 on node1'}
    # the marker left the end of the log that is read: still capturing, not "starting"
    flat = progress({'12': 'DeepGEMM JIT ...\n' * 10}).__class__(read_log=lambda job: 'noise\n', clock=lambda: 1000.0, floor=floor)
    said = flat.describe([dict(DL, state='COMPLETED'), running])
    assert (said['phase'], said['line']) == ('capturing', 'capturing CUDA graphs: job 12 on node1')
    assert flat.phase([dict(DL, state='COMPLETED'), running]) == 'capturing'
    # another job (a resubmission) starts from its own beginning
    other = dict(running, job_id='13')
    assert flat.describe([dict(DL, state='COMPLETED'), other])['phase'] == 'starting'


def test_a_server_job_not_started_without_a_parent_to_tell_more():
    """_not_started (issue 22 split it out of _describe): submitted and not yet seen, queued on its own, none."""
    assert sp._not_started({'job_id': '12', 'name': 'glm-serve'}, [], 1000.0) == \
        ('queued', 'submitted: job 12 (glm-serve)')
    assert sp._not_started(dict(SERVE, reason='Priority'), [], 1000.0) == \
        ('queued', 'queued: job 12 (glm-serve) is PENDING (Priority), no expected start yet')
    assert sp._not_started(SERVE, [dict(DL, state='FAILED')], 1000.0) == \
        ('queued', 'queued: job 12 (glm-serve) waits for 11 (FAILED)')
    assert sp._not_started({}, [], 1000.0) == ('none', 'no server job')
