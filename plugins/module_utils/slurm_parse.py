# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure parsers over the text the Slurm CLI prints, and the job state vocabulary.

Nothing here runs a command: every function takes text and returns data, so each one is
tested with output captured from a real cluster (tests/unit/plugins/module_utils/fixtures/).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import time

from ansible_collections.glm.serve.plugins.module_utils import job_output

# A job's output file (its path, error lines, secrets masked, its tail) is job_output's concern; these names stay
# here for the callers that still ask slurm_parse for them.
expand_output_pattern = job_output.expand_output_pattern
ERROR_LINE_RE = job_output.ERROR_LINE_RE
REDACTED = job_output.REDACTED
redact = job_output.redact
tail_lines = job_output.tail_lines

# ---------------------------------------------------------------------------------------------
# Job states
# ---------------------------------------------------------------------------------------------

#: States of a job that is in the queue and will (or may again) run. A job of the requested name
#: in one of these states makes ``state: present`` a no-op. COMPLETING and STAGE_OUT are jobs that are
#: ending: they do not count, so a new job is submitted next to one that is finishing.
LIVE_STATES = frozenset([
    'PENDING', 'CONFIGURING', 'RUNNING', 'SUSPENDED', 'STOPPED', 'RESIZING', 'SIGNALING',
    'REQUEUED', 'REQUEUE_HOLD', 'REQUEUE_FED', 'RESV_DEL_HOLD',
])

#: States of a job that is ending: it no longer counts as live, but it is not over either.
ENDING_STATES = frozenset(['COMPLETING', 'STAGE_OUT'])

#: States of a job that Slurm put back in the queue after it had started (node failure, scontrol requeue).
REQUEUE_STATES = frozenset(['REQUEUED', 'REQUEUE_HOLD', 'REQUEUE_FED'])

#: Terminal states that are failures: waiting for anything else fails at once on them.
FAILED_STATES = frozenset([
    'FAILED', 'CANCELLED', 'TIMEOUT', 'NODE_FAIL', 'OUT_OF_MEMORY', 'BOOT_FAIL', 'DEADLINE',
    'PREEMPTED', 'SPECIAL_EXIT', 'REVOKED',
])

#: Every terminal state.
TERMINAL_STATES = FAILED_STATES | frozenset(['COMPLETED'])

#: The states a wait can be for (slurm_job's wait_condition choices), in the order a job meets them.
WAIT_STATES = ('PENDING', 'CONFIGURING', 'RUNNING', 'COMPLETING', 'COMPLETED', 'SUSPENDED', 'FAILED', 'CANCELLED',
               'TIMEOUT', 'NODE_FAIL', 'OUT_OF_MEMORY', 'BOOT_FAIL', 'DEADLINE', 'PREEMPTED')

#: Reasons of a PENDING job that mean: waiting for a free node (said so in timeout messages).
RESOURCE_REASONS = frozenset([
    'Resources', 'Priority', 'ReqNodeNotAvail', 'Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_priority_partitions',
    'PartitionNodeLimit', 'QOSGrpGRES', 'AssocGrpGRES', 'QOSMaxGRESPerUser', 'AssocGrpCpuLimit',
])

NEVER_SATISFIED = 'DependencyNeverSatisfied'
# The reason of a job waiting for the jobs it depends on.
DEPENDENCY = 'Dependency'

# ---------------------------------------------------------------------------------------------
# squeue -h -o FORMAT
# ---------------------------------------------------------------------------------------------

#: Field separator of our squeue formats: the ASCII unit separator, which no job name, path or
#: reason contains (a '|' may appear in job names and paths).
SEP = '\x1f'

#: (key, squeue -o code) of the detailed format, in order.
SQUEUE_FIELDS = (
    ('job_id', '%i'),
    ('state', '%T'),
    ('reason', '%r'),
    ('nodes', '%N'),
    ('user', '%u'),
    ('partition', '%P'),
    ('elapsed', '%M'),
    ('time_limit', '%l'),
    ('end_time', '%e'),
    ('dependency', '%E'),
    ('work_dir', '%Z'),
    ('name', '%j'),
)

#: (key, code) of the cheap format used with ``--only-job-state`` (Slurm 23.11.5 and later).
SQUEUE_STATE_FIELDS = (
    ('job_id', '%i'),
    ('state', '%T'),
)


def squeue_format(fields=SQUEUE_FIELDS):
    """The ``-o`` argument for the given fields."""
    return SEP.join(code for _key, code in fields)


def _clean(value):
    value = value.strip()
    if value in ('(null)', 'N/A', 'None', ''):
        return None
    return value


def parse_squeue(text, fields=SQUEUE_FIELDS):
    """Parse ``squeue -h -o squeue_format(fields)`` output into a list of dicts.

    Lines that do not carry every field (warnings, a header) are skipped. The last field takes
    the rest of the line. Values ``(null)``, ``N/A`` and ``None`` become None, except ``reason``
    where ``None`` is a real Slurm reason (kept as the string 'None').
    """
    jobs = []
    count = len(fields)
    for line in text.splitlines():
        if SEP not in line and count > 1:
            continue
        parts = line.split(SEP, count - 1)
        if len(parts) != count:
            continue
        job = {}
        for (key, _code), raw in zip(fields, parts):
            if key == 'reason':
                job[key] = raw.strip() or None
            else:
                job[key] = _clean(raw)
        if not job.get('job_id') or not job.get('state'):
            continue
        jobs.append(job)
    return jobs


# ---------------------------------------------------------------------------------------------
# scontrol show job
# ---------------------------------------------------------------------------------------------

#: Fields that scontrol prints alone on their line, whose value may contain spaces.
_WHOLE_LINE_KEYS = ('Command', 'WorkDir', 'StdErr', 'StdIn', 'StdOut', 'Comment', 'AdminComment', 'SystemComment',
                    'SubmitLine')
_KEY_RE = re.compile(r'(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_:/.]*)=')


def _parse_scontrol_line(line, record):
    stripped = line.strip()
    for key in _WHOLE_LINE_KEYS:
        if stripped.startswith(key + '='):
            record[key] = stripped[len(key) + 1:]
            return
    matches = list(_KEY_RE.finditer(stripped))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(stripped)
        record[match.group(1)] = stripped[match.end():end].strip()


def parse_scontrol_records(text):
    """Parse ``scontrol show job`` output into a list of raw ``{Key: value}`` dicts (one per job)."""
    records = []
    current = None
    for line in text.splitlines():
        if not line.strip():
            current = None
            continue
        if line.lstrip().startswith('JobId=') or current is None:
            current = {}
            records.append(current)
        _parse_scontrol_line(line, current)
    return [r for r in records if 'JobId' in r]


def _user_name(value):
    # UserId=glmuser(1001)
    if not value:
        return None
    return value.split('(', 1)[0] or None


def scontrol_to_job(record):
    """Map a raw scontrol record to the keys squeue parsing yields, plus exit_code and output_path."""
    array_job = _clean(record.get('ArrayJobId', ''))
    array_task = _clean(record.get('ArrayTaskId', ''))
    job_id = record.get('JobId')
    if array_job and array_task:
        job_id = '%s_%s' % (array_job, array_task)
    reason = record.get('Reason')
    return {
        'job_id': job_id,
        'name': _clean(record.get('JobName', '')),
        'user': _user_name(record.get('UserId')),
        'state': _clean(record.get('JobState', '')),
        'reason': reason.strip() if reason else None,
        'nodes': _clean(record.get('NodeList', '')),
        'partition': _clean(record.get('Partition', '')),
        'elapsed': _clean(record.get('RunTime', '')),
        'time_limit': _clean(record.get('TimeLimit', '')),
        'end_time': _clean(record.get('EndTime', '')),
        'dependency': _clean(record.get('Dependency', '')),
        'work_dir': _clean(record.get('WorkDir', '')),
        'output_path': _clean(record.get('StdOut', '')),
        'exit_code': _clean(record.get('ExitCode', '')),
        'batch_host': _clean(record.get('BatchHost', '')),
        'restarts': _clean(record.get('Restarts', '')),
        'submit_time': _clean(record.get('SubmitTime', '')),
        'start_time': _clean(record.get('StartTime', '')),
    }


#: The fields asked of ``sacct --parsable2`` (slurmdbd's record of a job, kept after slurmctld has forgotten it).
SACCT_FIELDS = ('JobID', 'JobName', 'User', 'State', 'ExitCode', 'Reason', 'Restarts', 'Submit', 'Start', 'End',
                'Elapsed', 'Timelimit', 'NodeList', 'Partition', 'WorkDir')
#: sacct's answer to a field its release does not have (22.05: ``Invalid field requested: "Restarts"``)
SACCT_REFUSED_FIELD_RE = re.compile(r'Invalid field requested: "([^"]+)"')

_CANCELLED_BY_RE = re.compile(r'^CANCELLED by (\S+)$')


def parse_sacct(text, fields=SACCT_FIELDS):
    """Parse ``sacct --parsable2 --noheader -X --format=FIELDS`` into job dicts with the keys of scontrol_to_job,
    plus ``source: accounting`` and ``cancelled_by`` (the uid in ``CANCELLED by 1001``). Steps (``123.batch``) and a
    header line are skipped; a line of another width is ignored."""
    jobs = []
    for line in text.splitlines():
        parts = line.split('|')
        if len(parts) != len(fields) or parts[0] == 'JobID':
            continue
        raw = dict(zip(fields, parts))
        job_id = raw['JobID'].strip()
        if job_id and '.' not in job_id:
            jobs.append(_sacct_job(job_id, raw))
    return jobs


def _sacct_job(job_id, raw):
    """The job dict of one line of sacct, RAW its fields by name."""
    def field(name, unset=None):
        """The field's value, None when blank, "None", "N/A"... or the field's own word for unset."""
        value = _clean(raw.get(name, ''))
        return None if value == unset else value
    state = field('State')
    cancelled = _CANCELLED_BY_RE.match(state or '')
    return {
        'job_id': job_id,
        'name': field('JobName'),
        'user': field('User'),
        'state': 'CANCELLED' if cancelled else (state.split()[0] if state else None),
        'cancelled_by': cancelled.group(1) if cancelled else None,
        'reason': field('Reason'),
        'nodes': field('NodeList', 'None assigned'),
        'partition': field('Partition'),
        'elapsed': field('Elapsed'),
        'time_limit': field('Timelimit'),
        'end_time': field('End', 'Unknown'),
        'start_time': field('Start', 'Unknown'),
        'submit_time': field('Submit'),
        'work_dir': field('WorkDir'),
        'exit_code': field('ExitCode'),
        'restarts': field('Restarts'),
        'dependency': None,
        'output_path': None,
        'source': 'accounting',
    }


def parse_time(value):
    """Seconds since the epoch of a Slurm time ``YYYY-MM-DDTHH:MM:SS`` (the host's time zone), or None."""
    if not value:
        return None
    try:
        return time.mktime(time.strptime(str(value).strip(), '%Y-%m-%dT%H:%M:%S'))
    except (ValueError, OverflowError):
        return None


def config_seconds(text, key):
    """The seconds of one ``KEY = N sec`` line of ``scontrol show config``, or None."""
    found = re.search(r'^%s\s*=\s*(\d+)\s*sec' % re.escape(key), text or '', re.M)
    return int(found.group(1)) if found else None


def duration_seconds(value):
    """Seconds of a Slurm duration (``--time``, squeue's ``%l``): ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``,
    ``D-HH:MM``, ``D-HH:MM:SS``; None for ``UNLIMITED``/``INFINITE``. ValueError when it is none of those."""
    text = str(value).strip()
    if text.upper() in ('UNLIMITED', 'INFINITE'):
        return None
    days, sep, rest = text.rpartition('-')
    parts = rest.split(':')
    if not all(p.isdigit() for p in parts) or len(parts) > 3 or (sep and not days.isdigit()):
        raise ValueError('not a Slurm time limit: %r' % (value,))
    numbers = [int(p) for p in parts]
    if days:                                        # D-HH, D-HH:MM, D-HH:MM:SS
        hours, minutes, seconds = (numbers + [0, 0])[:3]
    elif len(numbers) == 3:                         # HH:MM:SS
        hours, minutes, seconds = numbers
    else:                                           # MM, MM:SS
        hours, (minutes, seconds) = 0, (numbers + [0])[:2]
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def parse_scontrol_jobs(text):
    """Parse ``scontrol show job [ID]`` output into job dicts (see scontrol_to_job)."""
    return [scontrol_to_job(r) for r in parse_scontrol_records(text)]


# ---------------------------------------------------------------------------------------------
# sbatch, versions, dependencies, host lists
# ---------------------------------------------------------------------------------------------

_PARSABLE_RE = re.compile(r'^\s*(\d+)(?:;(\S+))?\s*$')


def parse_sbatch_parsable(text):
    """Parse ``sbatch --parsable`` stdout: ``123`` or ``123;cluster``. Returns (job_id, cluster|None).

    Raises ValueError when no line carries a job id.
    """
    for line in reversed(text.splitlines()):
        match = _PARSABLE_RE.match(line)
        if match:
            return match.group(1), match.group(2)
    raise ValueError('no job id in sbatch output: %r' % text)


_VERSION_RE = re.compile(r'(\d+)\.(\d+)(?:\.(\d+))?')


def parse_version(text):
    """Parse ``squeue --version`` (``slurm 22.05.8``, ``slurm-wlm 22.05.8``, ``slurm 24.11.1``).

    Returns (version string, (major, minor, patch)) or (None, None).
    """
    match = _VERSION_RE.search(text or '')
    if not match:
        return None, None
    parts = (int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))
    return match.group(0), parts


_DEP_RE = re.compile(r'^(afterany|afterok|afternotok|aftercorr|afterburstbuffer|after|singleton)(?::([^,?(]+))?(?:\(([^)]*)\))?$')


def parse_dependency(text):
    """Parse a dependency as squeue %E / scontrol Dependency= print it.

    ``afterok:4123(unfulfilled),afterany:7_*(failed)`` -> list of
    ``{'type': 'afterok', 'job_id': '4123', 'status': 'unfulfilled'}``. A ``+time`` suffix of ``after``
    is dropped. ``singleton`` yields job_id None.
    """
    deps = []
    if not text or text in ('(null)', 'None'):
        return deps
    for item in re.split(r'[,?]', text):
        item = item.strip()
        match = _DEP_RE.match(item)
        if not match:
            continue
        dtype, ids, status = match.groups()
        if not ids:
            deps.append({'type': dtype, 'job_id': None, 'status': status})
            continue
        for job_id in ids.split(':'):
            job_id = job_id.split('+', 1)[0].strip()
            if job_id.endswith('_*'):
                job_id = job_id[:-2]
            if job_id:
                deps.append({'type': dtype, 'job_id': job_id, 'status': status})
    return deps


def format_dependency(dependency):
    """Build the ``--dependency`` value from the module's structured list.

    ``[{'type': 'afterok', 'job_ids': ['1', '2']}, {'type': 'singleton'}]`` -> ``afterok:1:2,singleton``.
    A ``123;cluster`` id (as sbatch --parsable prints on a federation) is reduced to ``123``.
    """
    parts = []
    for dep in dependency or []:
        dtype = dep['type']
        if dtype == 'singleton':
            parts.append('singleton')
            continue
        ids = [str(i).split(';', 1)[0].strip() for i in (dep.get('job_ids') or [])]
        ids = [i for i in ids if i]
        if not ids:
            raise ValueError('dependency type %s needs job_ids' % dtype)
        parts.append(':'.join([dtype] + ids))
    return ','.join(parts)


_HOSTLIST_RE = re.compile(r'^([^\[,]*)\[([^\]]+)\](.*)$')


def first_host(nodelist):
    """The first host name of a Slurm host list: ``node[3-4,7]`` -> ``node3``, ``gpu-[007-008]`` -> ``gpu-007``."""
    if not nodelist:
        return None
    # split at top-level commas only
    depth = 0
    first = ''
    for char in nodelist:
        if char == '[':
            depth += 1
        elif char == ']':
            depth -= 1
        elif char == ',' and depth == 0:
            break
        first += char
    match = _HOSTLIST_RE.match(first)
    if not match:
        return first.strip() or None
    prefix, ranges, suffix = match.groups()
    start = ranges.split(',', 1)[0].split('-', 1)[0]
    return prefix + start + suffix


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------

#: stderr text of a controller that is down, restarting, overloaded or unreachable: retry, never a job failure.
TRANSIENT_PATTERNS = (
    'Unable to contact slurm controller',
    'Socket timed out on send/recv operation',
    'Zero Bytes were transmitted or received',
    'Connection refused',
    'Connection reset by peer',
    'Communication connection failure',
    'Transport endpoint is not connected',
    'backup controller in standby mode',
    'Slurm controller not responding',
    'Resource temporarily unavailable',
    'rate limit',
    'Too many open files',
    'Temporary failure in name resolution',
    'Message receive failure',
    'Message send failure',
)

INVALID_JOB_ID = 'Invalid job id specified'


def is_transient_error(stderr):
    text = (stderr or '').lower()
    return any(p.lower() in text for p in TRANSIENT_PATTERNS)


def is_invalid_job_id(stderr):
    return INVALID_JOB_ID.lower() in (stderr or '').lower()


#: (pattern in sbatch's stderr, what it means and what to do)
SBATCH_HINTS = (
    ('invalid partition',
     'the partition does not exist on this cluster: run `sinfo -s` and pick a partition it lists '
     '(sbatch_args: ["--partition=NAME"] or #SBATCH --partition in the script)'),
    ('Memory specification can not be satisfied',
     'no node has that much memory: lower --mem, or use --mem=0 with --exclusive to take a whole node'),
    ('Requested node configuration is not available',
     'no node of the partition offers what the job asks for (GPUs, CPUs, memory, features): '
     'run `sinfo -o "%P %D %c %m %G %f"` and ask for at most what a node has'),
    ('Requested time limit is invalid',
     'the time limit exceeds the partition\'s MaxTime: run `sinfo -o "%P %l"` and lower --time'),
    ('Invalid generic resource',
     'the GPU (gres) request is not valid here: run `sinfo -o "%P %G"` to see the GPUs nodes offer'),
    ('Invalid account',
     'the account is not valid for this user: run `sacctmgr show assoc user=$USER` or drop --account'),
    ('Invalid qos',
     'the QOS is not valid for this user: drop --qos or ask the administrators which to use'),
    ('Job dependency problem',
     'a dependency job id is unknown or already finished: check it with `squeue -j ID -t all`'),
    ('Unable to open file',
     'sbatch cannot read the batch script: check the path and its permissions'),
    ('AssocMaxSubmitJobLimit',
     'the user already has as many jobs as the site allows: cancel some (`squeue --me`)'),
    ('QOSMaxSubmitJobPerUserLimit',
     'the user already has as many jobs as the QOS allows: cancel some (`squeue --me`)'),
)


def sbatch_hint(stderr):
    """A sentence naming the cause of an sbatch rejection and its fix, or None."""
    text = (stderr or '').lower()
    for pattern, hint in SBATCH_HINTS:
        if pattern.lower() in text:
            return hint
    return None
