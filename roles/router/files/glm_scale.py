# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The replicas' autoscaler (server_replicas_max; docs/replicas.md "Replicas that follow the load"): the router job's
launcher (glm_router.py) calls Scaler.round once a round while its job serves the endpoint. Standard library only.

- **The signal**: the requests running and queued in the serving replicas, each replica's own
  ``sglang:num_running_reqs + sglang:num_queue_reqs`` (its ``/metrics``, no key; glm_router.py's busy_requests, which
  the drain reads too). One HTTP call per serving replica a round; no Slurm call. (The gateway's ``GET /loads``
  aggregate says the same in one call, but only from workers that serve ``/v1/loads``, which it polls every
  ``--load-monitor-interval`` s: the replicas' own gauges are now, and need nothing of the gateway's version.)
- **The decision** (Policy): up when the load per serving replica stayed above the target for ``up_after`` s, down
  when it would have fitted in one replica fewer at half the target for ``down_after`` s; never above the most nor
  below the deploy's replicas; nothing while a replica is coming or leaving (the window starts again once it has
  joined or left: the load per replica is measured with the replicas there are); a cool-down after each decision.
- **Up**: the lowest free name above the deploy's replicas (NAME-k, the deployment's Slurm comment) is looked up
  once (``squeue --name``: a job of that name already queued is adopted as coming, never a second one), then
  submitted with the deploy's own script (the GPU check, the health gate, the successors) and sbatch arguments, the
  nodes of the bad-node list excluded. It counts as coming until its address file appears; while it comes, one
  ``squeue`` a minute asks whether its job still lives (one that ended before it served holds the next submission
  for twice the cool-down, doubling: a failing node does not make a loop).
- **Down**: the highest serving replica above the deploy's replicas leaves the router (its address file removed:
  Sync drains it, requests in flight finish), then its job and the successor it submitted are cancelled, one
  ``scancel``.
- Each decision and its reason is a line of the scale log (``EPOCH ISO-TIME WHAT: WHY``), which the status and logs
  playbooks show, and of the job's log.

Slurm calls: none in steady state; 2 per scale-up, 1 per scale-down, 1 a minute while a replica is coming.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import subprocess
import time

UP, DOWN = 'up', 'down'
#: Seconds between two looks at a coming replica's job (squeue): the controller's one steady cost while one comes.
COMING_CHECK = 60.0
#: The submit environment: what the router job's own allocation put in its environment must not shape the replica's
#: (sbatch reads SBATCH_*, srun SLURM_*/SRUN_* input variables: a replica submitted from here would inherit the
#: router's CPU count and memory), as if it were submitted from the login node as the deploy does. SLURM_CONF stays:
#: on a configless cluster slurmd sets it in the job's environment to its cached slurm.conf, which sbatch needs.
DROP_ENV = re.compile(r'^((SLURM_(?!CONF$))|SBATCH_|SALLOC_|SRUN_|GLM_SUCCESSOR_OF$)')
#: The states of a job that will still serve (squeue's %T): ended, ending or requeued by hand are not among them.
LIVE = ('PENDING', 'CONFIGURING', 'RUNNING', 'SUSPENDED', 'REQUEUED', 'RESIZING')


class Policy(object):
    """The decision over time: ``decide`` is given each round's figures and says UP, DOWN or None, with why."""

    def __init__(self, least, most, target, up_after=60.0, down_after=900.0, cooldown=None):
        if not 1 <= least <= most:
            raise ValueError('the replicas must be 1 <= least (%s) <= most (%s)' % (least, most))
        if target <= 0:
            raise ValueError('the target load per replica must be above 0, not %s' % target)
        self.least, self.most, self.target = int(least), int(most), float(target)
        self.up_after, self.down_after = float(up_after), float(down_after)
        self.cooldown = float(up_after if cooldown is None else cooldown)
        self.above_since = None     # when the load per replica went above the target (this streak)
        self.below_since = None     # when the load began to fit in one replica fewer at half the target
        self.last = None            # when the last decision was made
        self.hold_until = None      # a replica failed before it served: no submission before then

    def decide(self, now, load, serving, coming):
        """(UP, DOWN or None, the reason) for this round: LOAD the running + waiting requests of the service (None:
        not known this round), SERVING the replicas that serve, COMING those submitted or leaving, not settled yet."""
        if serving < 1 or load is None:
            self.above_since = self.below_since = None
            return None, 'no replica serves' if serving < 1 else 'the load is not known this round'
        if coming:
            # the window starts again once the replicas are settled: the load per replica is measured with them
            self.above_since = self.below_since = None
            return None, '%d replica(s) coming or leaving' % coming
        per = float(load) / serving
        self.above_since = (self.above_since if self.above_since is not None else now) if per > self.target else None
        fits = serving > 1 and load <= self.target * (serving - 1) * 0.5
        self.below_since = (self.below_since if self.below_since is not None else now) if fits else None
        held = self._held(now, serving)
        if held:
            return None, held
        if self.above_since is not None and now - self.above_since >= self.up_after and serving + coming < self.most:
            if self.hold_until is not None and now < self.hold_until:
                return None, 'a replica failed before it served: no new one for %d s more' % (self.hold_until - now)
            return self._made(now, UP, '%.1f requests per replica for %d s, above the target %g (%d serve, at most %d)' % (
                per, now - self.above_since, self.target, serving, self.most))
        if self.below_since is not None and now - self.below_since >= self.down_after and serving > self.least:
            return self._made(now, DOWN, '%d requests would fit in %d replica%s at half the target %g, for %d s' % (
                load, serving - 1, '' if serving == 2 else 's', self.target, now - self.below_since))
        return None, '%.1f requests per replica (target %g), %d serve' % (per, self.target, serving)

    def failed(self, now, times):
        """A replica ended before it served (TIMES in a row): the next submission waits 2, 4, 8... cool-downs."""
        self.hold_until = now + self.cooldown * 2 ** min(times, 6)

    def _held(self, now, serving):
        """Why no decision may be made this round, or None."""
        if serving < self.least:
            return '%d of the deploy\'s %d replicas serve' % (serving, self.least)
        if self.last is not None and now - self.last < self.cooldown:
            return 'cooling down (%d s of %d since the last decision)' % (now - self.last, self.cooldown)
        return None

    def _made(self, now, decision, reason):
        self.last, self.above_since, self.below_since = now, None, None
        return decision, reason


def service_load(urls, busy):
    """The requests running and queued in the replicas at URLS (BUSY(url): a replica's, or None when it does not
    say), or None when none of them says."""
    said = [n for n in (busy(url) for url in urls) if n is not None]
    return sum(said) if said else None


def replica_files(folder):
    """{replica name: (url, job id or '')} from the replicas' address files (NAME.url: the URL, then the job's id)."""
    found = {}
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return found
    for name in names:
        if not name.endswith('.url'):
            continue
        try:
            with open(os.path.join(folder, name), encoding='utf-8') as handle:
                lines = handle.read().splitlines()
        except OSError:
            continue
        if lines and (lines[0].startswith('http://') or lines[0].startswith('https://')):
            found[name[:-len('.url')]] = (lines[0].strip().rstrip('/'), (lines[1].strip() if len(lines) > 1 else ''))
    return found


def fresh_bad_nodes(path, ttl, now=None):
    """The nodes of the bad-node list (``{node: {"since": EPOCH, ...}}``) younger than TTL seconds, sorted."""
    try:
        with open(path, encoding='utf-8') as handle:
            data = json.load(handle)
    except (OSError, ValueError, TypeError):
        return []
    now = time.time() if now is None else now
    return sorted(str(node) for node, entry in (data.items() if isinstance(data, dict) else ())
                  if isinstance(entry, dict) and isinstance(entry.get('since'), (int, float)) and now - entry['since'] < ttl)


def avoiding(args, bad):
    """sbatch ARGS with the BAD nodes excluded: their own --exclude/-x merged with the list into one --exclude (as
    module_utils/bad_nodes.py's sbatch_args_avoiding and successor.bash do)."""
    if not bad:
        return list(args)
    out, own, rest = [], [], list(args)
    while rest:
        arg = rest.pop(0)
        if arg.startswith('--exclude='):
            own += [n for n in arg.split('=', 1)[1].split(',') if n]
        elif arg in ('--exclude', '-x') and rest:
            own += [n for n in rest.pop(0).split(',') if n]
        elif arg.startswith('-x') and len(arg) > 2:
            own += [n for n in arg[2:].split(',') if n]
        else:
            out.append(arg)
    return out + ['--exclude=' + ','.join(list(bad) + [n for n in own if n not in bad])]


def submit_env(environ):
    """The environment sbatch runs in: the router job's, less what its own allocation put there (DROP_ENV)."""
    return dict((k, v) for k, v in environ.items() if not DROP_ENV.match(k))


class Slurm(object):
    """The controller's three Slurm commands (one process each, the key in none of them)."""

    def __init__(self, work_dir, umask=0o077, run=subprocess.run, environ=None):
        self.work_dir, self.umask, self._run = work_dir, umask, run
        self.env = submit_env(os.environ if environ is None else environ)
        self.calls = 0

    def _call(self, argv):
        self.calls += 1
        umask = self.umask
        proc = self._run(argv, cwd=self.work_dir, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True, timeout=60, check=False, preexec_fn=lambda: os.umask(umask))
        return proc.returncode, proc.stdout or '', proc.stderr or ''

    def live(self, name):
        """The ids of the user's live jobs named NAME (one squeue), oldest first; None when squeue failed."""
        rc, out, _err = self._call(['squeue', '--noheader', '--me', '--name=' + name, '--format=%i %T'])
        if rc != 0:
            return None
        return [f[0] for f in (line.split() for line in out.splitlines()) if len(f) == 2 and f[1] in LIVE]

    def alive(self, job_id):
        """Whether job JOB_ID still lives (one squeue); None when squeue failed."""
        rc, out, err = self._call(['squeue', '--noheader', '--jobs=' + job_id, '--format=%T'])
        if rc != 0:
            return False if 'Invalid job id' in err else None
        return any(state.strip() in LIVE for state in out.splitlines())

    def submit(self, name, comment, script, args):
        """(job id, None) of an sbatch of SCRIPT as NAME with COMMENT and ARGS, or (None, what sbatch said)."""
        rc, out, err = self._call(['sbatch', '--parsable', '--job-name=' + name, '--comment=' + comment] + list(args) + [script])
        job_id = out.strip().split(';')[0]
        return (job_id, None) if rc == 0 and job_id.isdigit() else (None, (err or out).strip().splitlines()[-1:] or ['rc %d' % rc])

    def cancel(self, job_ids):
        rc, _out, err = self._call(['scancel'] + list(job_ids))
        return None if rc == 0 else (err.strip() or 'rc %d' % rc)


class Scaler(object):
    """The replicas between the deploy's (PLAN's first FLOOR names are the deploy's) and the most, on the load."""

    def __init__(self, opts, policy, plan, slurm, log):
        self.opts, self.policy, self.slurm, self.say = opts, policy, slurm, log
        self.plan = list(plan)           # [(name, comment)] of every replica, in order: 1 .. most
        self.coming = {}                 # name -> [job id, when submitted, when last asked]
        self.leaving = {}                # name -> (url, job id, when it left the router)
        self.failures = 0                # replicas in a row that ended before they served

    def round(self, now, sync, busy):
        """One round: SYNC (the Sync of glm_router.py, its ``current`` workers of this round), BUSY (a replica URL ->
        its running + queued requests, or None when it does not say). The decision made, or None."""
        current = sync.current
        if current is None:
            return None
        files = replica_files(self.opts.replicas_dir)
        serving = sorted(n for n, (url, _job) in files.items() if (current.get(url) or {}).get('is_healthy'))
        self.settle_coming(now, files)
        self.settle_leaving(now, sync, current)
        load = service_load([files[n][0] for n in serving], busy)
        decision, why = self.policy.decide(now, load, len(serving), len(self.coming) + len(self.leaving))
        if decision == UP:
            self.up(now, files, why)
        elif decision == DOWN:
            self.down(now, files, serving, why)
        return decision

    def up(self, now, files, why):
        free = [(n, c) for n, c in self.plan[self.policy.least:] if n not in files and n not in self.coming
                and n not in self.leaving]
        if not free:
            return self.record(now, 'up: no free replica name (%s)' % why)
        name, comment = free[0]
        if self.ended():
            return self.record(now, 'up: %s not submitted, the service ends (teardown, %s)' % (name, self.opts.service_end))
        live = self.slurm.live(name)
        if live is None:
            return self.record(now, 'up: %s not submitted, squeue did not answer (%s)' % (name, why))
        if live:
            self.coming[name] = [live[-1], now, now]
            return self.record(now, 'up: %s, job %s already queued, counted as coming (%s)' % (name, live[-1], why))
        bad = fresh_bad_nodes(self.opts.bad_nodes_file, self.opts.bad_node_ttl) if self.opts.bad_nodes_file else []
        job_id, said = self.slurm.submit(name, comment, self.opts.scale_script, avoiding(self.opts.scale_sbatch_arg, bad))
        if job_id is None:
            self.policy.failed(now, self.failures + 1)
            self.failures += 1
            return self.record(now, 'up: the sbatch of %s failed: %s (%s)' % (name, ' '.join(said), why))
        if self.ended():                 # the teardown wrote the service's end while the sbatch ran: taken back
            self.slurm.cancel([job_id])
            return self.record(now, 'up: %s (job %s) cancelled at once, the service ends (teardown)' % (name, job_id))
        self.coming[name] = [job_id, now, now]
        return self.record(now, 'up: %s submitted as job %s%s (%s)' % (
            name, job_id, ', avoiding ' + ','.join(bad) if bad else '', why))

    def down(self, now, files, serving, why):
        ours = [n for n, _c in self.plan[self.policy.least:] if n in serving]
        if not ours:
            return self.record(now, 'down: no replica above the deploy\'s %d serves (%s)' % (self.policy.least, why))
        name = ours[-1]
        url, job_id = files[name]
        error = self.leave(name)
        if error:
            return self.record(now, 'down: %s could not leave the router (%s)' % (name, error))
        self.leaving[name] = (url, job_id, now)
        return self.record(now, 'down: %s (job %s) leaves the router, then ends (%s)' % (name, job_id or '?', why))

    def settle_coming(self, now, files):
        """A coming replica serves once its address file is there; one whose job ended before is dropped."""
        for name, entry in sorted(self.coming.items()):
            job_id, since, asked = entry
            if name in files:
                del self.coming[name]
                self.failures = 0
                self.record(now, 'up: %s (job %s) joined the router, %d s after it was submitted' % (name, job_id, now - since))
                continue
            if now - asked < COMING_CHECK:
                continue
            entry[2] = now
            if self.slurm.alive(job_id) is False:
                del self.coming[name]
                self.failures += 1
                self.policy.failed(now, self.failures)
                self.record(now, 'up: %s (job %s) ended before it served (its log: %s-%s.out); no new replica for %d s' % (
                    name, job_id, name, job_id, self.policy.hold_until - now))

    def settle_leaving(self, now, sync, current):
        """A leaving replica is cancelled (with its successor) once the router no longer has it and it drained."""
        for name, (url, job_id, since) in sorted(self.leaving.items()):
            if url in current or url in sync.draining:
                self.leave(name)                 # its file out again, should its job have written it back
                continue
            del self.leaving[name]
            ids = [j for j in [job_id, self.successor_of(name, job_id)] if j]
            said = self.slurm.cancel(ids) if ids else 'no job id in its address file'
            self.record(now, 'down: %s drained in %d s; %s' % (
                name, now - since, 'cancelled job %s' % ' and '.join(ids) if said is None else 'not cancelled: %s' % said))

    def leave(self, name):
        """The replica's address file removed (the router drains it at its next round); the error, or None."""
        try:
            os.unlink(os.path.join(self.opts.replicas_dir, name + '.url'))
        except FileNotFoundError:
            pass
        except OSError as error:
            return error
        return None

    def ended(self):
        """Whether the teardown wrote the service's end (the layout's service-end file): no replica is added then."""
        path = getattr(self.opts, 'service_end', None)
        return bool(path) and os.path.exists(path)

    def successor_of(self, name, job_id):
        """The successor job JOB_ID submitted (server_successors_until), from its .NAME-JOBID.successor file."""
        try:
            with open(os.path.join(os.path.dirname(self.opts.scale_script), '.%s-%s.successor' % (name, job_id)),
                      encoding='utf-8') as handle:
                first = handle.readline().strip()
        except OSError:
            return None
        return first if first.isdigit() else None

    def record(self, now, line):
        """A decision or its outcome: the job's log and the scale log."""
        self.say('scale %s' % line)
        if self.opts.scale_log:
            with open(self.opts.scale_log, 'a', encoding='utf-8') as handle:
                handle.write('%d %s %s\n' % (time.time(), time.strftime('%Y-%m-%dT%H:%M:%S'), line))
        return line
