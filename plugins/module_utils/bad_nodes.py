# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Nodes to avoid: a job that failed for a reason of its node (a GPU check) is submitted again without it.

The list is a JSON file {node: {'cause', 'since', 'job_id'}} (the ``bad_nodes`` option's ``file``); an entry
holds for ``ttl`` seconds after it was added.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
import time

from ansible_collections.glm.serve.plugins.module_utils.slurm_errors import ActionError, attach
from ansible_collections.glm.serve.plugins.module_utils.submit_record import write_json


def read_bad_nodes(path, ttl, now=None):
    """{node: {'cause', 'since', 'job_id'}} of the list at path, without the entries older than ttl seconds."""
    now = time.time() if now is None else now
    try:
        with open(path) as handle:
            data = json.load(handle)
    except (IOError, OSError, ValueError, TypeError):
        return {}
    if not isinstance(data, dict):
        return {}
    fresh = {}
    for node, entry in data.items():
        if isinstance(entry, dict) and isinstance(entry.get('since'), (int, float)) and now - entry['since'] < ttl:
            fresh[str(node)] = entry
    return fresh


def write_bad_nodes(path, entries, warn):
    try:
        write_json(path, entries, '.bad-nodes-')
    except (IOError, OSError) as exc:
        warn('cannot write the bad-node list %s (%s): the next run may try the node again' % (path, exc))


def duration(seconds):
    return '%d h' % (seconds // 3600) if seconds % 3600 == 0 else '%d s' % seconds


def sbatch_excludes(args):
    """(sbatch_args without --exclude/-x, the nodes they excluded)."""
    rest, nodes, args = [], [], list(args or [])
    while args:
        arg = args.pop(0)
        if arg.startswith('--exclude='):
            nodes += arg.split('=', 1)[1].split(',')
        elif arg in ('--exclude', '-x') and args:
            nodes += args.pop(0).split(',')
        elif arg.startswith('-x') and len(arg) > 2:
            nodes += arg[2:].split(',')
        else:
            rest.append(arg)
    return rest, [n for n in nodes if n]


def _needed(spec):
    return max(1, spec.get('job_nodes') or 1)


def _all_excluded(spec, bad, usable):
    """The ActionError for a list that leaves fewer usable nodes than the job needs."""
    need = _needed(spec)
    what = ('every node the job can run on (%s) is on the bad-node list' % ', '.join(spec['nodes']) if not usable else
            'the job needs %d nodes and only %s of the nodes it can run on (%s) %s not on the bad-node list' % (
                need, ', '.join(usable), ', '.join(spec['nodes']), 'is' if len(usable) == 1 else 'are'))
    return ActionError(
        '%s %s: %s. Nothing was submitted. Check the nodes (or ask the cluster\'s administrators to), then remove '
        'the file to try them again; entries expire %s after they were added' % (what, spec['file'], '; '.join(
            '%s: %s' % (n, bad[n].get('cause')) for n in sorted(bad)), duration(spec['ttl'])))


def sbatch_args_avoiding(params):
    """(sbatch_args with the nodes of the bad-node list and the user's own --exclude in one --exclude, the bad
    nodes excluded or None). Raises ActionError, before anything is submitted, when that would exclude every node
    of ``bad_nodes.nodes`` (the error carries ``excluded_nodes``)."""
    args = list(params.get('sbatch_args') or [])
    spec = params.get('bad_nodes')
    bad = read_bad_nodes(spec['file'], spec['ttl']) if spec else None
    if not bad:
        return args, None
    rest, own = sbatch_excludes(args)
    excluded = sorted(set(own) | set(bad))
    usable = [n for n in spec.get('nodes') or [] if n not in excluded]
    if spec.get('nodes') and len(usable) < _needed(spec):
        raise attach(_all_excluded(spec, bad, usable), {'excluded_nodes': sorted(bad)})
    return rest + ['--exclude=%s' % ','.join(excluded)], sorted(bad)


def bad_node_of(spec, exc, job_id):
    """(node, cause) when the job ``job_id`` itself failed and its log tail matches ``bad_nodes.pattern``."""
    failed = exc.failed_job or {}
    if not spec or exc.timed_out or str(failed.get('job_id')) != str(job_id):
        return None, None
    match = re.search(spec['pattern'], '\n'.join(exc.log_tail or []), re.MULTILINE)
    if not match:
        return None, None
    groups = match.groupdict()
    node = groups.get('node') or (failed.get('nodes') or '').split(',')[0]
    if not node or node in ('(null)', 'None'):
        return None, None
    return node, (groups.get('cause') or match.group(0)).strip()


def avoid_and_retry(spec, exc, job_id, attempt, warn, now=None):
    """After the job failed: when for a reason of its node, put the node on the list. Returns (again, entry):
    again is True when another attempt should be submitted (retries left and a node left; else the failure gets
    a note saying what was done); entry is the node's {'node', 'cause', 'job_id'} (None: not the node's fault)."""
    node, cause = bad_node_of(spec, exc, job_id)
    if node is None:
        return False, None
    entries = read_bad_nodes(spec['file'], spec['ttl'])
    entries[node] = {'cause': cause, 'since': int(time.time() if now is None else now), 'job_id': str(job_id)}
    write_bad_nodes(spec['file'], entries, warn)
    entry = {'node': node, 'cause': cause, 'job_id': str(job_id)}
    left = [n for n in spec.get('nodes') or [] if n not in entries]
    enough = len(left) >= _needed(spec)
    if attempt < spec['retries'] and (enough or not spec.get('nodes')):
        warn('job %s failed on node %s (%s): submitting it again without that node (on the bad-node list %s for %s)' % (
            job_id, node, cause, spec['file'], duration(spec['ttl'])))
        return True, entry
    why = ('after %d attempts' % (attempt + 1) if enough or not spec.get('nodes') else 'no other node is left' if not left
           else 'fewer nodes than the job needs (%d) are left' % _needed(spec))
    exc.notes.append('Node %s failed the job (%s) and is on the bad-node list %s for %s; not submitted again: %s' % (
        node, cause, spec['file'], duration(spec['ttl']), why))
    return False, entry
