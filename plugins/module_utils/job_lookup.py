# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Finding the jobs of a name, asking Slurm as little as it can, and the rows as the modules return them.

In order: the listing an earlier task of the play made for this name (``lookup``), when no job of this name was
submitted since; the job of the submit record (``scontrol --local show job``: 1 RPC), when it is live; else
``squeue --local -n NAMES -u USER`` (2 RPCs, whatever the number of names), which also lists ``lookup_also``
for a later task.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import time
from collections import namedtuple

from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp
from ansible_collections.glm.serve.plugins.module_utils.submit_lock import lock_folder
from ansible_collections.glm.serve.plugins.module_utils.submit_record import record_id, recorded, script_output_pattern

RESULT_JOB_KEYS = ('job_id', 'name', 'user', 'state', 'reason', 'nodes', 'exit_code', 'output_path')

LOOKUP_MAX_AGE = 60.0

#: What :func:`live_jobs` found: the live jobs of the name (newest first), the listing to hand to later tasks
#: (``lookup``, or None), and the submit record's job as looked up ((job id, row or None), or None).
Found = namedtuple('Found', 'jobs listing record')


def job_fields(job):
    """The result keys a job row sets (those it has a value for)."""
    return dict((key, job.get(key)) for key in RESULT_JOB_KEYS if job and job.get(key) is not None)


def chain_entries(chain):
    return [dict((k, j.get(k)) for k in ('job_id', 'name', 'state', 'reason')) for j in chain]


def is_live(job):
    """In the queue and not ending: the one list of live states, ``slurm_parse.LIVE_STATES``."""
    return job.get('state') in sp.LIVE_STATES


def is_ending(job):
    """Still on its node but finishing (COMPLETING, STAGE_OUT): not live, not gone either."""
    return job.get('state') in sp.ENDING_STATES


def is_dead_pending(job):
    """A PENDING job whose dependency can never be satisfied: it will never run."""
    return job.get('state') == 'PENDING' and job.get('reason') == sp.NEVER_SATISFIED


#: Slurm's ``after:ID[+MINUTES]`` in squeue's dependency column (``after:1300+1(unfulfilled)``; several joined by
#: "," or "?"): not afterok, afterany, afternotok. Group 1 the job id, group 2 the minutes (None without).
AFTER_RE = re.compile(r'(?:^|[,?])after:(\d+)(?:\+(\d+))?')


def after_deps(job):
    """[(job id, minutes or None)] of a PENDING job's ``after:ID[+MINUTES]`` dependencies; [] for any other job."""
    if job.get('state') != 'PENDING':
        return []
    return [(m.group(1), int(m.group(2)) if m.group(2) else None) for m in AFTER_RE.finditer(job.get('dependency') or '')]


def successor_ids(jobs):
    """The ids of the jobs of the list that are the successor of another one: PENDING on ``after:ID`` of a job of the
    list (glm.serve.server's ``service_until``: a serving job submits the next one of its name so, to start before
    its own time limit). The job a name stands for is one of the others."""
    ids = set(str(j.get('job_id')) for j in jobs)
    return [j['job_id'] for j in jobs if any(i in ids and i != str(j['job_id']) for i, _minutes in after_deps(j))]


def current_jobs(live):
    """The live jobs of one name that are no other's successor (successor_ids), in their order; all of them when
    every one is (a successor whose predecessor is gone is the job the name stands for)."""
    later = successor_ids(live)
    return [j for j in live if j['job_id'] not in later] or live


def id_key(job_id):
    """A job id's number, to sort by age (an array or het job by its first id)."""
    head = str(job_id).split('_', 1)[0].split('+', 1)[0]
    return int(head) if head.isdigit() else 0


def find_live(ctx, name=None, retry_timeout=None):
    """Live jobs of name (the context's by default) and the context's user, newest first."""
    name = name or ctx.name
    timeout = ctx.retry_timeout if retry_timeout is None else retry_timeout
    return newest_live(ctx, ctx.cli.retry(ctx.cli.squeue, timeout, name=name, user=ctx.user), [name])


def newest_live(ctx, rows, names):
    """The live rows of these names and the context's user, newest first."""
    rows = [r for r in rows if r.get('name') in names and (not ctx.user or r.get('user') == ctx.user) and is_live(r)]
    return sorted(rows, key=lambda r: id_key(r['job_id']), reverse=True)


def lookup(ctx, job_id):
    """The job with this id (finished ones too, while Slurm remembers them), or None."""
    return ctx.retry(ctx.cli.show_job, str(job_id))


def details(ctx, job):
    """Add output_path and exit_code (scontrol show job) to a squeue row.

    A live job this module submitted from the script as it is now (its submit record says so) needs no call: its
    output path is the script's ``#SBATCH --output`` pattern, expanded as Slurm does, in its working directory.
    """
    if job is None or job.get('output_path'):
        return job
    local = local_output_path(ctx, job)
    if local:
        return dict(job, output_path=local)
    shown = ctx.retry(ctx.cli.show_job, job['job_id'])
    if shown:
        merged = dict(job)
        for key, value in shown.items():
            if value is not None and (merged.get(key) is None or key in ('output_path', 'exit_code')):
                merged[key] = value
        job = merged
    path = job.get('output_path')
    if path and '%' in path:
        job['output_path'] = sp.expand_output_pattern(path, job['job_id'], job.get('name'), job.get('user'), job.get('work_dir'))
    return job


def local_output_path(ctx, job):
    """The output path of a live job submitted by this module from the script as it is now, without Slurm."""
    if not is_live(job) or not job.get('work_dir') or recorded(ctx, job) is not True:
        return None
    pattern = script_output_pattern(ctx.script_text(), ctx.params.get('sbatch_args'))
    path = sp.expand_output_pattern(pattern, job['job_id'], job.get('name'), job.get('user'), job.get('work_dir')) if pattern else None
    if not path:
        return None
    return path if os.path.isabs(path) else os.path.join(job['work_dir'], path)


def live_jobs(ctx):
    """What the lookup of name+user found (a :data:`Found`). Run under SubmitLock."""
    shared = shared_lookup(ctx)
    if shared is not None:
        return Found(shared, None, None)
    names = [ctx.name] + [n for n in ctx.params.get('lookup_also') or [] if n and n != ctx.name]
    record = None
    # start_first must see every live job of the name (those its job replaces): one squeue, not the record's job
    if len(names) == 1 and ctx.params.get('change_strategy') != 'start_first':
        job, record = recorded_live(ctx)
        if job is not None:
            return Found([job], None, record)
    records = dict((n, record_id(ctx, n)) for n in names)      # before the listing: see shared_lookup()
    taken_at = time.time()
    rows = newest_live(ctx, ctx.cli.retry(ctx.cli.squeue, ctx.retry_timeout, name=','.join(names), user=ctx.user), names)
    listing = None
    if len(names) > 1:
        listing = {'user': ctx.user, 'names': names, 'folder': lock_folder(ctx.params), 'taken_at': taken_at,
                   'records': records, 'jobs': rows}
    return Found([r for r in rows if r.get('name') == ctx.name], listing, record)


def recorded_live(ctx):
    """(the live job of the submit record or None, (its id, its row) as looked up or None). One ``scontrol --local
    show job``; no record, or its job ended: the caller looks up by name, as a job submitted by hand or by an older
    module has no record. The lookup is returned for report_previous, should this run submit: no second call."""
    job_id = record_id(ctx)
    if not job_id:
        return None, None
    job = lookup(ctx, job_id)
    if job is None or not is_live(job) or job.get('name') != ctx.name or (ctx.user and job.get('user') != ctx.user):
        return None, (job_id, job)
    return job, (job_id, job)


def _shared_fits(ctx, shared):
    """True when ``lookup`` can stand for a lookup of the context's name now."""
    try:
        age = time.time() - float(shared.get('taken_at'))
    except (TypeError, ValueError):
        return False
    records = shared.get('records') or {}
    return not (shared.get('user') != ctx.user or ctx.name not in (shared.get('names') or [])
                or not 0 <= age <= LOOKUP_MAX_AGE or shared.get('folder') != lock_folder(ctx.params)
                or ctx.name not in records or records.get(ctx.name) != record_id(ctx))


def shared_lookup(ctx):
    """The live jobs of name from ``lookup`` (an earlier task's listing), or None when it cannot stand for a lookup
    now: another user, name or folder, older than LOOKUP_MAX_AGE, or the submit record of name changed since it was
    read (a run, on this login node or another sharing the folder, submitted under the lock after the listing)."""
    shared = ctx.params.get('lookup')
    if not shared or not isinstance(shared, dict) or not _shared_fits(ctx, shared):
        return None
    return newest_live(ctx, [dict(r) for r in shared.get('jobs') or [] if isinstance(r, dict)], [ctx.name])
