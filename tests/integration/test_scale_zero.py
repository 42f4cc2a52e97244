# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Scale to zero and back (server_replicas=0, server_replicas_max=2; issue 26, slice 2), on the local cluster over real
SSH, with the REAL router (smg, from the wheels the router role installs) behind the hold (roles/router/files/
glm_hold.py), and the SGLang stand-ins (requests of GLM_STANDIN_SGLANG_DECODE s, counted in their /metrics).

- The deploy submits the download (held behind the hf stand-in's gate until the first replica is submitted) and the
  router job, no replica; GET /v1/models
  answers 200 with the key, 401 without (LiteLLM's proxy, the default, behind the hold: the hold passes the listing
  on; without the proxy the hold answers it itself, tests/doubles_tests/test_router_launcher_hold.py); a POST without
  a key is refused (401) and wakes nothing; a second deploy changes nothing; the status playbook says "scaled to zero
  since", and neither it nor the listing wakes the service.
- A load step while the download still runs (tests/tooling/loadgen.py on the login node: 5 requests a second of 2 s
  for LOAD_SECONDS, then none): the first request wakes the controller, which submits replica 1 at once, after the
  download (--dependency=afterok: the download job found in the same squeue); the requests held meanwhile go on when
  it serves (each waited less than the bound); the load above the target brings replica 2; when it ends, replica 2
  leaves, then replica 1 (no request for server_scale_down_after): 0 -> 1 -> 2 -> 1 -> 0, each decision with its
  reason in the scale log.
- No request fails; the held ones are counted, with their longest wait. The replicas' GPU-seconds (sacct: elapsed x
  GPUs of each replica job) against two replicas held through the same window are printed.

Marked continuity (minutes: `make continuity`, not make test).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import shutil
import subprocess
import time

import pytest

from deploy_helpers import (REPO, SSH, RouterDeployment, chown_login, recap, run_playbook, scale_log, ssh,
                            wait_for_scale_line)

pytestmark = pytest.mark.continuity

WORK = 'glm-it-zero'
DOWNLOAD, SERVE = 'it-z-download', 'it-z-serve'
ROUTER = SERVE + '-router'
LOAD_SECONDS = 90
HOLD = 120
#: a request that waited longer than this was held (the stand-in's own requests take 2 s)
HELD_SECONDS = 4.0
#: GPUs per replica (server_gpus' default) where Slurm's accounting does not count gres/gpu (the test bed's
#: AccountingStorageTRES has no gres/gpu; a real cluster's usually has)
GPUS = 8


def deployment(tmp_path):
    return RouterDeployment(tmp_path, WORK, DOWNLOAD, SERVE, server_replicas=0, server_replicas_max=2, server_scale_target=3,
                            server_scale_up_after=10, server_scale_down_after='20s', server_scale_cooldown=10,
                            server_scale_hold=HOLD, router_drain_timeout=30,
                            download_env={'GLM_STANDIN_HF_GATE': 'go', 'GLM_STANDIN_HF_SHARDS': '2'})


def models(base, key_header=True, method='GET'):
    """(status, body) of GET BASE/models (or a POST of a chat) from the login node, with the deployment's key or none."""
    script = ('import json,sys,urllib.request,urllib.error\n'
              'req=urllib.request.Request(sys.argv[1]+"/models")\n' if method == 'GET' else
              'import json,sys,urllib.request,urllib.error\n'
              'req=urllib.request.Request(sys.argv[1]+"/chat/completions",data=b\'{"model":"glm-5.3-flash",'
              '"messages":[{"role":"user","content":"hi"}]}\',headers={"Content-Type":"application/json"})\n')
    script += ('if sys.argv[2]=="1": req.add_header("Authorization","Bearer "+open(sys.argv[3]).read().strip())\n'
               'try:\n r=urllib.request.urlopen(req,timeout=20); print(r.status, r.read().decode())\n'
               'except urllib.error.HTTPError as e: print(e.code, e.read().decode())\n')
    out = subprocess.run(SSH + ['python3 - %s %s ~/%s/api-key' % (base, '1' if key_header else '0', WORK)], input=script,
                         stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout.strip()
    status, _sep, body = out.partition(' ')
    return int(status), body


def gpu_seconds(job_ids):
    """{job name: [(job id, elapsed s, GPUs)]} of the jobs JOB_IDS in Slurm's accounting (one sacct)."""
    out = ssh('sacct -X -n -P -j %s -o JobName,JobID,ElapsedRaw,AllocTRES' % ','.join(job_ids))
    found = {}
    for line in out.splitlines():
        name, job_id, elapsed, tres = (line.split('|') + ['', '', '', ''])[:4]
        gpus = [int(t.split('=')[1]) for t in tres.split(',') if t.startswith('gres/gpu=')]
        found.setdefault(name, []).append((job_id, int(elapsed or 0), gpus[0] if gpus else GPUS))
    return found


def test_zero_to_two_and_back_to_zero_under_a_load_step(tmp_path):
    with deployment(tmp_path) as dep:
        proc = dep.deploy(timeout=900)
        assert proc.returncode == 0, proc.stdout[-6000:]
        assert 'none while no request comes (scale to zero)' in proc.stdout, proc.stdout[-3000:]
        assert SERVE not in dep.jobs() and ROUTER in dep.jobs(), dep.jobs()
        again = dep.deploy(timeout=600)
        assert again.returncode == 0 and recap(again) == (0, 0), again.stdout[-4000:]
        assert SERVE not in dep.jobs(), dep.jobs()
        _endpoint, base, node = dep.target()
        status, body = models(base)
        assert status == 200 and json.loads(body)['data'][0]['id'] == 'glm-5.3-flash', (status, body)
        assert models(base, key_header=False)[0] == 401
        assert models(base, key_header=False, method='POST')[0] == 401      # no key: refused, nothing woken
        assert wait_for_scale_line(WORK, ['zero: no replica serves'], 30, router_name=ROUTER)
        shown = run_playbook('status.yml', dep.variables(), str(tmp_path))
        assert shown.returncode == 0 and 'scaled to zero since' in shown.stdout, shown.stdout[-3000:]
        time.sleep(5)
        assert SERVE not in dep.jobs(), 'a listing, a request without a key or the status woke the service'
        assert DOWNLOAD in dep.jobs(), 'the download ended before the load: the afterok path is not tried (slow it more)'

        loadgen = os.path.join(dep.work, 'it-loadgen.py')
        shutil.copy(os.path.join(REPO, 'tests', 'tooling', 'loadgen.py'), loadgen)
        chown_login(loadgen)
        started = time.monotonic()
        load = subprocess.Popen(SSH + ['python3 %s --url %s --key-file ~/%s/api-key --rate 5 --duration %d --streamed 0.25 '
                                       '--timeout %d --concurrency 400 --allow-host %s --log %s/it-load.jsonl' % (
                                           loadgen, base, WORK, LOAD_SECONDS, HOLD + 30, node, dep.work)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                universal_newlines=True)
        dep.loads.append(load)
        i_up1, up1 = wait_for_scale_line(WORK, ['up: %s submitted as job' % SERVE, 'after the download (job',
                                                'came while no replica serves'], 30, router_name=ROUTER)
        gate = os.path.join(dep.work, 'GLM-5.3-Flash', '.cache', 'huggingface', 'go')     # the download goes on now
        with open(gate, 'w', encoding='utf-8'):
            pass
        chown_login(gate)
        up1_at = time.monotonic() - started
        i_join1, _line = wait_for_scale_line(WORK, ['up: %s (job' % SERVE, 'joined the router'], HOLD, i_up1, ROUTER)
        serving1_at = time.monotonic() - started
        i_up2, up2 = wait_for_scale_line(WORK, ['up: %s-2 submitted as job' % SERVE, 'above the target 3'], 60, i_join1, ROUTER)
        i_join2, _line = wait_for_scale_line(WORK, ['up: %s-2 (job' % SERVE, 'joined the router'], 120, i_up2, ROUTER)
        serving2_at = time.monotonic() - started
        out, err = load.communicate(timeout=LOAD_SECONDS + HOLD + 60)
        ended_at = time.monotonic() - started
        summary = json.loads(out.strip().splitlines()[-1])
        i_down2, down2 = wait_for_scale_line(WORK, ['down: %s-2 (job' % SERVE, 'leaves the router'], 120, i_join2, ROUTER)
        i_down1, down1 = wait_for_scale_line(WORK, ['down: %s (job' % SERVE, 'the service goes to zero'], 120, i_down2, ROUTER)
        i_zero, _line = wait_for_scale_line(WORK, ['zero: no replica serves'], 120, i_down1, ROUTER)
        zero_at = time.monotonic() - started
        time.sleep(3)
        assert set(dep.jobs()) == {ROUTER}, dep.jobs()
        assert summary['failed'] == 0 and set(summary['outcomes']) == {'200'}, (summary, err[-2000:])
        rows = [json.loads(line) for line in ssh('cat %s/it-load.jsonl' % dep.work).splitlines()]
        held = [r for r in rows if r['seconds'] > HELD_SECONDS]
        assert held and max(r['seconds'] for r in held) < HOLD, held[-3:]
        first_answer = min(r['at'] + r['seconds'] for r in rows) - min(r['at'] for r in rows)
        shown = run_playbook('status.yml', dep.variables(), str(tmp_path))
        assert shown.returncode == 0 and 'scaled to zero since' in shown.stdout, shown.stdout[-3000:]
        router_log = ssh('grep -a glm.serve ~/%s/%s-*.out' % (WORK, ROUTER))
        assert 'request(s) held go on, the first after' in router_log, router_log[-3000:]

        used = gpu_seconds(re.findall(r' submitted as job (\d+)', '\n'.join(scale_log(WORK))))
        gpus = max(g for runs in used.values() for _j, _e, g in runs)
        used_s = sum(e * g for runs in used.values() for _j, e, g in runs)
        fixed_s = 2 * gpus * zero_at
        print('\nSCALE TO ZERO: 0 -> 1 -> 2 -> 1 -> 0 under 5 requests a second of 2 s for %d s (target 3, up after 10 s, '
              'down after 20 s, hold %d s): replica 1 submitted %.0f s after the first request, serving at %.0f s; '
              'the first request answered %.1f s after it was sent (its 2 s included); replica 2 serving at %.0f s; load '
              'ended at %.0f s, back to zero at %.0f s. %d requests, outcomes %s, %d held (waited over %.0f s), the '
              'longest %.1f s; p50 %s ms p99 %s ms. GPU-seconds of the replicas %d (%s) against %d for 2 replicas of %d '
              'GPUs held through the %.0f s: %.0f %%. Scale log:\n  %s' % (
                  LOAD_SECONDS, HOLD, up1_at, serving1_at, first_answer, serving2_at, ended_at, zero_at, summary['sent'],
                  summary['outcomes'], len(held), HELD_SECONDS, max(r['seconds'] for r in held),
                  summary['latency_ms']['p50'], summary['latency_ms']['p99'], used_s, used, fixed_s, gpus, zero_at,
                  100.0 * used_s / fixed_s, '\n  '.join(scale_log(WORK))))
        assert up1 and up2 and down2 and down1 and i_zero > i_down1
