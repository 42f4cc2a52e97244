# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The replicas' autoscaler (server_replicas_max; docs/replicas.md "Replicas that follow the load"): the router job's
launcher (glm_router.py) calls Scaler.refresh and Scaler.round once a round while its job serves the endpoint.
Standard library only.

- **Its settings** (Config): a JSON file the router role writes (``glm_layout.files.scale_config``), read again when
  it changes, so that a deploy that changes them restarts no job.
- **The signal**: with the front door (router_proxy=glm), the teams' requests it let in and that have not ended
  (glm_front.FrontDoor.load: nothing without a team's key counts, not another user's ``/health_generate`` on a
  replica); else the requests running and queued in the serving replicas, each replica's own
  ``sglang:num_running_reqs + sglang:num_queue_reqs`` (its ``/metrics``, no key; glm_router.py's busy_requests, which
  the drain reads too). One HTTP call per serving replica a round; no Slurm call. (The gateway's ``GET /loads``
  aggregate says the same in one call, but only from workers that serve ``/v1/loads``, which it polls every
  ``--load-monitor-interval`` s: the replicas' own gauges are now, and need nothing of the gateway's version.)
- **The decision** (Policy): up when the load per serving replica stayed above the target for ``up_after`` s, down
  when it would have fitted in one replica fewer at half the target for ``down_after`` s; never above the most nor
  below the deploy's replicas; nothing while a replica is coming or leaving (the window starts again once it has
  joined or left: the load per replica is measured with the replicas there are); a cool-down after each decision.
- **Up**: the lowest free name above the deploy's replicas (NAME-k, the deployment's Slurm comment) is looked up
  once (``squeue --name``: a job of that name and comment already queued is adopted as coming, never a second one),
  then submitted with the deploy's own script (the GPU check, the health gate, the successors) and sbatch arguments,
  the nodes of the bad-node list excluded. It counts as coming until its address file appears; while it comes, one
  ``squeue`` a minute asks whether its job still lives; one that ended before it served, or did not serve within
  ``coming_timeout`` (cancelled then), holds the next submission for 2, 4, 8... cool-downs: a failing node or a full
  cluster does not make a loop.
- **Down**: the highest serving replica above the deploy's replicas leaves the router (its address file removed:
  Sync drains it, requests in flight finish), then its job and the successor it submitted are cancelled, one
  ``scancel``, asked again at the next rounds until it is done. A replica of the autoscaler's that started before its
  script or the key last changed (a deploy rotated the key, changed a setting) leaves and ends the same way: the
  deploy rolls its own replicas, not these. A new router job cancels what the last one took out and left (the scale
  log says which).
- Each decision and its reason is a line of the scale log (``EPOCH ISO-TIME WHAT: WHY``), whose last line the status
  playbook shows, and of the router job's log.

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
#: Seconds a replica whose address file appeared still counts as coming while the router has not taken it yet.
JOIN_GRACE = 120.0
#: Seconds of clock difference between the nodes (a job's start, a file's mtime) under which a replica is not stale.
STALE_MARGIN = 2
#: The states of a job that will still serve (squeue's %T): ended, ending or requeued by hand are not among them.
LIVE = ('PENDING', 'CONFIGURING', 'RUNNING', 'SUSPENDED', 'REQUEUED', 'RESIZING')


class Policy(object):
    """The decision over time: ``decide`` is given each round's figures and says UP, DOWN or None, with why."""

    def __init__(self, least, most, target, up_after=60.0, down_after=900.0, cooldown=None):
        if not 0 <= least <= most or most < 1:
            raise ValueError('the replicas must be 0 <= least (%s) <= most (%s), most 1 or more' % (least, most))
        if target <= 0:
            raise ValueError('the target load per replica must be above 0, not %s' % target)
        self.least, self.most, self.target = int(least), int(most), float(target)
        self.up_after, self.down_after = float(up_after), float(down_after)
        self.cooldown = float(up_after if cooldown is None else cooldown)
        self.above_since = None     # when the load per replica went above the target (this streak)
        self.below_since = None     # when the load began to fit in one replica fewer at half the target
        self.last = None            # when the last decision was made
        self.last_decision = None   # and which (UP or DOWN)
        self.hold_until = None      # a replica failed before it served: no submission before then

    def decide(self, now, load, serving, coming, waiting=0, active=False):
        """(UP, DOWN or None, the reason) for this round: LOAD the running + waiting requests of the service (None:
        not known this round), SERVING the replicas that serve, COMING those submitted or leaving, not settled yet,
        WAITING the requests the hold keeps (or that came to it since the last round) while none serves (least 0),
        ACTIVE whether the hold saw work come through since the last round (the gauges miss short requests)."""
        if serving < 1 and self.least == 0:
            return self._wake(now, waiting, coming)
        if serving < 1 or load is None:
            self.above_since = self.below_since = None
            return None, 'no replica serves' if serving < 1 else 'the load is not known this round'
        if coming:
            # the window starts again once the replicas are settled: the load per replica is measured with them
            self.above_since = self.below_since = None
            return None, '%d replica(s) coming or leaving' % coming
        per = float(load) / serving
        self.above_since = (self.above_since if self.above_since is not None else now) if per > self.target else None
        # one fewer at half the target; from one replica to none (least 0): no request at all
        fits = (serving > 1 and load <= self.target * (serving - 1) * 0.5
                or serving == 1 and load == 0 and not waiting and not active)
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
            if serving == 1:
                return self._made(now, DOWN, 'no request for %d s: the service goes to zero' % (now - self.below_since))
            return self._made(now, DOWN, '%d requests would fit in %d replica%s at half the target %g, for %d s' % (
                load, serving - 1, '' if serving == 2 else 's', self.target, now - self.below_since))
        return None, '%.1f requests per replica (target %g), %d serve' % (per, self.target, serving)

    def _wake(self, now, waiting, coming):
        """No replica serves and the floor is zero: the first replica once a request waits (the hold keeps it), one
        decision, not two (a replica coming counts), and not within the cool-down or a failure's hold."""
        self.above_since = self.below_since = None
        if not waiting:
            return None, 'no replica serves, and no request waits (scaled to zero)'
        if coming:
            return None, '%d request(s) wait for the replica that is coming' % waiting
        # the cool-down keeps decisions apart while replicas serve; the way back from zero pays none (a request that
        # comes a minute after the service went to zero would wait the cool-down on top of the cold start)
        if self.last is not None and now - self.last < self.cooldown and self.last_decision != DOWN:
            return None, '%d request(s) wait; cooling down (%d s of %d since the last decision)' % (
                waiting, now - self.last, self.cooldown)
        if self.hold_until is not None and now < self.hold_until:
            return None, 'a replica failed before it served: no new one for %d s more' % (self.hold_until - now)
        return self._made(now, UP, '%d request(s) came while no replica serves (scaled to zero)' % waiting)

    def reconfigure(self, cfg):
        """New bounds, target and windows (the settings changed), the current streaks and cool-down kept."""
        if not 0 <= cfg.least <= cfg.most or cfg.most < 1 or cfg.target <= 0:
            return
        self.least, self.most, self.target = int(cfg.least), int(cfg.most), float(cfg.target)
        self.up_after, self.down_after, self.cooldown = float(cfg.up_after), float(cfg.down_after), float(cfg.cooldown)

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
        self.last, self.last_decision, self.above_since, self.below_since = now, decision, None, None
        return decision, reason


def service_load(urls, busy):
    """The requests running and queued in the replicas at URLS (BUSY(url): a replica's, or None when it does not
    say), or None when none of them says."""
    said = [n for n in (busy(url) for url in urls) if n is not None]
    return sum(said) if said else None


def replica_files(folder):
    """{replica name: (url, job id or '', the job's start epoch or None)} from the replicas' address files (NAME.url:
    the URL, the job's id, GLM_JOB_STARTED; serve_ready.bash's glm_await_ready)."""
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
            start = lines[2].strip() if len(lines) > 2 else ''
            found[name[:-len('.url')]] = (lines[0].strip().rstrip('/'), (lines[1].strip() if len(lines) > 1 else ''),
                                          int(start) if start.isdigit() else None)
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

    def live(self, wanted):
        """{name: the ids of the user's live jobs of that name with its Slurm comment, oldest first} for WANTED
        ({name: comment}: the deployment's; another deployment may have a job of that name), in one squeue; None
        when squeue failed."""
        rc, out, _err = self._call(['squeue', '--noheader', '--me', '--name=' + ','.join(sorted(wanted)), '--sort=i',
                                    '--format=%i|%T|%j|%k'])
        if rc != 0:
            return None
        rows = [line.strip().split('|', 3) for line in out.splitlines()]
        return dict((name, [r[0] for r in rows if len(r) == 4 and r[1] in LIVE and r[2] == name and r[3] == comment])
                    for name, comment in wanted.items())

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
        """None once the jobs are cancelled (or were gone already), else what scancel said."""
        rc, _out, err = self._call(['scancel'] + list(job_ids))
        return None if rc == 0 or 'Invalid job id' in err else (err.strip() or 'rc %d' % rc)


class Config(object):
    """The autoscaler's settings: the JSON the router role writes (``glm_layout.files.scale_config``), read again
    whenever it changes, so that a deploy that changes them changes the running router's autoscaler without
    restarting the router job (its script names only the file)."""

    FIELDS = {'least': int, 'most': int, 'target': float, 'up_after': float, 'down_after': float, 'cooldown': float,
              'script': str, 'sbatch_args': list, 'bad_nodes_file': str, 'bad_node_ttl': float, 'umask': str,
              'replicas': list, 'log': str, 'service_end': str, 'coming_timeout': float}

    #: Settings a file of an earlier release may lack: the download job's [name, comment], which a replica of the
    #: autoscaler's waits for while it is live (scale to zero: no replica of the deploy's waits for it), and the
    #: hold's bound, bursting ({'args': the burst replicas' sbatch arguments, 'from': the replicas above this number
    #: burst, 'hold': seconds without a burst submission after a preemption}).
    OPTIONAL = {'download': (list, []), 'hold': (float, 0.0), 'burst': (dict, {})}

    def __init__(self, data, replicas_dir, key_file):
        missing = [k for k in self.FIELDS if k not in data]
        if missing:
            raise ValueError('the autoscaler\'s settings lack %s' % ', '.join(missing))
        for key, kind in self.FIELDS.items():
            setattr(self, key, kind(data[key]))
        for key, (kind, default) in self.OPTIONAL.items():
            setattr(self, key, kind(data.get(key, default)))
        self.replicas = [tuple(r) for r in self.replicas]
        if any(len(r) != 2 for r in self.replicas) or len(self.replicas) != self.most or not self.script:
            raise ValueError('the autoscaler\'s settings need the script and a [name, comment] per replica, 1 .. most')
        self.replicas_dir, self.key_file = replicas_dir, key_file

    @classmethod
    def read(cls, path, replicas_dir, key_file):
        """(Config, the file's mtime); ValueError when it cannot be read or is not right."""
        try:
            with open(path, encoding='utf-8') as handle:
                mtime = os.fstat(handle.fileno()).st_mtime
                data = json.load(handle)
        except (OSError, ValueError) as error:
            raise ValueError('the autoscaler\'s settings %s: %s' % (path, error))
        return cls(data, replicas_dir, key_file), mtime


LEFT = re.compile(r'^down: (\S+) \(job (\d+)\) leaves the router')
SETTLED = re.compile(r'^down: (\S+) (drained|could not leave)')


class Scaler(object):
    """The replicas between the deploy's (the plan's first ``least`` names) and the most, on the load."""

    def __init__(self, cfg, policy, slurm, log, path=None, mtime=None):
        self.cfg, self.policy, self.slurm, self.say = cfg, policy, slurm, log
        self.path, self.mtime = path, mtime   # the settings file, and its mtime when read
        self.coming = {}                 # name -> [job id, when submitted, when last asked]
        self.leaving = {}                # name -> [url, job id, when it left the router, cancel attempts]
        self.failures = 0                # replicas in a row that ended before they served
        self.joined = {}                 # name -> when its address file appeared (it joins the router after)
        self.recovered = False
        self.at_zero = False             # the last round found the service at zero replicas (least 0)
        self.burst_until = 0.0           # no burst replica submitted before then (a preemption's hold)
        self.seen = {}                   # name -> the job id its address file named at the last round

    @property
    def plan(self):
        return self.cfg.replicas

    def refresh(self):
        """The settings read again when their file changed (a deploy changed them): the policy's bounds, target and
        windows, the replicas' plan, script and sbatch arguments. A file that went or is wrong keeps the last ones."""
        if not self.path:
            return
        try:
            if os.stat(self.path).st_mtime == self.mtime:
                return
            cfg, mtime = Config.read(self.path, self.cfg.replicas_dir, self.cfg.key_file)
        except (OSError, ValueError) as error:
            self.mtime = None if isinstance(error, OSError) else self.mtime
            return
        self.cfg, self.mtime = cfg, mtime
        self.policy.reconfigure(cfg)
        self.slurm.work_dir, self.slurm.umask = os.path.dirname(cfg.script), int(cfg.umask, 8)
        self.say('scale settings read again: %d to %d replicas, %g requests per replica' % (cfg.least, cfg.most, cfg.target))

    def round(self, now, sync, busy, waiting=0, active=False, load=None):
        """One round: SYNC (the Sync of glm_router.py, its ``current`` workers of this round), BUSY (a replica URL ->
        its running + queued requests, or None when it does not say), WAITING (the requests the hold keeps while no
        replica serves: glm_hold.Hold.take_demand), ACTIVE (the hold saw work since the last round:
        Hold.take_traffic), LOAD (the service's running + queued requests as the front door counts them, in place of
        BUSY's sum; glm_front.FrontDoor.load). The decision made, or None."""
        current = sync.current
        if current is None:
            return None
        files = replica_files(self.cfg.replicas_dir)
        if not self.recovered:
            self.recovered = True
            self.recover(now, files)
        serving = sorted(n for n, (url, _job, _start) in files.items() if (current.get(url) or {}).get('is_healthy'))
        self.settle_coming(now, files)
        self.settle_leaving(now, sync, current)
        if load is None or not serving:
            load = service_load([files[n][0] for n in serving], busy)
        self.retire_stale(now, files, serving, load)
        # a replica whose file appeared but which the router does not list as healthy yet is still coming (for
        # JOIN_GRACE s from when its file was first seen, ours or not: after a router restart too; one whose node died
        # with its file there must not hold every decision)
        self.track(now, files)
        joining = [n for n, t in self.joined.items() if n not in serving and now - t < JOIN_GRACE]
        decision, why = self.policy.decide(now, load, len(serving), len(self.coming) + len(self.leaving) + len(joining),
                                           waiting, active)
        if decision == UP:
            self.up(now, files, why, serving)
        elif decision == DOWN:
            self.down(now, files, serving, why)
        self.note_zero(now, files)
        return decision

    def track(self, now, files):
        """The replicas' address files this round: when each appeared (joined), the job each names (seen); one that
        went may have gone for a preemption (preempted)."""
        for name in files:
            self.joined.setdefault(name, now)
        for name in [n for n in self.joined if n not in files]:
            del self.joined[name]
            self.preempted(now, name, self.seen.get(name))
        self.seen = dict((n, f[1]) for n, f in files.items())

    def note_zero(self, now, files):
        """A 'zero:' line in the scale log whenever the service comes to zero replicas (least 0), for whatever
        reason: the last one scaled away, ended, or failed before it served (the status says "scaled to zero since")."""
        zero = self.policy.least == 0 and not files and not self.coming and not self.leaving
        if zero and not self.at_zero:
            self.record(now, 'zero: no replica serves; the next request starts one (it waits at most %d s)' % self.cfg.hold)
        self.at_zero = zero

    def up(self, now, files, why, serving=()):
        free = [(n, c) for n, c in self.plan[self.policy.least:] if n not in files and n not in self.coming
                and n not in self.leaving]
        if not free:
            free = self.left_behind(now, files, serving)
        if not free:
            return self.record(now, 'up: no free replica name (%s)' % why)
        name, comment = free[0]
        burst = self.burst_args(name)
        # (a preemption holds burst replicas while others serve; at zero a request's wake is never refused)
        if self.ended() or burst and now < self.burst_until and serving:
            held = 'the service ends (teardown, %s)' % self.cfg.service_end if self.ended() else self.burst_wait(now, why)
            return self.record(now, 'up: %s not submitted, %s' % (name, held))
        # one squeue for a job of that name already queued, and for the deploy's download, which a new replica waits
        # for while it is live (scale to zero: no replica of the deploy's waits for it)
        download = dict([self.cfg.download]) if len(self.cfg.download) == 2 else {}
        found = self.slurm.live(dict(download, **{name: comment}))
        if found is None:
            return self.record(now, 'up: %s not submitted, squeue did not answer (%s)' % (name, why))
        live = found[name]
        if live:
            self.coming[name] = [live[-1], now, now]
            return self.record(now, 'up: %s, job %s already queued, counted as coming (%s)' % (name, live[-1], why))
        bad = fresh_bad_nodes(self.cfg.bad_nodes_file, self.cfg.bad_node_ttl) if self.cfg.bad_nodes_file else []
        waits = [j for n in download for j in found.get(n, [])][-1:]
        args = avoiding(self.cfg.sbatch_args, bad) + burst + ['--dependency=afterok:' + j for j in waits]
        job_id, said = self.slurm.submit(name, comment, self.cfg.script, args)
        if job_id is None:
            self.failures += 1
            self.policy.failed(now, self.failures)
            return self.record(now, 'up: the sbatch of %s failed: %s (%s)' % (name, ' '.join(said), why))
        if self.ended():                 # the teardown wrote the service's end while the sbatch ran: taken back
            self.slurm.cancel([job_id])
            return self.record(now, 'up: %s (job %s) cancelled at once, the service ends (teardown)' % (name, job_id))
        self.coming[name] = [job_id, now, now]
        return self.record(now, 'up: %s submitted as job %s%s%s%s (%s)' % (
            name, job_id, ' to burst (%s)' % ' '.join(burst) if burst else '',
            ', avoiding ' + ','.join(bad) if bad else '',
            ', after the download (job %s)' % waits[0] if waits else '', why))

    def burst_args(self, name):
        """The sbatch arguments that send replica NAME to the preemptible partition or QOS (bursting: the replicas
        numbered above the burst's ``from``), with --no-requeue: a preempted burst replica ends (PreemptMode=REQUEUE
        cancels a job that may not be requeued) and the controller decides when another one comes; else []."""
        burst = self.cfg.burst
        names = [n for n, _c in self.plan]
        if not burst.get('args') or name not in names or names.index(name) < int(burst.get('from', 0)):
            return []
        return list(burst['args']) + ['--no-requeue']

    @property
    def burst_hold(self):
        """Seconds without a burst submission after a preemption (server_burst_hold)."""
        return float(self.cfg.burst.get('hold', 600))

    def burst_wait(self, now, why):
        return 'a burst replica was preempted: none before %s (server_burst_hold; %s)' % (self.burst_clock(now), why)

    def burst_clock(self, now):
        """The end of the burst's hold by the wall clock (NOW and burst_until are the caller's monotonic seconds)."""
        return time.strftime('%H:%M:%S', time.localtime(time.time() + self.burst_until - now))

    def preempted(self, now, name, job_id):
        """Replica NAME's address file, which named JOB_ID, went; when that job said Slurm preempts it (serve.sbatch,
        on the preemption's USR1, before it leaves the router: .NAME-JOB_ID.preempted in the work dir), no burst
        replica is submitted for the burst's hold while others serve, and the successor it may have submitted is
        cancelled: the controller does not fight the preemption. No Slurm call but that scancel."""
        if not job_id:
            return False
        try:
            os.unlink(os.path.join(os.path.dirname(self.cfg.script), '.%s-%s.preempted' % (name, job_id)))
        except OSError:
            return False
        self.burst_until = now + self.burst_hold
        successor = self.successor_of(name, job_id)
        said = self.slurm.cancel([successor]) if successor else None
        self.record(now, 'preempted: %s (job %s) was preempted by Slurm and left the router, draining its requests; no '
                         'other burst replica before %s while others serve (server_burst_hold)%s' % (
                             name, job_id, self.burst_clock(now), '' if not successor else '; its successor job %s %s' % (
                                 successor, 'cancelled' if said is None else 'not cancelled: %s' % said)))
        return True

    def left_behind(self, now, files, serving):
        """[(name, comment)] of the first replica of the autoscaler's whose address file is there but which has not
        served for JOIN_GRACE s and whose job has ended (its node failed before the job could remove the file): the
        file removed, the name free again (one squeue), else []."""
        for name, comment in self.plan[self.policy.least:]:
            if name not in files or name in serving or name in self.leaving or now - self.joined.get(name, now) < JOIN_GRACE:
                continue
            job_id = files[name][1]
            if job_id and self.slurm.alive(job_id) is False and self.leave(name) is None:
                self.record(now, 'up: %s (job %s) has ended with its address file left: the file removed' % (name, job_id))
                return [(name, comment)]
        return []

    def down(self, now, files, serving, why):
        ours = [n for n, _c in self.plan[self.policy.least:] if n in serving]
        if not ours:
            return self.record(now, 'down: no replica above the deploy\'s %d serves (%s)' % (self.policy.least, why))
        return self.take_out(now, ours[-1], files, why)

    def take_out(self, now, name, files, why):
        """NAME out of the router (its address file removed: the router drains it); cancelled once drained."""
        url, job_id, _start = files[name]
        error = self.leave(name)
        if error:
            return self.record(now, 'down: %s could not leave the router (%s)' % (name, error))
        self.leaving[name] = [url, job_id, now, 0]
        return self.record(now, 'down: %s (job %s) leaves the router, then ends (%s)' % (name, job_id or '?', why))

    def retire_stale(self, now, files, serving=(), load=None):
        """A replica of the autoscaler's that started before its script or the key last changed (a deploy rotated the
        key or changed a setting: the deploy rolls its own replicas, not these) leaves and ends; the load brings a
        new one if it is needed. One at a time, and not the last one serving while requests run (least 0: every
        replica is the autoscaler's; it leaves once the service is idle, or once another one serves)."""
        changed = max([0.0] + [os.stat(p).st_mtime for p in (self.cfg.script, self.cfg.key_file) if p and os.path.exists(p)])
        if any(entry for entry in self.leaving.values()):
            return
        staying = [n for n in serving if n not in self.leaving]
        for name, _comment in self.plan[self.policy.least:]:
            start = files.get(name, (None, None, None))[2]
            if start is None or name in self.leaving or start + STALE_MARGIN >= changed:
                continue
            if name in staying and len(staying) == 1 and load:
                continue
            self.take_out(now, name, files, 'it started before its script or the key last changed, %s' %
                          time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(changed)))
            return

    def settle_coming(self, now, files):
        """A coming replica serves once its address file is there; one whose job ended before, or that did not serve
        within coming_timeout (pending for want of a node, or stuck loading), is dropped."""
        for name, entry in sorted(self.coming.items()):
            job_id, since, asked = entry
            if name in files:
                del self.coming[name]
                self.joined[name] = now
                self.failures = 0
                self.record(now, 'up: %s (job %s) joined the router, %d s after it was submitted' % (name, job_id, now - since))
                continue
            if now - since >= self.cfg.coming_timeout:
                del self.coming[name]
                said = self.slurm.cancel([job_id])
                self.failures += 1
                self.policy.failed(now, self.failures)
                self.record(now, 'up: %s (job %s) did not serve within %d s: %s; no new replica for %d s' % (
                    name, job_id, self.cfg.coming_timeout, 'cancelled' if said is None else 'not cancelled: %s' % said,
                    self.policy.hold_until - now))
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
        """A leaving replica is cancelled (with its successor) once the router no longer has it and it drained; a
        cancel that fails is asked again at the next rounds (said at the first and every twelfth)."""
        for name, entry in sorted(self.leaving.items()):
            url, job_id, since, attempts = entry
            if url in current or url in sync.draining:
                self.leave(name)                 # its file out again, should its job have written it back
                continue
            ids = [j for j in [job_id, self.successor_of(name, job_id)] if j]
            entry[3] = attempts + 1
            said = self.slurm.cancel(ids) if ids else None
            if said is None:
                del self.leaving[name]
                self.record(now, 'down: %s drained in %d s; %s' % (
                    name, now - since, 'cancelled job %s' % ' and '.join(ids) if ids else 'no job id in its address file'))
            elif attempts % 12 == 0:
                self.record(now, 'down: %s not cancelled yet (%s); asked again each round' % (name, said))

    def recover(self, now, files):
        """Replicas an earlier router job's autoscaler took out of the router and had not cancelled when that job
        ended (a handover, a restart): cancelled now, unless they serve again (the scale log says which). The hold of
        the last preemption it recorded goes on."""
        left = {}
        try:
            with open(self.cfg.log, encoding='utf-8') as handle:
                for line in handle:
                    text = line.rstrip('\n').split(' ', 2)[-1]
                    match = LEFT.match(text)
                    if match:
                        left[match.group(1)] = match.group(2)
                    match = SETTLED.match(text)
                    if match:
                        left.pop(match.group(1), None)
                    if text.startswith('preempted: ') and line.split(' ', 1)[0].isdigit():
                        self.burst_until = now + int(line.split(' ', 1)[0]) + self.burst_hold - time.time()
        except OSError:
            return
        for name, job_id in sorted(left.items()):
            if name in files:
                continue
            ids = [j for j in [job_id, self.successor_of(name, job_id)] if j]
            said = self.slurm.cancel(ids)
            self.record(now, 'down: %s drained (it left the router under an earlier router job); %s' % (
                name, 'cancelled job %s' % ' and '.join(ids) if said is None else 'not cancelled: %s' % said))

    def leave(self, name):
        """The replica's address file removed (the router drains it at its next round); the error, or None."""
        try:
            os.unlink(os.path.join(self.cfg.replicas_dir, name + '.url'))
        except FileNotFoundError:
            pass
        except OSError as error:
            return error
        return None

    def ended(self):
        """Whether the teardown wrote the service's end (the layout's service-end file): no replica is added then."""
        return bool(self.cfg.service_end) and os.path.exists(self.cfg.service_end)

    def successor_of(self, name, job_id):
        """The successor job JOB_ID submitted (server_successors_until), from its .NAME-JOBID.successor file."""
        try:
            with open(os.path.join(os.path.dirname(self.cfg.script), '.%s-%s.successor' % (name, job_id)),
                      encoding='utf-8') as handle:
                first = handle.readline().strip()
        except OSError:
            return None
        return first if first.isdigit() else None

    def record(self, now, line):
        """A decision or its outcome: the job's log and the scale log."""
        self.say('scale %s' % line)
        if self.cfg.log:
            with open(self.cfg.log, 'a', encoding='utf-8') as handle:
                handle.write('%d %s %s\n' % (time.time(), time.strftime('%Y-%m-%dT%H:%M:%S'), line))
        return line
