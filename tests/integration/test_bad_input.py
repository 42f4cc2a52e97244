# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Bad input: every public variable of the roles and playbooks gets a wrong type, an out-of-range value or a
malformed string, and the REAL playbook (deploy.yml, or teardown.yml for its variables) runs against the LIVE local
cluster with the values in a JSON file (`-e @file.json`, so types are exact).

Each case asserts that the run
- fails (rc != 0);
- fails in a task that checks (the role's argument spec, or an assert of the validate/preflight tasks), with a
  message that names the variable and says what to set instead;
- changed nothing: no task reported a change, the case's jobs (squeue --me as the login user over SSH) are exactly
  the ones before (for teardown cases a held decoy server job stands in for a live server, so a teardown that went
  ahead would cancel it), and the case's work dir (key file, fake scripts) and any stray `~/glm-it-bad*` path are
  identical before and after (names, sizes, mtimes, modes, owners).

Each case has its own work dir `~/glm-it-badinput/cN` and job names `it-bad-cN-download`, `it-bad-cN-serve`, so
that the cases run three at a time (CI has 2 cores; ansible-playbook's start is most of a case's time) and each
one's snapshot and jobs are its own. The runs happen in a module fixture; each parametrized test checks one.

Run as root on the machine of the local cluster: .venv/bin/pytest tests/integration/test_bad_input.py
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from deploy_helpers import (chown_login, failures, isolated_vars, live_jobs, login_home, require_cluster, run_playbook, scancel_names,
                            snapshot, ssh)

ROOT = 'glm-it-badinput'
THREADS = 3
BASE = isolated_vars(ROOT + '/{case}', 'it-bad-{case}-download', 'it-bad-{case}-serve', server_wait_timeout=60,
                     server_time='00:05:00')


def named_prefix(prefix):
    """A filter of job names starting with prefix, the malformed ones included (spaces and ';' read as '-')."""
    return lambda name: name.replace(' ', '-').replace(';', '-').startswith(prefix)


def named(case):
    """Job names a case could make."""
    return named_prefix('it-bad-%s-' % case)


def fill(value, case):
    """'{case}' in a string value (or in a list's strings) is the case's id."""
    if isinstance(value, str):
        return value.replace('{case}', case)
    if isinstance(value, list):
        return [fill(v, case) for v in value]
    return value


def case(var, value, *expect, **kw):
    """One row: set var to value; the failure message must name var and contain each of expect."""
    shown = type(value).__name__ if isinstance(value, (list, dict)) else value
    label = kw.pop('label', None) or '%s=%s' % (var, shown)
    return pytest.param(kw.pop('playbook', 'deploy.yml'), dict({var: value}, **kw.pop('also', {})), var, expect,
                        id=label)


CASES = [
    # role glm (shared settings)
    case('glm_work_dir', 'glm-it-bad-relative', 'absolute path'),
    case('glm_work_dir', ['~/glm-it-badinput/{case}'], 'absolute path'),
    case('glm_partition', 'compute-a100', 'not a partition', 'compute-h200'),
    case('glm_partition', 'compute h100', 'sinfo'),
    case('glm_image', 'sglang.sqsh', 'absolute'),
    case('glm_model_repo', 'zai-org/GLM 5.3 Flash', 'zai-org/GLM-5.3-Flash'),
    case('glm_model_repo', 'GLM-5.3-Flash', 'zai-org/GLM-5.3-Flash', label='glm_model_repo=no-owner'),
    case('glm_model_dir', '~', 'absolute'),
    case('glm_model_dir', '~/glm-it-badinput/{case}/GLM 5.3', 'container mounts', label='glm_model_dir=space'),
    case('glm_container_mounts', ['/lustre/a,/lustre/b'], 'SRC[:DST[:FLAGS]]', label='glm_container_mounts=comma'),
    case('glm_container_mounts', ['datasets:/datasets'], 'absolute paths', label='glm_container_mounts=relative'),
    case('glm_container_mounts', '/lustre', 'list', label='glm_container_mounts=string'),
    case('glm_api_key_file', '~/glm-it-badinput/{case}/', 'path of a file'),
    case('glm_endpoint_file', 'endpoint', 'absolute'),
    case('glm_download_job_name', 'it bad {case} download', 'letters, digits', label='glm_download_job_name=spaces'),
    case('glm_download_job_name', 'it-bad-{case}-serve', 'different from glm_serve_job_name',
         label='glm_download_job_name=same-as-serve'),
    case('glm_serve_job_name', 'it-bad-{case}-serve;id', 'letters, digits', label='glm_serve_job_name=semicolon'),
    case('glm_served_model_name', 'glm 5.3 flash', 'without spaces'),
    case('glm_port', 99999, '1 to 65535'),
    case('glm_port', 0, '1 to 65535'),
    case('glm_port', 'many', 'int'),
    case('glm_job_umask', '0022', '0077'),
    case('glm_job_umask', 'u=rwx', '0077'),
    # role api_key
    case('api_key_rotate', 'maybe', 'bool'),
    case('api_key_bytes', 8, '16 to 256'),
    case('api_key_bytes', 1000, '16 to 256'),
    case('api_key_bytes', 'lots', 'int'),
    # role download
    case('download_partition', 'compute-a100', 'not a partition'),
    case('download_container_image', 'docker://lmsysorg/sglang v0.5.21', 'v0.5.21'),
    case('download_model_revision', 'main branch', 'without spaces'),
    case('download_cpus_per_task', 0, 'at least 1'),
    case('download_cpus_per_task', 'sixteen', 'int'),
    case('download_mem', '64 GB', '64G'),
    case('download_time', '6 hours', 'HH:MM:SS'),
    case('download_time', '06:75:00', 'HH:MM:SS'),
    case('download_max_workers', 0, 'at least 1'),
    case('download_hf_xet_high_performance', 'maybe', 'bool'),
    case('download_hf_extra_args', {'--include': '*.json'}, 'list'),
    case('download_env', {'BAD-NAME': '1'}, 'letters, digits'),
    case('download_env', ['A=1'], 'dict'),
    case('download_sbatch_args', {'--account': 'ml'}, 'list'),
    case('download_min_free_gb', -1, '0 or more'),
    case('download_min_free_gb', 100000000, 'buy more storage', label='download_min_free_gb=100PB'),
    case('download_force', 'maybe', 'bool'),
    case('download_hints', {'match': 'x', 'hint': 'y'}, 'list'),
    case('download_hints', ['free the disk'], 'dict', label='download_hints=list-of-str'),
    case('download_hints', [{'match': '[unclosed', 'hint': 'y'}], 'regular expression', '[unclosed',
         label='download_hints=bad-regex'),
    case('download_hints', [{'hint': 'y'}], 'match', label='download_hints=no-match'),
    # role server
    case('server_partition', 'compute-a100', 'not a partition', 'compute-h200'),
    case('server_partition', 'compute h100', 'sinfo'),
    case('server_gpus', 0, '8'),
    case('server_gpus', 'eight', 'int'),
    case('server_gpus', 16, 'GPUs', also={'server_tp_size': 16}, label='server_gpus=16-more-than-a-node'),
    case('server_exclusive', 'maybe', 'bool'),
    case('server_mem', 'all', '1800G'),
    case('server_time', '8 hours', 'HH:MM:SS'),
    case('server_time', '25:61:00', 'HH:MM:SS'),
    case('server_sbatch_args', {'--account': 'ml'}, 'list'),
    case('server_restarts', 50, '0 to 20'),
    case('server_replicas_max', 1, 'at least server_replicas (2)', also={'server_replicas': 2},
         label='server_replicas_max=1-under-server_replicas-2'),
    case('server_scale_down_after', '15 minutes', 'a duration', '15m'),
    case('server_burst_partition', 'gpu-burst', 'need server_replicas_max above server_replicas',
         label='server_burst_partition-without-autoscaling'),
    case('server_burst_partition', 'burst-a100', 'not a partition', also={'server_replicas_max': 2}),
    case('server_restart_delay', 0, '1 to 3600', label='server_restart_delay=0'),
    case('server_drain_before', 10, '30 to 3600'),
    case('server_tp_size', 4, 'server_gpus (8)', label='server_tp_size=4-with-8-gpus'),
    case('server_tp_size', 'eight', 'int'),
    case('server_ep_size', 3, 'divisor of server_tp_size (8)'),
    case('server_ep_size', 16, 'divisor of server_tp_size (8)', label='server_ep_size=16-over-tp-8'),
    case('server_ep_size', 0, 'divisor'),
    case('server_kv_cache_dtype', 'fp8_e4m3', 'Hopper', 'bfloat16', label='server_kv_cache_dtype=fp8_e4m3-on-h100'),
    case('server_kv_cache_dtype', 'fp8_e5m2', 'Hopper', 'bfloat16', also={'glm_partition': 'compute-h200'},
         label='server_kv_cache_dtype=fp8_e5m2-on-h200'),
    case('server_kv_cache_dtype', 'fp16', 'one of'),
    case('server_dsa_prefill_backend', 'tile lang', 'tilelang'),
    case('server_dsa_decode_backend', '', 'tilelang', label='server_dsa_decode_backend=empty'),
    case('server_moe_runner_backend', '--deep_gemm', 'deep_gemm'),
    case('server_reasoning_parser', 'glm 45', 'glm45'),
    case('server_tool_call_parser', 'glm47 --api-key x', 'glm47'),
    case('server_host', '0.0.0.0 --api-key x', '0.0.0.0'),
    case('server_low_latency', 'maybe', 'bool'),
    case('server_speculative_algorithm', 'EAGLE 3', 'EAGLE'),
    case('server_speculative_num_steps', 0, '1 or more'),
    case('server_speculative_eagle_topk', 0, '1 or more'),
    case('server_speculative_num_draft_tokens', -1, '1 or more'),
    case('server_mem_fraction_static', 1.7, 'between 0 and 1'),
    case('server_mem_fraction_static', 0, 'between 0 and 1'),
    case('server_mem_fraction_static', 'high', 'float'),
    case('server_extra_args', ['--api-key', 'sk-bad'], 'api_key_rotate', label='server_extra_args=--api-key'),
    case('server_extra_args', ['--api-key=sk-bad'], 'api_key_rotate', label='server_extra_args=--api-key=K'),
    case('server_extra_args', ['--config', '/tmp/x.yaml'], 'config file', label='server_extra_args=--config'),
    case('server_extra_args', {'--api-key': 'sk-bad'}, 'list'),
    case('server_env', {'1BAD': 'x'}, 'letters, digits'),
    case('server_env', 'FOO', 'dict'),
    case('server_cache_dir', 'cache', 'absolute'),
    case('server_hopper_partitions', {'compute-h100': True}, 'list'),
    case('server_recreate', 'maybe', 'bool'),
    case('server_restart_on_change', 'maybe', 'bool'),
    case('server_allow_outage', 'maybe', 'bool'),
    case('server_wait', 'maybe', 'bool'),
    case('server_hints', 'CUDA out of memory', 'dict', label='server_hints=str'),
    case('server_hints', [{'match': '(oom', 'hint': 'y'}], 'regular expression', '(oom', label='server_hints=bad-regex'),
    case('server_wait_timeout', 0, '1 or more'),
    case('server_wait_timeout', 'forever', 'int'),
    case('server_wait_sleep', 0, '1 or more'),
    case('server_probe_timeout', 0, '1 or more'),
    # several bad values of one role: its one check names every one of them at once
    case('server_time', '8 hours', 'HH:MM:SS', 'server_tp_size=4 is not valid', 'server_ep_size=3 is not valid',
         also={'server_tp_size': 4, 'server_ep_size': 3}, label='server-three-bad-values-at-once'),
    case('glm_port', 0, '1 to 65535', 'glm_served_model_name="glm 5.3 flash" is not valid',
         also={'glm_served_model_name': 'glm 5.3 flash'}, label='glm-two-bad-values-at-once'),
    case('server_partition', 'compute-a100', 'not a partition', 'download_partition=compute-b200 is not a partition',
         also={'download_partition': 'compute-b200'}, label='two-bad-partitions-at-once'),
    # deploy.yml's own
    case('glm_hosts', 'no-such-hosts', 'inventory'),
    case('glm_smoke_test', 'maybe', 'true or false'),
    case('glm_smoke_test_timeout', 0, 'seconds'),
    case('glm_smoke_test_timeout', 'soon', 'seconds'),
    case('router_tls_cert', '/etc/glm/router.pem', 'runs no router', 'router_enabled=true',
         also={'router_tls_key': '/etc/glm/router.key'}, label='router_tls-without-a-router'),
    case('glm_api_keys', [{'name': 'team-a', 'rpm': 60}], 'runs no router', 'router_enabled=true',
         label='team-keys-without-a-router'),
    # fetch_key.yml's own
    case('glm_key_team', 'team-z', 'is not a team of glm_api_keys', 'add the team to glm_api_keys',
         also={'glm_key_dest': '~/key'}, playbook='fetch_key.yml'),
    # usage.yml's own
    case('usage_from', '12/01/2026', 'YYYY-MM-DD', playbook='usage.yml'),
    case('usage_to', '2026-11-01', 'the first not after the last', also={'usage_from': '2026-12-01'}, playbook='usage.yml'),
    # teardown.yml's own
    case('glm_stop_at', 'tomorrow', 'YYYY-MM-DDTHH:MM', playbook='teardown.yml'),
    case('glm_stop_at', '2026-13-45T25:61', 'YYYY-MM-DDTHH:MM', playbook='teardown.yml'),
    case('glm_stop_at', '8 hours', 'YYYY-MM-DDTHH:MM', playbook='teardown.yml'),
    case('glm_teardown_download', 'maybe', 'true or false', playbook='teardown.yml'),
    case('glm_hosts', 'no-such-hosts', 'inventory', playbook='teardown.yml', label='teardown-glm_hosts=no-such-hosts'),
    case('glm_serve_job_name', 'it bad {case} serve', 'letters, digits', playbook='teardown.yml',
         label='teardown-glm_serve_job_name=spaces'),
]


IDS = [param.id for param in CASES]


def host_state(home, case):
    strays = sorted(n for n in os.listdir(home) if n.startswith('glm-it-bad') and n != ROOT)
    return snapshot(os.path.join(home, ROOT, case)), strays


def make_work(home, case):
    """The case's work dir with a key file and fake scripts, as the login user would have them."""
    work = os.path.join(home, ROOT, case)
    os.mkdir(work, 0o700)
    chown_login(work)
    for name, text in (('api-key', 'd00d' * 12 + '\n'), ('serve.sbatch', '#!/bin/bash\n# fake\n'),
                       ('download.sbatch', '#!/bin/bash\n# fake\n'), ('endpoint', 'GLM_MODEL=x\n')):
        path = os.path.join(work, name)
        with open(path, 'w') as handle:
            handle.write(text)
        os.chmod(path, 0o600)
        chown_login(path)
        os.utime(path, (1700000000, 1700000000))
    os.utime(work, (1700000000, 1700000000))


def run_case(home, tmp, index, param):
    playbook, bad, var, expect = param.values
    case = 'c%d' % index
    match = named(case)
    extra = {key: fill(value, case) for key, value in dict(BASE, **bad).items()}
    make_work(home, case)
    decoy = None
    if playbook == 'teardown.yml':
        decoy = ssh("cd && sbatch --parsable --hold -J it-bad-%s-serve -p compute-h100 -c 1 --mem=64M -t 5 "
                    "-o /dev/null --wrap 'sleep 1'" % case).strip().split(';')[0]
    state_before, jobs_before = host_state(home, case), live_jobs(match)
    started = time.time()
    proc = run_playbook(playbook, extra, tmp, result_json=True, timeout=120)
    if 'Unable to contact slurm controller' in proc.stdout:
        # slurmctld restarting (another test may restart it): not this case's doing; once more, a bit later
        time.sleep(10)
        proc = run_playbook(playbook, extra, tmp, result_json=True, timeout=120)
    took = time.time() - started
    return {'proc': proc, 'took': took, 'decoy': decoy, 'jobs_before': jobs_before, 'jobs_after': live_jobs(match),
            'state_before': state_before, 'state_after': host_state(home, case)}


@pytest.fixture(scope='module')
def results(tmp_path_factory):
    """Runs every case, THREADS at a time; cleans up the jobs and the work dirs at the end."""
    require_cluster()
    home = login_home()
    root = os.path.join(home, ROOT)
    shutil.rmtree(root, ignore_errors=True)
    os.mkdir(root, 0o700)
    chown_login(root)
    tmp = str(tmp_path_factory.mktemp('bad-input'))
    started = time.time()
    try:
        with ThreadPoolExecutor(THREADS) as pool:
            futures = [pool.submit(run_case, home, tmp, i, param) for i, param in enumerate(CASES)]
            done = {IDS[i]: future.result() for i, future in enumerate(futures)}
        print('bad input: %d cases in %.0f s' % (len(CASES), time.time() - started))
        yield done
    finally:
        mine = named_prefix('it-bad-')
        scancel_names(sorted(set(name for _id, name, _state in live_jobs(mine))))
        shutil.rmtree(root, ignore_errors=True)
        time.sleep(1)
        assert live_jobs(mine) == [], 'jobs of this file are left after the cleanup'


def test_harness_sees_changes_and_jobs(tmp_path):
    """The checks below can fail: the snapshot sees a chmod, the job filter sees a job of the case's name."""
    require_cluster()
    home = login_home()
    root = os.path.join(home, ROOT)
    os.makedirs(root, 0o700, exist_ok=True)
    chown_login(root)
    shutil.rmtree(os.path.join(root, 'self'), ignore_errors=True)
    make_work(home, 'self')
    try:
        before = host_state(home, 'self')
        os.chmod(os.path.join(root, 'self', 'endpoint'), 0o640)
        assert host_state(home, 'self') != before
        job = ssh("cd && sbatch --parsable --hold -J 'it bad self serve' -p compute-h100 -c 1 --mem=64M -t 1 "
                  "-o /dev/null --wrap 'sleep 1'").strip().split(';')[0]
        try:
            seen = [row[0] for row in live_jobs(named('self'))]
            # The filter sees the job; a job of another name is not seen (below). Another job of this name is not
            # this check's to judge: CI once saw one more (ids 809 and 828, the test submits one); its squeue row is
            # printed to find where it came from.
            assert job in seen
            if seen != [job]:
                print('another job of the name:\n' + ssh("squeue --me -h -t all -o '%i|%j|%T|%V|%r'"))
            assert named('self')('it-bad-selfish-serve') is False and named('self')('it bad self serve') is True
        finally:
            ssh('scancel %s' % job, check=False)
        # a failure message is found in the output and its task named
        failed, changed = failures(
            'TASK [glm.serve.glm : Check the shared settings] ***\n'
            'failed: [local] (item=glm_port) => {"changed": false, "msg": "glm_port=0 is not valid"}\n'
            'local                      : ok=4    changed=1    unreachable=0    failed=1    skipped=0\n')
        assert failed == [('Check the shared settings', 'glm_port=0 is not valid')] and changed == {'local': 1}
    finally:
        shutil.rmtree(os.path.join(root, 'self'), ignore_errors=True)


@pytest.mark.parametrize('playbook, bad, var, expect', CASES)
def test_bad_value_is_refused_before_anything_changes(results, playbook, bad, var, expect, request):
    got = results[request.node.callspec.id]
    proc = got['proc']
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, 'the run with %r succeeded (rc 0):\n%s' % (bad, out[-3000:])
    failed, changed = failures(proc.stdout)
    assert failed, 'rc %d but no failed task:\n%s' % (proc.returncode, out[-3000:])
    task, message = failed[0]
    assert task.startswith(('Validating arguments', 'Check')), 'failed in %r, not in a check: %s' % (task, message)
    assert var in message, 'the message does not name %s: %s' % (var, message)
    for fragment in expect:
        assert fragment in message, 'the message lacks %r: %s' % (fragment, message)
    assert changed and not any(changed.values()), 'a task changed something (recap %s)' % changed
    assert got['jobs_after'] == got['jobs_before'], 'jobs changed'
    if got['decoy']:
        assert [row[0] for row in got['jobs_after']] == [got['decoy']], 'the decoy server job is gone'
    assert got['state_after'] == got['state_before'], 'files changed'
    assert got['took'] < 60
