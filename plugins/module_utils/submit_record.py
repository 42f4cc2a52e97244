# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The submit record: which script content the module submitted as which job.

After sbatch, the module writes {"job_id", "sha256"} of the script next to the lock file (0600). A later run that
finds that job live and the script unchanged knows what Slurm stored without asking it (``scontrol write
batch_script``, ``scontrol show job``): a re-run that changes nothing costs one lookup. Without a record (a job
submitted by hand, another login node's run, an older version of the module) the module asks Slurm as before.

The functions take the action's context (``params``, ``name``, ``user``, ``warn``, ``script_text()`` and
``recorded``, the per-run cache of :func:`recorded`).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import re
import tempfile

from ansible_collections.glm.serve.plugins.module_utils.submit_lock import lock_path


def script_digest(path=None, text=None):
    """sha256 of a script, from its text or its file (None when there is neither)."""
    if text is None:
        try:
            with open(path, 'rb') as handle:
                return hashlib.sha256(handle.read()).hexdigest()
        except (IOError, OSError, TypeError):
            return None
    return hashlib.sha256(text.encode('utf-8')).hexdigest()


def write_json(path, data, prefix):
    """Write data as JSON to path atomically (a temporary file in its folder, renamed), readable by its owner only
    (mkstemp makes it 0600). Raises IOError/OSError."""
    fd, temp = tempfile.mkstemp(prefix=prefix, dir=os.path.dirname(path) or '.')
    with os.fdopen(fd, 'w') as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
    os.rename(temp, path)


def read_record(ctx, name=None):
    name = name or ctx.name
    path = lock_path(ctx.params, name, ctx.user, '.json') if name else None
    try:
        with open(path) as handle:
            record = json.load(handle)
        return record if isinstance(record, dict) else None
    except (IOError, OSError, TypeError, ValueError):
        return None


def record_id(ctx, name=None):
    """The job id of name's submit record (the context's name by default), or None."""
    record = read_record(ctx, name)
    return str(record['job_id']) if record and record.get('job_id') else None


def write_record(ctx, job_id, digest):
    path = lock_path(ctx.params, ctx.name, ctx.user, '.json')
    if not path or not digest:
        return
    try:
        write_json(path, {'job_id': str(job_id), 'sha256': digest}, '.slurm_job-')
    except (IOError, OSError) as exc:
        ctx.warn('cannot write the submit record %s (%s): the next run asks Slurm for the stored script' % (path, exc))


def recorded(ctx, job):
    """True/False: the record of ``job`` says whether it runs the script as it is now; None: no record of it.
    Read and hashed once per job and run (the script check and the output path both ask): ``ctx.recorded`` is a
    cache, whose answers do not depend on which step asks first."""
    key = str(job.get('job_id'))
    if key not in ctx.recorded:
        ctx.recorded[key] = _recorded(ctx, job)
    return ctx.recorded[key]


def _recorded(ctx, job):
    record = read_record(ctx)
    text = ctx.script_text() if ctx.params.get('script') else None
    if not record or record.get('job_id') != str(job.get('job_id')) or text is None:
        return None
    return record.get('sha256') == script_digest(text=text)


_OUTPUT_RE = re.compile(r'^#SBATCH\s+(?:--output(?:=|\s+)|-o\s*)(\S+)\s*$')


def script_output_pattern(text, sbatch_args=()):
    """The ``--output`` of a batch script's ``#SBATCH`` header (None if unset, or if sbatch_args set it)."""
    if text is None or any(a.startswith(('--output', '-o')) for a in sbatch_args or ()):
        return None
    found = None
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith('#'):
            break   # sbatch reads #SBATCH lines up to the first command
        match = _OUTPUT_RE.match(line)
        if match:
            found = match.group(1).strip('"\'')
    return found
