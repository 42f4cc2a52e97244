# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Slurm CLI client: one class that runs squeue, scontrol, sbatch and scancel.

It resolves each binary once with ``get_bin_path``, runs argv lists (never a shell) through
``module.run_command`` with a fixed locale and time format, counts the controller calls it makes,
and turns failures into exceptions that carry ``cmd``, ``rc``, ``stdout`` and ``stderr``. Errors of a
controller that is down or overloaded become :class:`SlurmTransientError`, so callers retry them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.glm.serve.plugins.module_utils import backoff
from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp

#: The environment of every query. SLURM_TIME_FORMAT=standard makes times ISO 8601 whatever the user's
#: profile says; SLURM_BITSTR_LEN=0 keeps long node lists and array ids whole.
QUERY_ENV = {'LC_ALL': 'C', 'SLURM_TIME_FORMAT': 'standard', 'SLURM_BITSTR_LEN': '0'}

#: sbatch passes its own environment to the job (--export=ALL), so it gets no forced locale.
SUBMIT_ENV = {'SLURM_TIME_FORMAT': 'standard'}


class SlurmError(Exception):
    """A Slurm command failed. ``kwargs()`` gives the fields for ``fail_json``."""

    def __init__(self, msg, cmd=None, rc=None, stdout=None, stderr=None):
        super(SlurmError, self).__init__(msg)
        self.msg = msg
        self.cmd = cmd
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr

    def kwargs(self):
        result = {'msg': self.msg}
        if self.cmd is not None:
            result.update(cmd=self.cmd, rc=self.rc, stdout=self.stdout, stderr=self.stderr)
        return result


class SlurmAccountingUnavailable(SlurmError):
    """sacct cannot answer (no accounting on the site, slurmdbd down): callers do without it."""


class SlurmTransientError(SlurmError):
    """The controller could not be reached or timed out: worth retrying, never a job failure."""


class SlurmCli:
    """Runs the Slurm commands for one module invocation.

    ``polls`` counts the squeue/scontrol queries that reach slurmctld (sbatch and scancel are not counted).
    ``clock`` (an object with ``now()`` and ``sleep(s)``) is the one clock of a module run: ``retry``, the submit
    lock and the waiter use it.
    """

    def __init__(self, module, clock=None):
        self.module = module
        self.clock = clock or SystemClock()
        self._bins = {}
        self._version = None
        self._version_tuple = None
        self._only_job_state = None
        self._sacct_fields = sp.SACCT_FIELDS
        self.polls = 0
        #: sacct calls (slurmdbd's load, not slurmctld's)
        self.accounting_calls = 0
        #: called with (seconds, last error, timeout) when retry() rode out an outage of the controller
        self.on_outage = None

    # -- plumbing --------------------------------------------------------------------------------

    def bin(self, name):
        if name not in self._bins:
            self._bins[name] = self.module.get_bin_path(name, required=True)
        return self._bins[name]

    def run(self, argv, cwd=None, umask=None, environ=None, poll=True):
        """Run argv; return (rc, stdout, stderr). Raises SlurmTransientError on controller trouble."""
        if poll:
            self.polls += 1
        kwargs = {'environ_update': dict(environ if environ is not None else QUERY_ENV)}
        if cwd is not None:
            kwargs['cwd'] = cwd
        if umask is not None:
            kwargs['umask'] = umask
        rc, out, err = self.module.run_command(argv, **kwargs)
        if rc != 0 and sp.is_transient_error(err):
            raise SlurmTransientError(
                'Slurm controller unreachable or busy: %s' % (err.strip().splitlines() or [''])[-1],
                cmd=argv, rc=rc, stdout=out, stderr=err)
        return rc, out, err

    def fail(self, msg, argv, rc, out, err):
        raise SlurmError(msg, cmd=argv, rc=rc, stdout=out, stderr=err)

    def retry(self, func, timeout, *args, **kwargs):
        """Call func, retrying SlurmTransientError with backoff (1, 2, 4 ... 30 s) until timeout elapses."""
        started = self.clock.now()
        try:
            value, errors = backoff.retry(lambda: func(*args, **kwargs), self.clock, timeout, SlurmTransientError,
                                          backoff.Backoff(1.0, 30.0))
        except SlurmTransientError as exc:
            exc.msg = '%s (retried for %d s, retry_timeout=%d)' % (exc.msg, round(self.clock.now() - started), timeout)
            raise
        if errors and self.on_outage is not None:
            self.on_outage(self.clock.now() - started, errors[-1].msg, timeout)
        return value

    # -- version ---------------------------------------------------------------------------------

    def version(self):
        """(version string, tuple) from ``squeue --version`` (no controller call), cached."""
        if self._version is None:
            argv = [self.bin('squeue'), '--version']
            rc, out, err = self.run(argv, poll=False)
            if rc != 0:
                self.fail('cannot run squeue --version: is the Slurm client configured on this host?', argv, rc, out, err)
            self._version, self._version_tuple = sp.parse_version(out)
            if self._version is None:
                self._version, self._version_tuple = 'unknown', (0, 0, 0)
        return self._version, self._version_tuple

    def only_job_state(self):
        """True when squeue has --only-job-state: Slurm 23.11.5 and later (its NEWS: "squeue - add --only-job-state
        option"; 23.11.0 to 23.11.4 refuse the option)."""
        if self._only_job_state is None:
            self._only_job_state = (self.version()[1] or (0,)) >= (23, 11, 5)
        return self._only_job_state

    # -- queries ---------------------------------------------------------------------------------

    def squeue(self, job_ids=None, name=None, user=None, all_states=False, fields=sp.SQUEUE_FIELDS):
        """Detailed squeue, for lookups by name/user (``-t all`` with ``all_states``).

        ``--local`` spares the federation RPC (REQUEST_FED_INFO). A purged id (``Invalid job id specified``)
        yields no row; with several ids, each is asked again on its own so the others are not lost.
        Polls of known ids use :meth:`show_job` instead: one RPC where squeue makes two or three.
        """
        argv = [self.bin('squeue'), '--local', '-h']
        if all_states:
            argv += ['-t', 'all']
        if job_ids:
            argv += ['-j', ','.join(str(j) for j in job_ids)]
        if name:
            argv += ['-n', name]
        if user:
            argv += ['-u', user]
        argv += ['-o', sp.squeue_format(fields)]
        rc, out, err = self.run(argv)
        if rc != 0:
            if sp.is_invalid_job_id(err) and job_ids:
                if len(job_ids) == 1:
                    return []
                jobs = []
                for job_id in job_ids:
                    jobs += self.squeue([job_id], name=name, user=user, all_states=all_states, fields=fields)
                return jobs
            self.fail('squeue failed: %s' % err.strip(), argv, rc, out, err)
        return sp.parse_squeue(out, fields)

    def states(self, job_ids):
        """``squeue --only-job-state`` (Slurm 23.11.5+): rows with job_id and state only, one call for all ids.

        Returns None when the cheap form is unavailable or refused (then it is not tried again).
        """
        if not self.only_job_state():
            return None
        argv = [self.bin('squeue'), '--local', '-h', '--only-job-state', '-t', 'all', '-j', ','.join(job_ids),
                '-o', sp.squeue_format(sp.SQUEUE_STATE_FIELDS)]
        rc, out, err = self.run(argv)
        if rc == 0:
            return sp.parse_squeue(out, sp.SQUEUE_STATE_FIELDS)
        if sp.is_invalid_job_id(err):
            return []
        self._only_job_state = False
        return None

    def poll(self, job_ids):
        """The current rows of known job ids: one ``scontrol --local show job`` per id (a single
        REQUEST_JOB_INFO_SINGLE RPC each). Purged ids are absent from the result."""
        rows = []
        for job_id in job_ids:
            job = self.show_job(job_id)
            if job is not None:
                rows.append(job)
        return rows

    def sacct(self, job_ids=None, name=None, user=None, since='now-7days'):
        """The jobs slurmdbd recorded (``sacct -X``: allocations, not steps), as job dicts (slurm_parse.parse_sacct),
        oldest first. Asks slurmdbd, not slurmctld (counted in ``accounting_calls``, not ``polls``). Raises
        SlurmAccountingUnavailable when sacct cannot answer: no accounting on the site (``Slurm accounting storage
        is disabled``), slurmdbd down, or no sacct; the callers then do without, as before accounting."""
        if 'sacct' not in self._bins:
            self._bins['sacct'] = self.module.get_bin_path('sacct')     # optional: None when not installed
        if not self._bins['sacct']:
            raise SlurmAccountingUnavailable('sacct is not installed on this host')
        while True:
            fields = self._sacct_fields
            rc, out, err, argv = self._sacct_once(fields, job_ids, name, user, since)
            refused = sp.SACCT_REFUSED_FIELD_RE.search(err or '') if rc != 0 else None
            # a field this release does not know (22.05 has no Restarts): sacct refuses it before it asks slurmdbd;
            # the same question without it (the refused one is not counted: it never reached slurmdbd)
            if refused and refused.group(1) in fields and len(fields) > 1:
                self._sacct_fields = tuple(f for f in fields if f != refused.group(1))
                self.accounting_calls -= 1
                continue
            break
        if rc != 0 or 'accounting storage is disabled' in (err or ''):
            raise SlurmAccountingUnavailable('sacct failed: %s' % ((err or '').strip().splitlines() or ['rc %d' % rc])[-1],
                                             argv, rc, out, err)
        return sp.parse_sacct(out, fields)

    def _sacct_once(self, fields, job_ids, name, user, since):
        """One sacct call: (rc, out, err, argv); SlurmAccountingUnavailable when it cannot run or slurmdbd is away."""
        argv = [self._bins['sacct'], '--parsable2', '--noheader', '-X', '--format=' + ','.join(fields)]
        if job_ids:
            argv += ['--jobs=' + ','.join(str(j) for j in job_ids)]
        else:
            argv += ['--starttime=' + since]
        if name:
            argv += ['--name=' + name]
        if user:
            argv += ['--user=' + user]
        self.accounting_calls += 1
        try:
            rc, out, err = self.run(argv, poll=False)
        except SlurmTransientError as exc:
            raise SlurmAccountingUnavailable(exc.msg, argv)
        except (OSError, IOError) as exc:
            raise SlurmAccountingUnavailable('sacct could not run: %s' % exc, argv)
        return rc, out, err, argv

    def show_job(self, job_id):
        """``scontrol --local show job ID`` as a job dict (with output_path and exit_code), or None if purged."""
        argv = [self.bin('scontrol'), '--local', 'show', 'job', str(job_id)]
        rc, out, err = self.run(argv)
        if rc != 0:
            if sp.is_invalid_job_id(err):
                return None
            self.fail('scontrol show job %s failed: %s' % (job_id, err.strip()), argv, rc, out, err)
        jobs = sp.parse_scontrol_jobs(out)
        for job in jobs:
            if job['job_id'] == str(job_id):
                return job
        return jobs[0] if jobs else None

    def batch_script(self, job_id):
        """The batch script Slurm stored for the job (``scontrol write batch_script ID -``), or None when Slurm
        cannot give it (purged job, a site that refuses it)."""
        argv = [self.bin('scontrol'), 'write', 'batch_script', str(job_id), '-']
        rc, out, err = self.run(argv)
        if rc != 0:
            return None
        return out

    # -- changes ---------------------------------------------------------------------------------

    def sbatch_argv(self, script, name, dependency=None, kill_on_invalid_dep=True, extra_args=None):
        argv = [self.bin('sbatch'), '--parsable']
        if name:
            argv.append('--job-name=%s' % name)
        dep = sp.format_dependency(dependency)
        if dep:
            argv.append('--dependency=%s' % dep)
            argv.append('--kill-on-invalid-dep=%s' % ('yes' if kill_on_invalid_dep else 'no'))
        argv += list(extra_args or [])
        argv.append(script)
        return argv

    def submit(self, argv, chdir, umask):
        """Run a prepared sbatch argv in chdir with umask. Returns (job_id, cluster)."""
        rc, out, err = self.run(argv, cwd=chdir, umask=umask, environ=SUBMIT_ENV, poll=False)
        if rc != 0:
            hint = sp.sbatch_hint(err)
            reason = (err.strip().splitlines() or ['sbatch exited %d' % rc])[-1]
            msg = 'sbatch rejected the job: %s' % reason
            if hint:
                msg += '. Cause and fix: %s' % hint
            self.fail(msg, argv, rc, out, err)
        try:
            return sp.parse_sbatch_parsable(out)
        except ValueError:
            self.fail('sbatch printed no job id', argv, rc, out, err)

    def cancel(self, job_ids):
        argv = [self.bin('scancel')] + [str(j) for j in job_ids]
        rc, out, err = self.run(argv, poll=False)
        if rc != 0:
            self.fail('scancel failed: %s' % err.strip(), argv, rc, out, err)

    def signal_batch(self, job_ids, signal):
        """``scancel --batch --signal=SIGNAL``: the signal to the batch script of each job (not its steps), which
        may trap it (glm.serve's replicas drain on USR1); the jobs are not cancelled."""
        argv = [self.bin('scancel'), '--batch', '--signal=%s' % signal] + [str(j) for j in job_ids]
        rc, out, err = self.run(argv, poll=False)
        if rc != 0:
            self.fail('scancel --signal=%s failed: %s' % (signal, err.strip()), argv, rc, out, err)

    def start_now(self, job_id):
        """``scontrol update JobId=N StartTime=now``: a pending job's begin time set to now (a user may, for their own
        jobs; the controller never sets it earlier than now), which also starts a scheduling pass. False when the job
        is no longer pending (Slurm's "Job is no longer pending execution")."""
        argv = [self.bin('scontrol'), 'update', 'JobId=%s' % job_id, 'StartTime=now']
        rc, out, err = self.run(argv, poll=False)
        if rc != 0 and 'no longer pending' in err.lower():
            return False            # ESLURM_JOB_NOT_PENDING: it started (or ended) since it was seen pending
        if rc != 0:
            self.fail('scontrol update StartTime of job %s failed: %s' % (job_id, err.strip()), argv, rc, out, err)
        return True

    def kill_wait(self):
        """The cluster's ``KillWait`` in seconds (``scontrol show config``), or None when it cannot be read."""
        argv = [self.bin('scontrol'), 'show', 'config']
        rc, out, _err = self.run(argv)
        return sp.config_seconds(out, 'KillWait') if rc == 0 else None

    def update_end_time(self, job_id, end_time):
        argv = [self.bin('scontrol'), 'update', 'JobId=%s' % job_id, 'EndTime=%s' % end_time]
        rc, out, err = self.run(argv, poll=False)
        if rc != 0:
            msg = 'scontrol update EndTime of job %s failed: %s' % (job_id, err.strip())
            if 'denied' in err.lower():
                msg += '. A user may only shorten a running job (an EndTime later than the current one needs an administrator)'
            self.fail(msg, argv, rc, out, err)


class SystemClock:
    """The real clock: monotonic time and sleep. Tests replace it with a fake one."""

    @staticmethod
    def now():
        return time.monotonic()

    @staticmethod
    def sleep(seconds):
        if seconds > 0:
            time.sleep(seconds)
