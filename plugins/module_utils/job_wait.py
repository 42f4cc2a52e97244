# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The wait step of the verbs: a JobWaiter for the module's wait options, and what the wait saw as result fields.

:func:`run_wait` returns ``(outcome, fields)``; a failed wait raises WaitFailed carrying ``wait_fields``.
:func:`merge_wait` puts either into a verb's result (the jobs a wait cancelled are added, not replaced).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.glm.serve.plugins.module_utils import model_probe as mp
from ansible_collections.glm.serve.plugins.module_utils import serve_progress
from ansible_collections.glm.serve.plugins.module_utils.hints import matching_hints
from ansible_collections.glm.serve.plugins.module_utils.job_lookup import chain_entries, job_fields
from ansible_collections.glm.serve.plugins.module_utils.job_waiter import JobWaiter, WaitFailed, describe
from ansible_collections.glm.serve.plugins.module_utils.slurm_errors import ActionError
from ansible_collections.glm.serve.plugins.module_utils.wait_policy import WaitPolicy

#: The fields of a failed attempt that a resubmission (bad-node retry) drops.
ATTEMPT_KEYS = ('hints', 'log_tail', 'wait_done', 'phase', 'progress')


def make_probe(probe):
    """A ModelProbe for the module's ``probe`` option (None without it), and the key (a secret to redact)."""
    if not probe:
        return None, ()
    try:
        key = mp.read_key(probe['key_file'])
    except mp.KeyFileError as exc:
        raise ActionError(str(exc))
    try:
        model_probe = mp.ModelProbe(probe['port'], probe.get('path') or '/v1/models', key, probe['model'],
                                    timeout=probe.get('timeout') or 5, key_file=probe['key_file'],
                                    tls_cert=probe.get('tls_cert'), endpoint_file=probe.get('endpoint_file'))
    except ValueError as exc:   # probe.tls_cert names no certificate
        raise ActionError('%s; set probe.tls_cert to the PEM certificate the server presents' % exc)
    return model_probe, (key,)


def policy(params, timeout=None):
    """The waiter's policy from the module's wait options."""
    return WaitPolicy(timeout=params['wait_timeout'] if timeout is None else timeout, cap=params['wait_sleep'])


def progress_reader(ctx, waiter, secrets=()):
    """A serve_progress.Progress over the waiter's jobs (their output files) and the ``progress`` option's model
    directory; the download sample of the last slice gives the rate."""
    spec = ctx.params.get('progress') or {}
    resume = ctx.params.get('wait_resume') or {}

    def read_log(job):
        return serve_progress.log_end(waiter.output_paths.get(job.get('job_id')) or job.get('output_path'), ctx.files, secrets)

    return serve_progress.Progress(model_dir=spec.get('model_dir'), read_log=read_log, sample=resume.get('sample'),
                                   floor=resume.get('floor'))


def merge_wait(result, fields):
    """Put a wait's fields into ``result``: ``wait_cancelled`` joins ``cancelled`` (and makes it changed)."""
    fields = dict(fields)
    for cancelled in fields.pop('wait_cancelled', ()):
        if cancelled not in result['cancelled']:
            result['cancelled'].append(cancelled)
            result['changed'] = True
    result.update(fields)
    return result


def failed_fields(ctx, exc, waiter, progress):
    """What a failed wait saw, as result fields."""
    fields = dict(job_fields(exc.job), wait_cancelled=list(exc.cancelled), chain=chain_entries(exc.chain),
                  events=waiter.recent_events(),
                  duration=round(ctx.clock.now() - waiter.start, 3) if waiter.start is not None else 0.0)
    if exc.hints:
        fields['hints'] = exc.hints
    endpoint = waiter.targets[0].port.endpoint if waiter.targets[0].port else None
    if endpoint:
        fields['endpoint'] = endpoint
    if exc.log_tail:
        fields['log_tail'] = exc.log_tail
    if progress is not None:
        fields.update(wait_done=True, phase='failed', progress='failed: %s' % exc.summary)
    return fields


def slice_fields(ctx, waiter, target, progress):
    """Where a wait whose slice is over (the wait is not) stands, as result fields, with ``resume``."""
    chain = waiter.chain(target)
    said = progress.describe(chain)
    return dict(job_fields(chain[-1]), chain=chain_entries(chain), events=waiter.recent_events(),
                duration=round(ctx.clock.now() - waiter.start, 3), wait_done=False, phase=said['phase'],
                progress=said['line'],
                resume={'job_id': target.job_id, 'waiter': waiter.snapshot(), 'sample': said['sample'],
                        'floor': {'about': said.get('about'), 'phase': said['phase'], 'line': said['line']}})


def done_fields(outcome, target, progress):
    """What a wait that reached its goal saw, as result fields."""
    fields = dict(job_fields(outcome['job']), chain=chain_entries(outcome['chain']), events=outcome['events'],
                  duration=outcome['duration'])
    if outcome.get('output_path'):
        fields['output_path'] = outcome['output_path']
    if target.probe is not None:
        fields.update(endpoint=outcome['endpoint'], models=outcome['models'], max_model_len=outcome['max_model_len'])
    if progress is not None and target.probe is None:
        fields.update(wait_done=True, phase='ready', progress='done: %s' % describe(outcome['job']))
    elif progress is not None:
        said = progress.describe(outcome['chain'], ready=bool(outcome.get('endpoint')), endpoint=outcome.get('endpoint'),
                                 model=target.probe.model)
        fields.update(wait_done=True, phase=said['phase'], progress=said['line'])
    return fields


def make_waiter(ctx, target, until_gone=False, secrets=(), timeout=None):
    return JobWaiter(ctx.cli, target, policy=policy(ctx.params, timeout), clock=ctx.clock, files=ctx.files,
                     secrets=secrets, on_event=lambda event: ctx.log('slurm_job wait: %s' % event['line']),
                     until_gone=until_gone, cancel_dead=ctx.params.get('kill_on_invalid_dep', True) and not until_gone,
                     accounting=ctx.params.get('accounting', True))


def run_wait(ctx, target, until_gone=False, secrets=(), timeout=None, hints=(), snapshot=None):
    """Wait for ``target`` (a job_waiter.Target). Returns (the waiter's outcome, result fields); a WaitFailed
    leaves with ``wait_fields``, what the wait saw until it failed.

    With the module's ``wait_slice``, waits at most that long (less when the deploy's phase changes) and the
    outcome is None when the wait is not over; the fields then hold ``resume`` (the waiter's snapshot, for the next
    slice) and ``progress``, the line that says where the deploy stands. ``snapshot``: the last slice's."""
    waiter = make_waiter(ctx, target, until_gone, secrets, timeout)
    slice_seconds = ctx.params.get('wait_slice') or None
    progress = progress_reader(ctx, waiter, secrets) if slice_seconds and not until_gone else None
    if snapshot is not None and not waiter.restore(snapshot):
        ctx.warn('the wait_resume given does not fit job %s (another version or job): waiting afresh' % target.job_id)
    try:
        outcome = waiter.wait(slice_seconds=slice_seconds,
                              phase=(lambda: progress.phase(waiter.chain(target))) if progress else None)
    except WaitFailed as exc:
        exc.hints = matching_hints(hints, exc)
        exc.wait_fields = failed_fields(ctx, exc, waiter, progress)
        raise
    if outcome is None:
        return None, slice_fields(ctx, waiter, target, progress)
    return outcome, done_fields(outcome, target, progress)


def wait_into(ctx, result, target, **kwargs):
    """run_wait, its fields merged into ``result`` (also when it fails). Returns the outcome."""
    try:
        outcome, fields = run_wait(ctx, target, **kwargs)
    except WaitFailed as exc:
        merge_wait(result, exc.wait_fields)
        raise
    merge_wait(result, fields)
    return outcome
