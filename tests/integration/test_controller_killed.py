# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The controller killed (issue 26's "done when"), on the local cluster over real SSH, with the REAL router (smg and
LiteLLM's proxy, from the wheels the router role installs), the autoscaler on (server_replicas=1,
server_replicas_max=2) and the SGLang stand-ins, under tests/tooling/loadgen.py's load from the login node.

- The launcher (the controller: the gateway's parent and the autoscaler) killed with SIGKILL, as the kernel's OOM
  killer would, while requests run: its gateway and proxy end with it (PR_SET_PDEATHSIG: no orphan keeps the port),
  the router job starts it again (router.sbatch's loop, router_restarts), which takes the same port and the replica
  from its address file; the router job and the replica job are the same, nothing is submitted, the scale log says
  "restart:". The requests that fail while it comes back are counted, with the gap.
- The whole router job killed (scancel --signal=KILL: Slurm's SIGKILL to every process of the job, a node's loss
  for the endpoint): the replica runs on; the next deploy submits a router job only, the replica is taken as it is.

Marked continuity (minutes: `make continuity`, not make test).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import time

import pytest

from deploy_helpers import RouterDeployment, recap, ssh

pytestmark = pytest.mark.continuity

WORK = 'glm-it-killed'
DOWNLOAD, SERVE = 'it-k-download', 'it-k-serve'
ROUTER = SERVE + '-router'
LOAD_SECONDS = 60
KILL_AT = 15


def deployment(tmp_path):
    return RouterDeployment(tmp_path, WORK, DOWNLOAD, SERVE, server_replicas=1, server_replicas_max=2,
                            server_scale_target=50, server_scale_up_after=10, server_scale_down_after='20s',
                            server_scale_cooldown=10, router_drain_timeout=30)


def ours():
    """(the launcher's pid or None, its children's pids, the pids of every gateway on the test bed): the launcher is
    the oldest glm_router.py of this deployment's work dir, the gateway a fork of it that smg retitles "smg::router",
    the proxy a second child (the test bed shares one pid namespace; no other deployment runs in make continuity)."""
    out = ssh("l=$(pgrep -o -f '%s/[g]lm_router.py'); echo \"$l\"; [ -z \"$l\" ] || pgrep -P \"$l\" | tr '\\n' ' '; echo; "
              "pgrep -f '^[s]mg::router' | tr '\\n' ' '; echo" % WORK, check=False)
    lines = (out.split('\n') + ['', '', ''])[:3]
    return (int(lines[0]) if lines[0].strip() else None, sorted(int(p) for p in lines[1].split()),
            sorted(int(p) for p in lines[2].split()))


def launcher_pid():
    return ours()[0]


def router_log():
    return ssh('grep -ah glm.serve ~/%s/%s-*.out || true' % (WORK, ROUTER))


def test_the_controller_killed_comes_back_and_the_service_with_it(tmp_path):
    with deployment(tmp_path) as dep:
        proc = dep.deploy(timeout=900)
        assert proc.returncode == 0, proc.stdout[-6000:]
        before = dep.jobs()
        assert set(before) == {SERVE, ROUTER}, before
        launcher, children, gateways = ours()
        assert launcher and len(children) == 2 and len(gateways) == 1 and gateways[0] in children, ours()

        # 1. the launcher killed (SIGKILL) under load: the job starts it again
        load = dep.load(LOAD_SECONDS)
        time.sleep(KILL_AT)
        killed_pid = launcher_pid()
        killed_at = time.time()
        ssh('kill -KILL %d' % killed_pid)
        deadline = time.monotonic() + 120
        while 'starting it again (restart 1 of 3)' not in router_log() or 'restart: the controller started again' \
                not in ssh('cat ~/%s/scale.log 2> /dev/null || true' % WORK):
            assert time.monotonic() < deadline, router_log()[-3000:]
            time.sleep(1)
        out, err = load.communicate(timeout=LOAD_SECONDS + 120)
        summary = json.loads(out.strip().splitlines()[-1])
        rows = [json.loads(line) for line in ssh('cat %s/it-load.jsonl' % dep.work).splitlines()]
        failed = [r for r in rows if r['outcome'] != '200']
        # the outage: from the kill to the last request that failed; back: the first answered request sent after it
        last_failed = max([r['at'] for r in failed] or [killed_at])
        after = [r for r in rows if r['at'] > last_failed and r['outcome'] == '200']
        back_at = min(r['at'] for r in after) - killed_at if after else None
        now = dep.jobs()
        assert now[SERVE][0] == before[SERVE][0] and now[ROUTER][0] == before[ROUTER][0], (before, now)
        assert now[ROUTER][1] == 'RUNNING', now
        assert launcher_pid() != killed_pid
        launcher, children, gateways = ours()       # no orphan of the killed launcher beside the new ones
        assert len(children) == 2 and len(gateways) == 1 and gateways[0] in children, ours()
        log = router_log()
        assert 'the launcher was killed (signal 9), not by this job\'s end' in log, log[-3000:]
        scale = ssh('cat ~/%s/scale.log' % WORK)
        assert 'up:' not in scale, scale            # nothing submitted for it
        assert after and back_at is not None and back_at < 30, (back_at, summary)
        assert all(killed_at - 3 < r['at'] < killed_at + back_at for r in failed), failed[:5]   # only around the kill
        print('\nCONTROLLER KILLED (SIGKILL to the router job\'s launcher at %d s of %d s of load, 5 requests a second '
              'of 2 s): the job started it again; requests failed from %.1f s to %.1f s after the kill, answered again from '
              '%.1f s; %d requests, outcomes %s (%d failed: %s); the router job %s and replica job %s the same, nothing '
              'submitted.' % (
                  KILL_AT, LOAD_SECONDS, min([r['at'] - killed_at for r in failed] or [0]), last_failed - killed_at,
                  back_at, summary['sent'], summary['outcomes'], len(failed), sorted(set(r['outcome'] for r in failed)),
                  now[ROUTER][0], now[SERVE][0]))
        print('  the router job\'s log:\n    ' + '\n    '.join(router_log().splitlines()[-14:]))

        # 2. the whole router job killed by Slurm: the replica runs on, the next deploy brings the router back
        ssh('scancel --signal=KILL %s' % now[ROUTER][0])
        deadline = time.monotonic() + 60
        while ROUTER in dep.jobs() and dep.jobs()[ROUTER][1] != 'COMPLETING' or ours() != (None, [], []):
            assert time.monotonic() < deadline, (dep.jobs(), ours())
            time.sleep(1)
        assert dep.jobs()[SERVE] == now[SERVE], dep.jobs()
        redeploy = dep.deploy(timeout=600)
        assert redeploy.returncode == 0, redeploy.stdout[-6000:]
        again = dep.jobs()
        assert again[SERVE][0] == before[SERVE][0] and again[ROUTER][0] != before[ROUTER][0], (before, again)
        load = dep.load(10)
        out, err = load.communicate(timeout=120)
        summary = json.loads(out.strip().splitlines()[-1])
        assert summary['failed'] == 0 and set(summary['outcomes']) == {'200'}, (summary, err[-2000:])
        idle = dep.deploy(timeout=600)
        assert idle.returncode == 0 and recap(idle) == (0, 0), idle.stdout[-4000:]
        print('ROUTER JOB KILLED (scancel --signal=KILL): replica job %s ran on; the next deploy submitted router job %s '
              'only; %d requests through it, all 200; a deploy after it changed nothing.' % (
                  again[SERVE][0], again[ROUTER][0], summary['sent']))
