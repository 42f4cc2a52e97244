# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where a deploy stands, in one line: the phase of the download + server chain and its progress.

Read from what costs slurmctld nothing: the jobs' rows the waiter already has (state, Slurm's reason, the expected
start), the end of the jobs' output files, and the model directory on the shared filesystem (its size against the
total the download job wrote next to it, ``.glm-serve-download.json``). Used by the sliced wait of
``glm.serve.slurm_job`` (a line per slice) and by ``glm.serve.deploy_progress`` (the status playbook's line).

The phases, in order: ``queued``, ``saving`` (the container image), ``downloading``, ``starting`` (the server job
runs, nothing loaded yet), ``loading`` (the weights), ``capturing`` (CUDA graphs), ``warming`` (the HTTP server is
up, its warm-up request runs), ``ready``; ``ended`` when the job waited for is over.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import time

from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp
from ansible_collections.glm.serve.plugins.module_utils.wait_signals import read_tail

#: the file the download job writes next to the weights: the repository's total size, and what was there at start
TOTAL_FILE = '.glm-serve-download.json'

#: the download job's own marker lines (download.sbatch echoes them)
SAVING_RE = re.compile(r'^\[glm\.serve\] saving the container image')
DOWNLOADING_RE = re.compile(r'^\[glm\.serve\] downloading ')
DOWNLOADED_RE = re.compile(r'^\[glm\.serve\] download complete')
IDLE_STOP_RE = re.compile(r'^\[glm\.serve\] stopped after (\S+) idle')

# SGLang 0.5.21's own log lines, in the order a start prints them: model_executor/model_runner.py L1188 ("Load weight
# begin."), the weights' tqdm bar (BAR_FORMAT of utils/common.py L1315; on stderr, no log prefix, refreshes joined by
# carriage returns): by default "Multi-thread loading shards" (model_loader/loader.py L602, L681-690; weight_utils.py
# L1269-1275), "Loading safetensors checkpoint shards" when the flags select the single-thread loader (loader.py
# L651-672: --weight-loader-prefetch-checkpoints, or enable_multithread_load false; weight_utils.py L1147-1152), model_executor/
# model_runner_components/cuda_graph_setup.py L645-656, L719-745 ("Capture target decode CUDA graph begin." ...;
# older releases: "Capture cuda graph begin."), entrypoints/http_server.py L2476 ("fired up")
_SGLANG = (
    ('loading', re.compile(r'Load weight begin\.')),
    ('loading', re.compile(r'(?:Multi-thread loading|Loading safetensors checkpoint) shards:\s*(\d+)% Completed \| (\d+)/(\d+)')),
    ('loaded', re.compile(r'Load weight end\.')),
    ('capturing', re.compile(r'Capture (?:[\w ]+ )?(?:cuda|CUDA) graph begin\.')),
    ('warming', re.compile(r'Capture (?:[\w ]+ )?(?:cuda|CUDA) graph end\.|Uvicorn running on ')),
    ('ready', re.compile(r'The server is fired up and ready to roll!')),
)

PHASES = ('queued', 'saving', 'downloading', 'starting', 'loading', 'capturing', 'warming', 'ready', 'ended')


def amount(value, scale=None):
    """(number, unit) in GB, or MB for less than a GB (``scale``: the value whose unit to use)."""
    scale = value if scale is None else scale
    if scale >= 1e9:
        return '%.1f' % (value / 1e9), 'GB'
    return '%.1f' % (value / 1e6), 'MB'


def duration(seconds):
    """``45 s``, ``12 min``, ``3 h 05 min``."""
    seconds = int(max(0, seconds))
    if seconds < 90:
        return '%d s' % seconds
    if seconds < 5400:
        return '%d min' % round(seconds / 60.0)
    return '%d h %02d min' % (seconds // 3600, (seconds % 3600) // 60)


def rate_text(per_second):
    if per_second >= 1e9:
        return '%.2f GB/s' % (per_second / 1e9)
    if per_second >= 1e6:
        return '%.0f MB/s' % (per_second / 1e6)
    return '%.0f kB/s' % (per_second / 1e3)


def dir_bytes(path, since=None):
    """Bytes of the files under ``path``: the weights, and the ``.incomplete`` files under ``.cache`` written since
    ``since`` (the download under way; huggingface_hub 1.18+ leaves the partial files of a killed download behind
    and never resumes them), not following links; 0 when it does not exist."""
    total = 0
    cache = os.path.join(path, '.cache')
    stack = [path]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except (IOError, OSError):
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False) and entry.name != TOTAL_FILE:
                    st = entry.stat(follow_symlinks=False)
                    if not folder.startswith(cache):
                        total += st.st_size
                    elif entry.name.endswith('.incomplete') and (since is None or st.st_mtime >= since):
                        total += st.st_size
            except (IOError, OSError):
                continue
    return total


def log_end(path, files=None, secrets=()):
    """The end of a job's output file as text (its last 400 lines within 32 KB, secrets redacted): what the phase
    is read from. '' when there is no such file."""
    return '\n'.join(read_tail(path, files, count=400, secrets=secrets, chunk=32 * 1024)) if path else ''


def read_total(model_dir):
    """The download job's record (``total_bytes``, ``start_bytes``, ``started``), or None."""
    try:
        with open(os.path.join(model_dir, TOTAL_FILE)) as handle:
            record = json.load(handle)
    except (IOError, OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get('total_bytes'), int):
        return None
    return record


def _lines(text):
    """Lines of a log tail; a progress bar's carriage-return updates count as lines of their own."""
    return [part for line in (text or '').split('\n') for part in line.split('\r') if part.strip()]


def download_stage(text):
    """``saving``, ``downloading``, ``done`` or None, from the download job's own marker lines."""
    stage = None
    for line in _lines(text):
        if SAVING_RE.search(line):
            stage = 'saving'
        elif DOWNLOADING_RE.search(line):
            stage = 'downloading'
        elif DOWNLOADED_RE.search(line):
            stage = 'done'
    return stage


def server_stage(text):
    """(phase, detail) of a server job's log: the last of SGLang's start-up lines it holds."""
    phase, detail = None, None
    for line in _lines(text):
        for name, pattern in _SGLANG:
            match = pattern.search(line)
            if not match:
                continue
            phase, detail = name, None
            if match.groups():
                detail = '%s/%s shards (%s%%)' % (match.group(2), match.group(3), match.group(1))
    return ('loading' if phase == 'loaded' else phase), detail


def _where(job):
    where = 'job %s' % job.get('job_id')
    node = job.get('nodes') or job.get('batch_host')
    return where + (' on %s' % node if node else '')


def _queued(job, now):
    text = 'queued: job %s (%s) is PENDING (%s)' % (job.get('job_id'), job.get('name'), job.get('reason') or 'None')
    start = sp.parse_time(job.get('start_time'))
    if start and start > now:
        text += ', expected start %s (in %s)' % (time.strftime('%H:%M', time.localtime(start)), duration(start - now))
    elif job.get('reason') in ('Priority', 'Resources'):
        text += ', no expected start yet'
    return text


# the line of each stage of a running server job (server_stage), with where it runs
RUNNING_LINES = {
    'starting': 'starting: %s (the container and SGLang start)',
    'loading': 'loading the weights: %s',
    'capturing': 'capturing CUDA graphs: %s',
    'warming': 'warming up: the HTTP server is up, its first request runs: %s',
    'ready': 'ready soon: the server says it is ready, waiting for its answer: %s',
}


def _not_started(server, parents, now):
    """(phase, line) of a server job that has not started, when no parent job runs or waits."""
    state = server.get('state')
    if state == 'PENDING' and server.get('reason') == sp.DEPENDENCY and parents:
        ended = [p for p in parents if p.get('state') in sp.TERMINAL_STATES]
        return 'queued', 'queued: job %s (%s) waits for %s' % (server.get('job_id'), server.get('name'), ', '.join(
            '%s (%s)' % (p.get('job_id'), p.get('state') or '?') for p in (ended or parents)))
    if not server.get('job_id'):
        return 'none', 'no server job' + (
            ': the download %s is %s' % (_where(parents[-1]), parents[-1].get('state')) if parents else '')
    return 'queued', _queued(server, now) if state else 'submitted: job %s (%s)' % (server.get('job_id'), server.get('name'))


class Progress:
    """The progress line of a chain ``[download..., server]`` (the last row is the job waited for).

    :param model_dir: the model directory (None: no download figures)
    :param read_log: ``read_log(job)`` -> the end of the job's output file (text)
    :param clock: ``time()``, the wall clock
    :param sample: the last download sample ``{'at': wall, 'bytes': n}`` (from an earlier slice), for the rate
    """

    def __init__(self, model_dir=None, read_log=None, clock=time.time, sample=None, floor=None):
        self.model_dir = model_dir
        self.read_log = read_log or (lambda job: '')
        self.clock = clock
        self.sample = sample
        #: the furthest phase an earlier slice saw ``{'about': job id, 'phase', 'line'}``: a job's phase never goes back
        #: (its marker line may have left the end of the log that is read)
        self.floor = floor

    def phase(self, chain, ready=False):
        """The phase alone (no figures, no directory walk): cheap enough to ask every few seconds."""
        return self._floored(self._describe(chain, ready, figures=False))['phase']

    def describe(self, chain, ready=False, endpoint=None, model=None):
        """``{'phase', 'line', 'job_id', 'about', 'sample'}``; ``ready``: the server answered. ``about`` is the job the
        line is about (the download while it runs, else the server)."""
        return self._floored(self._describe(chain, ready, figures=True, endpoint=endpoint, model=model))

    def _floored(self, out):
        floor = self.floor
        if floor and out.get('about') and floor.get('about') == out['about'] and out['phase'] in PHASES \
                and floor.get('phase') in PHASES and PHASES.index(out['phase']) < PHASES.index(floor['phase']):
            out = dict(out, phase=floor['phase'], line=floor.get('line') or out['line'])
        return out

    def _describe(self, chain, ready, figures, endpoint=None, model=None):
        now = self.clock()
        server = (chain[-1] if chain else None) or {}
        parents = [r for r in chain[:-1] if r and r.get('job_id')]
        out = {'phase': None, 'line': None, 'job_id': server.get('job_id'), 'about': server.get('job_id'), 'sample': self.sample}
        if ready:
            out['phase'] = 'ready'
            out['line'] = 'ready: %s serves %s (%s)' % (endpoint or 'the server', model or 'the model', _where(server))
            return out
        state = server.get('state')
        if state in sp.TERMINAL_STATES:
            return self._ended(out, server)
        if state == 'RUNNING':
            return self._running(out, server, figures)
        # the server job is not running yet: a running parent (the download) tells more
        for parent in parents:
            if parent.get('state') == 'RUNNING':
                return self._download(out, parent, figures, now)
            if parent.get('state') == 'PENDING':
                out['phase'], out['line'] = 'queued', _queued(parent, now)
                return out
        out['phase'], out['line'] = _not_started(server, parents, now)
        return out

    def _ended(self, out, server):
        out['phase'], out['line'] = 'ended', 'ended: job %s (%s) is %s' % (server.get('job_id'), server.get('name'), server.get('state'))
        idle = [m.group(1) for m in (IDLE_STOP_RE.search(line) for line in _lines(self.read_log(server))) if m]
        if idle:
            out['line'] = 'ended: job %s (%s) stopped after %s idle (server_idle_timeout); deploy again to start it' % (
                server.get('job_id'), server.get('name'), idle[-1])
        return out

    def _running(self, out, server, figures):
        phase, detail = server_stage(self.read_log(server))
        phase = phase or 'starting'
        line = RUNNING_LINES[phase] % _where(server)
        if phase == 'loading' and detail and figures:
            line = 'loading the weights: %s (%s)' % (detail, _where(server))
        out['phase'] = 'warming' if phase == 'ready' else phase
        out['line'] = line
        return out

    def _download(self, out, job, figures, now):
        out['about'] = job.get('job_id')
        stage = download_stage(self.read_log(job))
        if stage in (None, 'saving'):
            out['phase'] = 'saving'
            out['line'] = 'saving the SGLang container image: %s' % _where(job)
            return out
        out['phase'] = 'downloading'
        if not figures or not self.model_dir:
            out['line'] = 'downloading the weights: %s' % _where(job)
            return out
        record = read_total(self.model_dir)
        done = dir_bytes(self.model_dir, since=record.get('started') if record else None)
        sample = {'at': now, 'bytes': done}
        rate = None
        if self.sample and now - self.sample.get('at', now) >= 5 and done >= self.sample.get('bytes', 0):
            rate = (done - self.sample['bytes']) / (now - self.sample['at'])
            out['sample'] = sample
        elif record and isinstance(record.get('started'), (int, float)) and now - record['started'] >= 5 \
                and isinstance(record.get('start_bytes'), int):
            rate = max(0, done - record['start_bytes']) / (now - record['started'])
            out['sample'] = sample if not self.sample else self.sample
        else:
            out['sample'] = self.sample or sample
        total = record['total_bytes'] if record else None
        if total:
            number, unit = amount(total)
            text = 'downloading: %s of %s %s (%d%%)' % (amount(min(done, total), total)[0], number, unit,
                                                        min(100, 100 * done // max(total, 1)))
        else:
            text = 'downloading: %s %s so far (the total is not known yet)' % amount(done)
        if rate is not None:
            text += ', %s' % rate_text(rate)
            if total and rate > 0 and done < total:
                text += ', ETA %s' % duration((total - done) / rate)
        out['line'] = '%s (%s)' % (text, _where(job))
        return out


def read_activity(path, now=None):
    """The activity file the watcher beside the server writes (serve.sbatch), with ``idle_for``: seconds since the
    last request by this host's clock (the login node's; the watcher's clock is the node's). None when missing."""
    try:
        with open(path) as handle:
            record = json.load(handle)
    except (IOError, OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    now = time.time() if now is None else now
    last = record.get('last_request')
    record['idle_for'] = max(0, int(now - last)) if isinstance(last, (int, float)) else None
    return record
