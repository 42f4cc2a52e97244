# -*- coding: utf-8 -*-
"""Two replicas behind the REAL router (SGLang's Model Gateway, smg 1.13 from the package index), on the
local cluster over real SSH: the replicas are the SGLang stand-ins on node1 and node2, the router runs on node3
(partition cpu) from the venv the router role makes on the login node.

The login node of a Debian root has no package index, so the router's wheels are downloaded here for the login
node's Python into ~/glm-it-wheels and the role is told to install from there (router_pip_args: --no-index
--find-links), as on a site without the index. In order, on one deploy (work dir ~/glm-it-replicas, jobs it-rp-*):
- the deploy: both replicas answer, the router answers on node3, the endpoint file names it; requests through it
  succeed with the key and get 401 without; they reach both replicas (the router's own per-worker counter);
  the key is on no command line, in no log, in no file but its own;
- a second deploy changes nothing and submits nothing;
- a replica cancelled by someone: requests keep succeeding; a deploy brings it back, the rest untouched;
- scale 2 -> 1 (router_enabled keeps the router and the URL): replica 2 leaves the router, then is cancelled;
  1 -> 2: it comes back and joins;
- teardown: nothing of it is left in the queue.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from deploy_helpers import (CLUSTER, REPO, ROUTER_WHEELS, SSH, chown_login, cmdlines_holding, files_holding, isolated_vars,
                            live_jobs, login_home, recap, require_cluster, router_wheels, run_playbook, scancel_names,
                            sglang_pids, ssh)

WORK = 'glm-it-replicas'
DOWNLOAD, SERVE = 'it-rp-download', 'it-rp-serve'
ROUTER = SERVE + '-router'
REPLICAS = [SERVE, SERVE + '-2']
NAMES = [DOWNLOAD, SERVE, SERVE + '-2', SERVE + '-3', ROUTER]
FAST = {'GLM_STANDIN_SGLANG_LOAD': '1', 'GLM_STANDIN_SGLANG_WARMUP': '1'}

CLIENT = r'''
import json, ssl, sys, urllib.request, urllib.error
base, key_file, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
key = open(key_file).read().strip() if key_file != '-' else None
# an https base URL: trust the certificate file given (the router's), else the system's store
context = ssl.create_default_context(cafile=sys.argv[4]) if len(sys.argv) > 4 else None
out = []
for i in range(count):
    req = urllib.request.Request(base + '/chat/completions', method='POST', data=json.dumps(
        {'model': 'glm-5.3-flash', 'messages': [{'role': 'user', 'content': 'hi %d' % i}], 'max_tokens': 8}).encode())
    req.add_header('Content-Type', 'application/json')
    if key:
        req.add_header('Authorization', 'Bearer ' + key)
    try:
        with urllib.request.urlopen(req, timeout=30, context=context) as r:
            out.append(r.status)
    except urllib.error.HTTPError as e:
        out.append(e.code)
    except Exception as e:
        out.append(str(e))
print(json.dumps(out))
'''


def variables(**extra):
    base = isolated_vars(WORK, DOWNLOAD, SERVE, server_replicas=2, server_env=FAST, router_policy='round_robin',
                         router_pip_args=['--no-index', '--find-links', os.path.join(login_home(), ROUTER_WHEELS)],
                         router_sync_interval=2, router_health_check_interval=2,
                         # the stand-ins listen on port 30000 of node1's and node2's addresses on this one machine
                         router_host='node', server_wait_timeout=300, server_restart_delay=2)
    base.update(extra)
    return base


def jobs():
    """{name: (id, state)} of the live jobs of this test."""
    return {row[1]: (row[0], row[2]) for row in live_jobs(lambda name: name in NAMES)}


def endpoint():
    text = ssh('cat ~/%s/endpoint' % WORK)
    return dict(line.split('=', 1) for line in text.split())['GLM_BASE_URL']


def chats(count, key=True, cafile=None):
    """Statuses of count chat requests to the router, sent on the login node (the key read from its file there);
    CAFILE: the certificate an https endpoint is trusted with."""
    key_file = '~/%s/api-key' % WORK if key else '-'
    out = ssh('python3 ~/%s/it-client.py %s %s %d%s' % (WORK, endpoint(), key_file, count, (' ' + cafile) if cafile else ''),
              timeout=120)
    return json.loads(out)


def served():
    """The router's per-replica request counter (smg 1.13, as sglang-router 0.3.2: smg_worker_cb_outcomes_total), from the
    login node: through the front door with the operator's key (the gateway's metrics port is on its node's loopback,
    issue 37 item 7: from another node nothing answers there)."""
    node = jobs_node(ROUTER)
    fetch = ('python3 -c "import sys, urllib.request, urllib.error\n'
             'req = urllib.request.Request(sys.argv[1], headers={\'Authorization\': \'Bearer \' + open(sys.argv[2]).read().strip()})\n'
             'try:\n    print(urllib.request.urlopen(req, timeout=10).read().decode())\n'
             'except Exception as e:\n    print(\'FAILED\', e)" %s %s')
    assert ssh(fetch % ('http://%s:29000/metrics' % node, '~/%s/api-key' % WORK)).startswith('FAILED')
    text = ssh(fetch % (endpoint()[:-len('/v1')] + '/metrics', '~/%s/api-key' % WORK))
    return {url: int(n) for url, n in re.findall(r'^smg_worker_cb_outcomes_total\{worker="([^"]+)",outcome="success"\} (\d+)', text, re.M)}


def jobs_node(name):
    out = ssh("squeue --me -h -n %s -t R -o '%%N'" % name).split()
    assert out, 'no running %s job' % name
    return out[0]


def workers_file():
    return json.loads(ssh('cat ~/%s/router-workers.json' % WORK))['workers']


@pytest.fixture(scope='module')
def env(tmp_path_factory):
    require_cluster()
    tmp = str(tmp_path_factory.mktemp('replicas'))
    home = login_home()
    work = os.path.join(home, WORK)
    scancel_names(NAMES)
    shutil.rmtree(work, ignore_errors=True)
    router_wheels()
    try:
        started = time.monotonic()
        proc = run_playbook('deploy.yml', variables(), tmp, timeout=900)
        took = time.monotonic() - started
        assert proc.returncode == 0, proc.stdout[-6000:]
        client = os.path.join(work, 'it-client.py')
        with open(client, 'w') as handle:
            handle.write(CLIENT)
        chown_login(client)
        print('\nREPLICAS: first deploy of 2 replicas + router in %.0f s' % took)
        yield {'tmp': tmp, 'deploy': proc}
    finally:
        down = run_playbook('teardown.yml', dict(variables(), glm_teardown_download=True), tmp)
        left = jobs()
        kept = [name for name in ('replicas', 'router-workers.json') if os.path.exists(os.path.join(work, name))]
        scancel_names(NAMES)
        shutil.rmtree(work, ignore_errors=True)
        assert not {k: v for k, v in left.items() if v[1] not in ('COMPLETING',)}, left
        assert down.returncode == 0, down.stdout[-3000:]
        assert kept == [], kept                     # teardown removed the replicas' and the router's files


def test_deploy_two_replicas_behind_the_router(env):
    now = jobs()
    assert set(now) == {SERVE, SERVE + '-2', ROUTER} and all(v[1] == 'RUNNING' for v in now.values()), now
    assert jobs_node(ROUTER) == 'node3'
    assert sorted(jobs_node(name) for name in REPLICAS) == ['node1', 'node2']
    assert endpoint() == 'http://node3:30000/v1'
    out = env['deploy'].stdout
    assert 'router: job %s on node3, policy round_robin, endpoint http://node3:30000/v1' % now[ROUTER][0] in out, out[-3000:]
    assert '%s (job %s, node1): answers' % (SERVE, now[SERVE][0]) in out or '%s (job %s, node2): answers' % (SERVE, now[SERVE][0]) in out
    assert sorted((w['replica'], w['healthy']) for w in workers_file()) == [(SERVE, True), (SERVE + '-2', True)]
    before = served()
    assert chats(6) == [200] * 6
    assert chats(2, key=False) == [401, 401]
    after = served()
    assert sorted(after) == ['http://node1:30000', 'http://node2:30000'], after
    assert all(after[url] - before.get(url, 0) == 3 for url in after), (before, after)   # round_robin: both served
    key = ssh('cat ~/%s/api-key' % WORK).strip()
    assert cmdlines_holding(key) == []
    # SGLang itself logs its resolved args, key included, in the replicas' logs (0600, as the job's umask makes
    # them, like the per-job config files): every file holding the key is its owner's only, and the router's log,
    # its workers file and its launcher's command line hold none
    hits = files_holding(os.path.join(login_home(), WORK), key)
    assert [hit for hit in hits if hit[1] != 0o600] == [], hits
    assert [path for path, _mode in hits if ROUTER in path or 'router-workers' in path or path.endswith('endpoint')] == []
    assert key not in out
    # the replicas serve a key of their own (issue 37 item 2), which the router's gateway sends them: the operator's
    # key, which clients hold, opens nothing on a replica (nor its admin routes); theirs is on no command line either
    replica_key = ssh('cat ~/%s/replica-key' % WORK).strip()
    assert len(replica_key) == 48 and replica_key != key
    for node in sorted(jobs_node(name) for name in REPLICAS):
        assert models_status('~/%s/api-key' % WORK, base='http://%s:30000/v1' % node) == 401
        assert models_status('~/%s/replica-key' % WORK, base='http://%s:30000/v1' % node) == 200
    assert cmdlines_holding(replica_key) == []
    hits = files_holding(os.path.join(login_home(), WORK), replica_key)
    assert hits and [hit for hit in hits if hit[1] != 0o600] == [], hits
    assert [path for path, _mode in hits if ROUTER in path or 'router-workers' in path or path.endswith('endpoint')] == []
    assert replica_key not in out


def test_second_deploy_changes_nothing(env):
    before = jobs()
    proc = run_playbook('deploy.yml', variables(), env['tmp'], timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert recap(proc)[0] == 0, proc.stdout[-4000:]
    assert jobs() == before


def test_check_mode_changes_nothing_and_says_what_it_sees(env):
    before = jobs()
    proc = run_playbook('deploy.yml', variables(), env['tmp'], timeout=600, options=['--check'])
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert recap(proc)[0] == 0, proc.stdout[-4000:]
    assert jobs() == before
    assert 'check mode, not waited for: live, RUNNING' in proc.stdout, proc.stdout[-3000:]


def test_status_shows_the_router_what_it_has_and_each_replica(env):
    now = jobs()
    proc = run_playbook('status.yml', variables(), env['tmp'], timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:]
    out = proc.stdout
    assert 'router: job %s RUNNING on node3, policy round_robin, /v1/models ready' % now[ROUTER][0] in out, out[-3000:]
    for name in REPLICAS:
        assert re.search(r'router has: http://node\d:30000 \(%s, healthy, requests served: \d+\)' % re.escape(name), out), out[-3000:]
    assert re.search(r'%s job %s: RUNNING on node\d, /v1/models ready' % (re.escape(SERVE + '-2'), now[SERVE + '-2'][0]), out), out[-3000:]


def test_a_cancelled_replica_costs_no_request_and_a_deploy_brings_it_back(env):
    before = jobs()
    ssh('scancel %s' % before[SERVE + '-2'][0])
    results = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        results += chats(2)
    assert set(results) == {200}, results
    proc = run_playbook('deploy.yml', variables(), env['tmp'], timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:]
    now = jobs()
    assert now[SERVE] == before[SERVE] and now[ROUTER] == before[ROUTER]        # nothing healthy restarted
    assert now[SERVE + '-2'][0] != before[SERVE + '-2'][0] and now[SERVE + '-2'][1] == 'RUNNING'
    assert sorted((w['replica'], w['healthy']) for w in workers_file()) == [(SERVE, True), (SERVE + '-2', True)]
    assert chats(4) == [200] * 4


def test_sglang_killed_in_a_replica_is_restarted_in_its_job_and_costs_no_request(env):
    """SGLang dies inside a healthy job (SIGKILL: the OOM killer, a scheduler's crash): the replica leaves the router,
    SGLang starts again in the same job (GPU check first, after server_restart_delay) and joins again once it passed
    the health gate; requests sent all along get 200 from the other replica."""
    before = jobs()
    job_id = before[SERVE + '-2'][0]
    pids = sglang_pids(job_id)
    assert len(pids) == 1, pids
    os.kill(pids[0], signal.SIGKILL)
    results = []
    started = time.monotonic()
    while time.monotonic() < started + 60:
        results += chats(2)
        healthy = sorted((w['replica'], w['healthy']) for w in workers_file())
        if (healthy == [(SERVE, True), (SERVE + '-2', True)] and sglang_pids(job_id) not in ([], pids)
                and ssh('grep -c "health gate passed" ~/%s/%s-%s.out' % (WORK, SERVE + '-2', job_id), check=False).strip() == '2'):
            break
    assert set(results) == {200}, results
    assert healthy == [(SERVE, True), (SERVE + '-2', True)], healthy
    assert jobs() == before                                        # the same jobs: restarted in the job
    back = time.monotonic() - started
    log = ssh('cat ~/%s/%s-%s.out' % (WORK, SERVE + '-2', job_id))
    assert 'restart 1 of 3 in 2 s (server_restarts), the GPU check first' in log, log[-3000:]
    assert log.count('health gate passed') == 2, log[-3000:]
    assert chats(4) == [200] * 4
    print('\nREPLICAS: SGLang killed in %s: back behind the router in the same job after %.1f s, %d requests meanwhile, '
          'all 200; its log: %s' % (SERVE + '-2', back, len(results), re.findall(r'\[glm.serve\] SGLang ended[^\n]*', log)))


@pytest.mark.continuity
def test_a_requeued_replica_costs_no_request_and_rejoins_under_its_name(env):
    """`scontrol requeue` of a replica (what Slurm does to a job on a node that failed or was preempted with
    PreemptMode=REQUEUE): its batch script gets SIGTERM and leaves the router, the same job id runs again (on
    whatever node Slurm gives it) and rejoins under the same replica name after the gate, with no person acting;
    requests meanwhile all get 200. slurmctld holds a requeued batch job for 120 s (Reason=BeginTime, seen on 24.11),
    so this case takes about 3 minutes (169 s measured): `make continuity` runs it, not make test."""
    before = jobs()
    job_id = before[SERVE + '-2'][0]
    ssh('scontrol requeue %s' % job_id)
    results = []
    started = time.monotonic()
    healthy = []
    while time.monotonic() < started + 240:
        results += chats(2)
        now = jobs()
        healthy = sorted((w['replica'], w['healthy']) for w in workers_file())
        if (now.get(SERVE + '-2') == (job_id, 'RUNNING') and healthy == [(SERVE, True), (SERVE + '-2', True)]
                and sglang_pids(job_id)):
            break
    back = time.monotonic() - started
    assert set(results) == {200}, results
    assert healthy == [(SERVE, True), (SERVE + '-2', True)], healthy
    assert jobs() == before                                        # the same job ids, running again
    print('\nREPLICAS: %s requeued: back behind the router under its name after %.1f s, %d requests meanwhile, all 200'
          % (SERVE + '-2', back, len(results)))


@pytest.mark.continuity
def test_a_rolling_restart_of_the_compute_nodes_under_load(env):
    """The platform's rolling restart (the seed guide's platform notes: adding or removing a login account restarts
    the compute nodes one at a time, ending their jobs): `cluster.sh restart-node` cuts each GPU node's power in turn
    (slurmd and every process of its jobs SIGKILLed, slurmd back 10 s later), under steady load through the router
    from the login node (tests/tooling/loadgen.py: 5 requests a second, a quarter streamed). Slurm finds the batch
    job missing when the node registers again and requeues it (slurmctld: "not found BatchStartTime after startup,
    Requeuing job"); the requeued replica rejoins under its name with no person acting. Non-streamed requests: none
    fails (the gateway retries those cut by the power cut on the other replica); streams cut by it are counted and
    reported. Takes about 6 minutes: `make continuity`."""
    loadgen = os.path.join(login_home(), WORK, 'it-loadgen.py')
    shutil.copy(os.path.join(REPO, 'tests', 'tooling', 'loadgen.py'), loadgen)
    chown_login(loadgen)
    router_node = jobs_node(ROUTER)
    load = subprocess.Popen(SSH + ['python3 %s --url %s --key-file ~/%s/api-key --rate 5 --duration 900 --streamed 0.25 '
                                   '--timeout 60 --allow-host %s' % (loadgen, endpoint(), WORK, router_node)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, universal_newlines=True)
    figures = []
    try:
        time.sleep(10)
        before = jobs()
        for name in REPLICAS:
            node = jobs_node(name)
            job_id = jobs()[name][0]
            proc = subprocess.run([CLUSTER, 'restart-node', node, '10'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  universal_newlines=True, timeout=120, check=False)
            assert proc.returncode == 0, proc.stdout
            back_at = time.monotonic()
            healthy = []
            while time.monotonic() < back_at + 300:
                healthy = sorted((w['replica'], w['healthy']) for w in workers_file())
                if (jobs().get(name) == (job_id, 'RUNNING') and healthy == [(SERVE, True), (SERVE + '-2', True)]
                        and sglang_pids(job_id)):
                    break
                time.sleep(2)
            assert healthy == [(SERVE, True), (SERVE + '-2', True)], (healthy, jobs())
            took = time.monotonic() - back_at
            figures.append('%s (job %s on %s): back behind the router %.0f s after its node' % (name, job_id, node, took))
        time.sleep(10)
        assert jobs() == before                                        # the same job ids, requeued and running again
    finally:
        ssh('pkill -TERM -f it-loadgen.py', check=False)
        out, err = load.communicate(timeout=120)
    summary = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    assert summary, err
    plain = summary['plain']
    assert set(plain) == {'200'}, summary                              # no non-streamed request failed
    assert summary['unfinished'] == 0 and summary['skipped'] == 0, summary
    broken = sum(n for outcome, n in summary['streamed'].items() if outcome != '200')
    print('\nREPLICAS: rolling restart of the GPU nodes under load: %s; %d requests in %.0f s, non-streamed %s, streamed %s '
          '(%d cut by a power cut), p50 %s ms p99 %s ms' % ('; '.join(figures), summary['sent'], summary['seconds'], plain,
                                                            summary['streamed'], broken, summary['latency_ms']['p50'],
                                                            summary['latency_ms']['p99']))


def test_scale_down_to_one_then_up_to_two(env):
    before = jobs()
    # server_replicas=1 as the issue writes it (no router_enabled): the router stays while replicas are there; replica
    # 2 is drained (a request it is running is answered) before it is cancelled; replica 1 and the router untouched
    proc = run_playbook('deploy.yml', variables(server_replicas=1), env['tmp'], timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:]
    now = jobs()
    assert set(now) == {SERVE, ROUTER} and now[SERVE] == before[SERVE] and now[ROUTER] == before[ROUTER], now
    assert [w['replica'] for w in workers_file()] == [SERVE]
    assert chats(3) == [200] * 3
    assert endpoint() == 'http://node3:30000/v1'
    log = ssh('cat ~/%s/%s-%s.out' % (WORK, ROUTER, now[ROUTER][0]))
    assert 'replica %s at http://node' % (SERVE + '-2') in log and 'is out of the router' in log, log[-2000:]
    proc = run_playbook('deploy.yml', variables(), env['tmp'], timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:]
    now = jobs()
    assert set(now) == {SERVE, SERVE + '-2', ROUTER} and now[SERVE] == before[SERVE], now
    assert sorted(w['replica'] for w in workers_file()) == [SERVE, SERVE + '-2']
    assert chats(2) == [200, 200]


def flat(text):
    """Ansible's output with its line wrapping undone (the YAML callback folds long lines)."""
    return ' '.join(text.split())


def test_https_on_the_router_restarts_no_replica_and_answers_with_its_certificate(env):
    """router_tls_cert/router_tls_key (issue 24, section 5), with a certificate made now: a key that others may read is
    refused before anything changes; then only the router job is replaced (its script changed), the replicas keep
    running, the endpoint file says https and the certificate, and clients on the login node get answers over HTTPS
    with the key and that certificate (the official openai client over HTTPS: test_router_launcher.py; the test
    process cannot reach a node of a release's root, whose network is its own)."""
    folder = os.path.join(login_home(), WORK, 'tls')
    os.makedirs(folder, exist_ok=True)
    cert, key_pem = os.path.join(folder, 'router.pem'), os.path.join(folder, 'router-key.pem')
    subprocess.run(['openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
                    '-days', '1', '-subj', '/CN=node3', '-addext', 'subjectAltName=DNS:node3,DNS:localhost,IP:127.0.0.1',
                    '-keyout', key_pem, '-out', cert], check=True, capture_output=True)
    for path in (folder, cert, key_pem):
        chown_login(path)
    os.chmod(key_pem, 0o640)
    tls = variables(router_tls_cert='~/%s/tls/router.pem' % WORK, router_tls_key='~/%s/tls/router-key.pem' % WORK)
    before = jobs()
    refused = run_playbook('deploy.yml', tls, env['tmp'], timeout=600)
    assert refused.returncode != 0 and 'which others may read: chmod 600 it' in flat(refused.stdout), refused.stdout[-3000:]
    assert jobs() == before and endpoint() == 'http://node3:30000/v1'

    os.chmod(key_pem, 0o600)
    proc = run_playbook('deploy.yml', dict(tls, glm_smoke_test=True), env['tmp'], timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:]
    now = jobs()
    assert now[SERVE] == before[SERVE] and now[SERVE + '-2'] == before[SERVE + '-2'], (before, now)   # no GPU job restarted
    assert now[ROUTER][0] != before[ROUTER][0] and now[ROUTER][1] == 'RUNNING'
    assert endpoint() == 'https://node3:30000/v1'
    assert 'GLM_TLS_CERT=%s' % cert in ssh('cat ~/%s/endpoint' % WORK)
    out = flat(proc.stdout)
    assert "curl -s --cacert %s -H" % cert in out and 'endpoint https://node3:30000/v1' in out, proc.stdout[-3000:]
    assert 'then https://localhost:30000/v1 with the key' in out and 'trust the router certificate %s' % cert in out
    assert "answer: " in out                                          # the smoke test's curl, over HTTPS
    assert chats(3, cafile=cert) == [200] * 3                          # both replicas behind the HTTPS router
    assert chats(1, key=False, cafile=cert) == [401]
    untrusting = chats(1)                                              # the system's store: the certificate is refused
    assert len(untrusting) == 1 and 'CERTIFICATE_VERIFY_FAILED' in str(untrusting[0]), untrusting
    again = run_playbook('deploy.yml', tls, env['tmp'], timeout=600)
    assert again.returncode == 0 and recap(again)[0] == 0 and jobs() == now, again.stdout[-3000:]
    # status asks the router over HTTPS (the certificate its endpoint file names) and prints the tunnel line with https
    status = run_playbook('status.yml', tls, env['tmp'], timeout=300)
    assert status.returncode == 0, status.stdout[-3000:]
    said = flat(status.stdout)
    assert 'router: job %s RUNNING on node3, policy round_robin, /v1/models ready' % now[ROUTER][0] in said, status.stdout[-3000:]
    assert 'then https://localhost:30000/v1 while it runs (trusting the router certificate %s)' % cert in said
    # fetch_key brings the certificate beside the key (what a laptop's client trusts through the tunnel)
    laptop = os.path.join(env['tmp'], 'laptop')
    os.makedirs(laptop, exist_ok=True)
    fetched = run_playbook('fetch_key.yml', dict(tls, glm_key_dest=os.path.join(laptop, 'api-key')), env['tmp'])
    assert fetched.returncode == 0, fetched.stdout[-3000:]
    with open(os.path.join(laptop, 'router.pem')) as got, open(cert) as made:
        assert got.read() == made.read()
    assert 'https://localhost:30000/v1 through the tunnel, trusting the router certificate in %s/router.pem' % laptop in flat(fetched.stdout)


def models_status(key_file=None, cafile=None, base=None):
    """GET /v1/models through the router (or at BASE, a replica's http://NODE:PORT/v1), from the login node: the HTTP
    status (KEY_FILE on the login node, or none)."""
    code = ('import ssl, sys, urllib.request, urllib.error\n'
            'req = urllib.request.Request(sys.argv[1] + "/models")\n'
            'if sys.argv[2] != "-": req.add_header("Authorization", "Bearer " + open(sys.argv[2]).read().strip())\n'
            'ctx = ssl.create_default_context(cafile=sys.argv[3]) if len(sys.argv) > 3 else None\n'
            'try:\n    print(urllib.request.urlopen(req, timeout=30, context=ctx).status)\n'
            'except urllib.error.HTTPError as e:\n    print(e.code)\n')
    path = os.path.join(login_home(), WORK, 'it-models.py')
    with open(path, 'w') as handle:
        handle.write(code)
    chown_login(path)
    return int(ssh('python3 ~/%s/it-models.py %s %s%s' % (WORK, base or endpoint(), key_file or '-', (' ' + cafile) if cafile else '')))


def test_team_keys_limits_revocation_and_usage_restart_no_job(env):
    """glm_api_keys behind the router's front door (router_proxy=glm, the default; here over the HTTPS of
    the test before): each team's key made on the cluster (0600, not printed), a team over its rpm gets 429 while
    another does not, /v1/models asks for a key, a team taken out of the list is refused at once, and status and
    glm.serve.usage count each team's requests; no job is submitted or restarted for any of it."""
    secrets_seen = {}
    cert = os.path.join(login_home(), WORK, 'tls', 'router.pem')
    tls = variables(router_tls_cert='~/%s/tls/router.pem' % WORK, router_tls_key='~/%s/tls/router-key.pem' % WORK)
    teams = dict(tls, glm_api_keys=[{'name': 'team-a', 'rpm': 2}, {'name': 'team-b', 'max_parallel': 4}])
    before = jobs()
    proc = run_playbook('deploy.yml', teams, env['tmp'], timeout=600, verbosity=3)      # the key audit: at -vvv
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert jobs() == before                                            # no job submitted, none restarted
    out = flat(proc.stdout)
    keys_dir = os.path.join(login_home(), WORK, 'keys')
    assert 'keys: default, team-a, team-b (team keys in %s' % keys_dir in out, proc.stdout[-3000:]
    for team in ('team-a', 'team-b'):
        mode = os.stat(os.path.join(keys_dir, team)).st_mode & 0o777
        secret = ssh('cat ~/%s/keys/%s' % (WORK, team)).strip()
        assert mode == 0o600 and len(secret) == 48 and secret not in proc.stdout + proc.stderr
        assert cmdlines_holding(secret) == []
        secrets_seen[team] = secret
    a, b = '~/%s/keys/team-a' % WORK, '~/%s/keys/team-b' % WORK
    assert models_status(cafile=cert) == 401                            # every route asks for a key through the proxy
    assert models_status('~/%s/api-key' % WORK, cafile=cert) == 200
    assert models_status(b, cafile=cert) == 200
    # team-a: rpm 2, the third request in the minute refused; team-b, beside it, unaffected
    got_a = chats_with(a, 3, cert)
    got_b = chats_with(b, 3, cert)
    assert got_a == [200, 200, 429] and got_b == [200, 200, 200], (got_a, got_b)
    again = run_playbook('deploy.yml', teams, env['tmp'], timeout=600)
    assert again.returncode == 0 and recap(again)[0] == 0 and jobs() == before, again.stdout[-3000:]

    # team-a out of the list: its key refused at once (the proxy reads the registry again), its file removed
    revoke = dict(tls, glm_api_keys=[{'name': 'team-b', 'max_parallel': 4}])
    ssh('cp ~/%s/keys/team-a ~/%s/team-a.copy' % (WORK, WORK))         # what team-a's client holds
    started = time.monotonic()
    proc = run_playbook('deploy.yml', revoke, env['tmp'], timeout=600)
    assert proc.returncode == 0 and 'revoked now: team-a' in flat(proc.stdout), proc.stdout[-3000:]
    assert not os.path.exists(os.path.join(keys_dir, 'team-a')) and jobs() == before
    ssh('cp ~/%s/keys/team-b ~/%s/team-b.copy' % (WORK, WORK))
    assert chats_with('~/%s/team-a.copy' % WORK, 1, cert) == [401]        # refused right after the deploy
    assert chats_with('~/%s/team-b.copy' % WORK, 1, cert) == [200]
    print('\nREPLICAS: team-a revoked by a deploy of %.0f s, no job restarted' % (time.monotonic() - started))

    # the usage the proxy counted (written every 2 s): status shows this month's per team, usage.yml any range
    time.sleep(3)
    status = run_playbook('status.yml', revoke, env['tmp'], timeout=300)
    said = flat(status.stdout)
    assert status.returncode == 0, status.stdout[-3000:]
    assert 'usage this month (UTC): team-a 3 requests (0 errors, 1 refused by its limits)' in said, status.stdout[-3000:]
    assert 'usage this month (UTC): team-b 4 requests (0 errors, 0 refused by its limits)' in said, status.stdout[-3000:]
    day = time.strftime('%Y-%m-%d', time.gmtime())
    asked = dict(revoke, usage_from=day, usage_to=day, glm_usage_json=os.path.join(env['tmp'], 'usage.json'))
    report = run_playbook('usage.yml', asked, env['tmp'], timeout=300)
    assert report.returncode == 0, report.stdout[-3000:]
    with open(os.path.join(env['tmp'], 'usage.json')) as handle:
        doc = json.load(handle)
    assert doc['teams']['team-a']['requests'] == 3 and doc['teams']['team-a']['limited'] == 1, doc
    assert doc['teams']['team-b']['requests'] == 4 and doc['teams']['team-b']['prompt_tokens'] > 0, doc
    # fetch_key hands out a team's key; a team that is not in the list is refused, naming the teams there are
    laptop = os.path.join(env['tmp'], 'laptop-b')
    os.makedirs(laptop, exist_ok=True)
    fetched = run_playbook('fetch_key.yml', dict(revoke, glm_key_team='team-b', glm_key_dest=os.path.join(laptop, 'key')), env['tmp'])
    assert fetched.returncode == 0, fetched.stdout[-3000:]
    with open(os.path.join(laptop, 'key')) as handle:
        assert handle.read().strip() == ssh('cat ~/%s/keys/team-b' % WORK).strip()
    wrong = run_playbook('fetch_key.yml', dict(revoke, glm_key_team='team-a', glm_key_dest=os.path.join(laptop, 'a')), env['tmp'])
    assert wrong.returncode != 0 and 'glm_key_team="team-a" is not a team of glm_api_keys (default, team-b)' in flat(wrong.stdout)
    # the audit, after all of it: each team's key is in its own file (0600) and nowhere else in the work dir (the
    # router job's log with the door's and smg's output, the registry, the usage file, the scripts)
    copies = ('team-a.copy', 'team-b.copy')
    for team, secret in secrets_seen.items():
        hits = files_holding(os.path.join(login_home(), WORK), secret, skip=lambda path: path.endswith(copies))
        assert hits == ([(os.path.join(keys_dir, team), 0o600)] if team == 'team-b' else []), (team, hits)
        assert cmdlines_holding(secret) == []


def test_a_new_replicas_key_starts_every_job_again_and_no_client_key_changes(env):
    """router_replica_key_rotate (issue 37 item 2): a new key for the replicas, which no client holds. Every replica
    and the router job start again with it, at once (smg passes the one key the door gives it to whichever replica it
    picks: replicas of two keys cannot serve side by side); the operator's and the teams' keys work as before; the
    replicas' old key opens nothing on them; a second deploy changes nothing."""
    cert = os.path.join(login_home(), WORK, 'tls', 'router.pem')
    revoke = variables(router_tls_cert='~/%s/tls/router.pem' % WORK, router_tls_key='~/%s/tls/router-key.pem' % WORK,
                       glm_api_keys=[{'name': 'team-b', 'max_parallel': 4}])
    before = jobs()
    old = ssh('cat ~/%s/replica-key' % WORK).strip()
    ssh('cp ~/%s/replica-key ~/%s/replica-key.copy' % (WORK, WORK))
    started = time.monotonic()
    proc = run_playbook('deploy.yml', dict(revoke, router_replica_key_rotate=True), env['tmp'], timeout=600)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-4000:]
    now = jobs()
    assert set(now) == set(before) and all(now[name][0] != before[name][0] for name in before), (before, now)
    new = ssh('cat ~/%s/replica-key' % WORK).strip()
    assert new != old and len(new) == 48 and new not in proc.stdout and old not in proc.stdout
    assert chats_with('~/%s/api-key' % WORK, 2, cert) == [200, 200]
    assert chats_with('~/%s/team-b.copy' % WORK, 2, cert) == [200, 200]
    for node in sorted(jobs_node(name) for name in REPLICAS):
        assert models_status('~/%s/replica-key.copy' % WORK, base='http://%s:30000/v1' % node) == 401
        assert models_status('~/%s/replica-key' % WORK, base='http://%s:30000/v1' % node) == 200
    assert cmdlines_holding(new) == []
    again = run_playbook('deploy.yml', revoke, env['tmp'], timeout=600)
    assert again.returncode == 0 and recap(again)[0] == 0 and jobs() == now, again.stdout[-3000:]
    print('\nREPLICAS: a new replicas\' key in a deploy of %.0f s: the 2 replicas and the router started again' % took)


def chats_with(key_file, count, cafile):
    """Statuses of COUNT chats through the router with the key in KEY_FILE (a path on the login node)."""
    out = ssh('python3 ~/%s/it-client.py %s %s %d %s' % (WORK, endpoint(), key_file, count, cafile), timeout=120)
    return json.loads(out)
