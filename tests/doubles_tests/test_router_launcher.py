# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The router job's launcher (roles/router/files/glm_router.py) with the REAL router, SGLang's Model Gateway
(smg 1.13 from the package index, in .venv-router: make .venv-router/.installed), in front of two SGLang
stand-ins on this machine: the key from its file and nowhere else, replicas joining and leaving through their
files, requests reaching both, a clean stop. No Slurm: the cluster tests run the same launcher in a job."""

import json
import os
import re
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from router_helpers import CHAT, LAUNCHER, ROUTER_PYTHON, chat, make_certificate
from standin_helpers import KEY, free_port, http, seed_args, wait_for

pytestmark = pytest.mark.skipif(not os.access(ROUTER_PYTHON, os.X_OK),
                                reason="no router venv: make .venv-router/.installed (make pytest makes it)")


def test_replicas_join_serve_leave_and_the_key_stays_in_its_file(servers, model_dir, router):
    one, two = [servers(seed_args(model_dir, free_port(), host="127.0.0.1"), GLM_STANDIN_SGLANG_WARMUP="0.5") for _server in range(2)]
    r = router()
    wait_for(lambda: r.endpoint.exists() or r.proc.poll() is not None, 30)
    assert r.proc.poll() is None, r.log
    assert r.endpoint.read_text(encoding="utf-8") == "GLM_BASE_URL=http://127.0.0.1:%d/v1\nGLM_MODEL=glm-5.3-flash\n" % r.port
    assert os.stat(r.endpoint).st_mode & 0o777 == 0o600
    status, body = http("GET", r.url + "/readiness")
    assert status == 503, body                                   # no replica yet
    status, body = chat(r.url)
    # no replica yet: smg 1.13 says no worker serves the model (sglang-router 0.3.2 answered 503)
    assert status == 404 and json.loads(body)["error"]["code"] == "model_not_found", body

    r.announce("glm-serve", one)
    r.announce("glm-serve-2", two)
    wait_for(lambda: sorted(w["url"] for w in r.workers().values() if w["is_healthy"]) == sorted([one.url, two.url]), 30)
    assert {w["model_id"] for w in r.workers().values()} == {"glm-5.3-flash"}   # read from each replica's /server_info
    wait_for(lambda: len(json.loads(r.workers_file.read_text(encoding="utf-8"))["workers"]) == 2, 10)
    recorded = json.loads(r.workers_file.read_text(encoding="utf-8"))
    assert sorted((w["url"], w["replica"], w["healthy"]) for w in recorded["workers"]) == sorted(
        [(one.url, "glm-serve", True), (two.url, "glm-serve-2", True)])
    assert os.stat(r.workers_file).st_mode & 0o777 == 0o600 and KEY not in r.workers_file.read_text(encoding="utf-8")
    for _request in range(6):
        status, body = chat(r.url)
        assert status == 200 and json.loads(body)["model"] == "glm-5.3-flash", body
    assert chat(r.url, key=None)[0] == 401 and chat(r.url, key="wrong")[0] == 401
    assert http("GET", r.url + "/workers")[0] == 401              # the admin API wants the key too
    assert r.served() == {one.url: 3, two.url: 3}                # round_robin: both replicas served

    # a replica leaves (its job ends or is scaled away): its worker goes, the other serves everything
    (r.replicas / "glm-serve-2.url").unlink()
    wait_for(lambda: list(r.workers()) == [one.url], 30)
    for _request in range(2):
        assert chat(r.url)[0] == 200
    assert r.served()[one.url] == 5
    # a replica submitted again lands elsewhere: its file names the new address; the old worker is replaced
    r.announce("glm-serve", two)
    wait_for(lambda: list(r.workers()) == [two.url], 30)
    assert chat(r.url)[0] == 200

    # the key: in its file only; not on any command line, not in the log
    launcher_cmd = open("/proc/%d/cmdline" % r.proc.pid, "rb").read().decode()
    children = subprocess.run(["pgrep", "-P", str(r.proc.pid)], stdout=subprocess.PIPE, text=True, check=False).stdout.split()
    assert children, "the router runs in a child of the launcher"
    for pid in [r.proc.pid] + [int(c) for c in children]:
        assert KEY not in open("/proc/%d/cmdline" % pid, "rb").read().decode(), pid
    assert "--key-file" in launcher_cmd
    log = r.log
    assert KEY not in log
    assert "adding replica glm-serve at %s" % one.url in log and "removing worker %s" % two.url in log
    assert "listening: http://127.0.0.1:%d/v1" % r.port in log

    started = time.monotonic()
    r.stop()
    assert r.proc.returncode == 0, r.log[-2000:]
    assert time.monotonic() - started < 15
    assert all(not os.path.exists("/proc/%s" % c) or "zombie" in open("/proc/%s/status" % c).read().lower() for c in children)


def test_a_replica_that_does_not_answer_yet_is_added_when_it_does(servers, model_dir, router):
    r = router()
    wait_for(lambda: r.endpoint.exists() or r.proc.poll() is not None, 30)
    port = free_port()
    (r.replicas / "glm-serve.url").write_text("http://127.0.0.1:%d\n" % port, encoding="utf-8")
    time.sleep(2)
    assert r.workers() == {}                                    # nothing listens there yet: not registered
    server = servers(seed_args(model_dir, port, host="127.0.0.1"), GLM_STANDIN_SGLANG_LOAD="1", GLM_STANDIN_SGLANG_WARMUP="1")
    wait_for(lambda: list(r.workers()) == [server.url], 30)
    assert chat(r.url)[0] == 200
    assert "replica glm-serve at %s does not answer /health yet (no answer)" % server.url in r.log


def running(server):
    """sglang:num_running_reqs of a stand-in, from its /metrics."""
    text = urllib.request.urlopen(server.url + "/metrics", timeout=5).read().decode()
    return int(sum(float(n) for n in re.findall(r"^sglang:num_running_reqs(?:\{[^}]*\})? (\S+)$", text, re.M)))


def test_a_replica_taken_out_is_drained_before_it_counts_as_out(servers, model_dir, router):
    """A scale-down removes a replica's file: its worker leaves the router at once, but the workers file names it,
    draining, until the requests it is running are answered (its /metrics), so the deploy cancels it only then."""
    fast = servers(seed_args(model_dir, free_port(), host="127.0.0.1"), GLM_STANDIN_SGLANG_WARMUP="0.5")
    slow = servers(seed_args(model_dir, free_port(), host="127.0.0.1") + ["--enable-metrics"],
                   GLM_STANDIN_SGLANG_WARMUP="0.5", GLM_STANDIN_SGLANG_DECODE="6")
    r = router()
    wait_for(lambda: r.endpoint.exists() or r.proc.poll() is not None, 30)
    r.announce("glm-serve", fast)
    r.announce("glm-serve-2", slow)
    wait_for(lambda: sorted(w["url"] for w in r.workers().values() if w["is_healthy"]) == sorted([fast.url, slow.url]), 30)

    def recorded():
        return {w["replica"]: w for w in json.loads(r.workers_file.read_text(encoding="utf-8"))["workers"]}
    # two requests at once: round_robin gives one to each; the slow replica's runs 6 s
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        http("POST", r.url + "/v1/chat/completions", key=KEY, body=CHAT, timeout=30)[0])) for _request in range(2)]
    for thread in threads:
        thread.start()
    wait_for(lambda: running(slow) == 1, 10)
    taken_out = time.monotonic()
    (r.replicas / "glm-serve-2.url").unlink()
    wait_for(lambda: slow.url not in r.workers(), 10)                  # out of the router at once: no new request
    wait_for(lambda: recorded().get("glm-serve-2", {}).get("draining"), 5)   # but not drained: it still runs one
    assert running(slow) == 1, r.log
    for _request in range(2):
        assert chat(r.url)[0] == 200                                    # new requests go to the other one
    try:
        wait_for(lambda: "glm-serve-2" not in recorded(), 15)
    except AssertionError:
        raise AssertionError("still named: %s\n%s" % (recorded(), "\n".join(
            line for line in r.log.splitlines() if "glm.serve" in line or "DELETE" in line or "POST" in line or "worker" in line.lower())[-4000:]))
    drained_after = time.monotonic() - taken_out
    for thread in threads:
        thread.join(15)
    assert results == [200, 200], results                               # the request in flight was answered
    assert 2.0 < drained_after < 12.0, drained_after                    # named until its request ended, no longer
    assert recorded()["glm-serve"]["draining"] is False
    assert "replica glm-serve-2 at %s is out of the router" % slow.url in r.log


def test_a_replicas_successor_takes_its_place_with_no_request_failing(servers, model_dir, router):
    """server_successors_until: the replica's file names its successor's address (the same replica name). The old
    worker stays until the new one is healthy in the router (SWAP_HOLD), then goes: requests sent all along, one every
    50 ms, are all answered, and the new replica serves the ones after."""
    old = servers(seed_args(model_dir, free_port(), host="127.0.0.1"), GLM_STANDIN_SGLANG_WARMUP="0.5")
    new = servers(seed_args(model_dir, free_port(), host="127.0.0.1"), GLM_STANDIN_SGLANG_WARMUP="0.5")
    r = router()
    wait_for(lambda: r.endpoint.exists() or r.proc.poll() is not None, 30)
    r.announce("glm-serve", old)
    wait_for(lambda: [w["url"] for w in r.workers().values() if w["is_healthy"]] == [old.url], 30)
    statuses, stop = [], threading.Event()

    def send():
        while not stop.is_set():
            statuses.append(chat(r.url)[0])
            time.sleep(0.05)
    thread = threading.Thread(target=send)
    thread.start()
    try:
        time.sleep(1)
        r.announce("glm-serve", new)                                    # the successor passed its gate
        wait_for(lambda: list(r.workers()) == [new.url], 30)
        time.sleep(1)
    finally:
        stop.set()
        thread.join(30)
    assert statuses and set(statuses) == {200}, sorted(set(statuses))
    assert "replica glm-serve moves from %s to %s: the old worker stays until the new one is healthy" % (old.url, new.url) in r.log
    assert r.served().get(new.url, 0) > 0


def moved_free(offset):
    """A free port of 127.0.0.1 whose port + OFFSET is free as well (a router successor on the same node moves there)."""
    for _try in range(50):
        port = free_port()
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + offset))
            except OSError:
                continue
        return port
    raise AssertionError("no free port with port + %d free" % offset)


def endpoint_of(path):
    """The endpoint file as a client on the cluster reads it (each request): its VAR=VALUE lines."""
    return dict(line.split("=", 1) for line in path.read_text(encoding="utf-8").split())


def test_a_routers_successor_takes_the_endpoint_and_the_old_one_finishes_its_requests(servers, model_dir, router, tmp_path):
    """router_successors_until: the router job's successor (GLM_SUCCESSOR_OF; on the same node, so its port is taken:
    it moves its ports by --port-offset) answers, gets every replica healthy in its own gateway, then takes the
    endpoint file (GLM_ROUTER_JOB names it). The old router sees that, records the handover, and two rounds later
    stops its gateway as scancel would (SIGTERM: smg stops accepting and finishes the requests it has, each 6 s here:
    SGLang's /health waits for an output of a busy replica, so the successor finds them healthy once the first
    requests ended, and the next ones are on the old router when the endpoint moves; with 14-s requests it stopped
    9 s after the SIGTERM, every request answered), and exits 0. Clients that read the endpoint file for each request, three at a time all
    along: every request answered."""
    one, two = [servers(seed_args(model_dir, free_port(), host="127.0.0.1"), GLM_STANDIN_SGLANG_WARMUP="0.5",
                        GLM_STANDIN_SGLANG_DECODE="6") for _server in range(2)]
    port, metrics_port = moved_free(7), moved_free(7)     # the successor's ports (moved by 7) free too
    handovers = tmp_path / "handovers.log"
    ours = ["--port-offset", "7", "--takeover-timeout", "30", "--handovers-file", str(handovers), "--drain-timeout", "30"]
    job = {"SLURM_JOB_NAME": "glm-serve-router"}
    theirs = ["--health-check-timeout-secs", "25"]                      # the role's router_health_check_timeout
    old = router(extra=ours, port=port, metrics_port=metrics_port, env=dict(job, SLURM_JOB_ID="101"), router_args=theirs)
    wait_for(lambda: old.endpoint.exists() or old.proc.poll() is not None, 30)
    assert endpoint_of(old.endpoint)["GLM_ROUTER_JOB"] == "101", old.log
    old.announce("glm-serve", one)
    old.announce("glm-serve-2", two)
    wait_for(lambda: len([w for w in old.workers().values() if w["is_healthy"]]) == 2, 30)
    statuses, stop = [], threading.Event()

    def send():
        while not stop.is_set():
            statuses.append(http("POST", endpoint_of(old.endpoint)["GLM_BASE_URL"] + "/chat/completions", key=KEY,
                                 body=CHAT, timeout=30)[0])
    clients = [threading.Thread(target=send) for _client in range(3)]
    for client in clients:
        client.start()
    try:
        time.sleep(1)                                                   # requests in flight on the old router
        new = router(extra=ours, port=port, metrics_port=metrics_port, name="router-2", router_args=theirs,
                     env=dict(job, SLURM_JOB_ID="102", GLM_SUCCESSOR_OF="101"))
        wait_for(lambda: endpoint_of(old.endpoint).get("GLM_ROUTER_JOB") == "102" or new.proc.poll() is not None, 60)
        took_over = time.monotonic()
        assert old.proc.wait(60) == 0, old.log                          # it finished its requests, then ended
        ended_after = time.monotonic() - took_over
    finally:
        stop.set()
        for client in clients:
            client.join(40)
    assert statuses and set(statuses) == {200}, (sorted(set(statuses)), old.log[-3000:], new.log[-3000:])
    print("\nROUTER HANDOVER: %d requests all 200, the old router ended %.1f s after the endpoint moved" % (
        len(statuses), ended_after))
    moved = "http://127.0.0.1:%d/v1" % (port + 7)
    assert endpoint_of(old.endpoint)["GLM_BASE_URL"] == moved, new.log
    assert "port %d of this node is taken" % port in new.log and "takes port %d" % (port + 7) in new.log
    assert "listening: %s (written to %s): taken over from job 101" % (moved, old.endpoint) in new.log
    assert "job 102 has taken over the endpoint" in old.log and "handed over to job 102" in old.log
    assert 1.5 < ended_after < 30, (ended_after, old.log[-2000:])         # after its requests, not at --drain-timeout
    line = handovers.read_text(encoding="utf-8").split()
    assert line[1:4] == ["glm-serve-router", "101", "102"] and line[5] == "0", line
    assert json.loads(old.workers_file.read_text(encoding="utf-8"))["job_id"] == "102"   # the new one's, not removed
    assert new.proc.poll() is None
    assert http("POST", "http://127.0.0.1:%d/v1/chat/completions" % (port + 7), key=KEY, body=CHAT, timeout=30)[0] == 200
    assert chat(old.url)[0] is None                                     # the old port is closed


@pytest.mark.parametrize("case, message", [
    ("argv", "give the key in --key-file, not --api-key"),
    ("empty", "no API key in"),
    ("missing", "cannot read the API key file"),
])
def test_refuses_a_key_on_argv_or_no_key(router, tmp_path, case, message):
    if case == "argv":
        key_file = tmp_path / "api-key"
        key_file.write_text(KEY + "\n", encoding="utf-8")
        proc = subprocess.run([ROUTER_PYTHON, LAUNCHER, "--key-file", str(key_file), "--replicas-dir", str(tmp_path),
                               "--endpoint-file", str(tmp_path / "endpoint"), "--", "--api-key", "x"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60, check=False)
        out = proc.stdout
    else:
        r = router(key="" if case == "empty" else None)
        r.proc.wait(timeout=60)
        proc, out = r.proc, r.log
    assert proc.returncode not in (0, None) and message in out, out


def test_https_with_a_certificate_made_now_and_the_openai_client(servers, model_dir, router, tmp_path):
    """router_tls_cert/router_tls_key (issue 24, section 5): the gateway's --tls-cert-path/--tls-key-path, the endpoint
    file names https and the certificate, the launcher's own calls (liveness, workers) trust that certificate, and the
    official openai client works through it with the key; a client that does not trust it, or plain HTTP, gets nothing."""
    openai = pytest.importorskip("openai")
    cert, key_pem = make_certificate(tmp_path)
    one = servers(seed_args(model_dir, free_port(), host="127.0.0.1"), GLM_STANDIN_SGLANG_WARMUP="0.5")
    r = router(tls=(cert, key_pem))
    wait_for(lambda: r.endpoint.exists() or r.proc.poll() is not None, 30)
    assert r.proc.poll() is None, r.log
    assert r.endpoint.read_text(encoding="utf-8") == (
        "GLM_BASE_URL=https://127.0.0.1:%d/v1\nGLM_MODEL=glm-5.3-flash\nGLM_TLS_CERT=%s\n" % (r.port, cert))
    r.announce("glm-serve", one)
    # the launcher added the replica: its calls to the router's admin API went over HTTPS to the pinned certificate
    wait_for(lambda: r.workers_file.exists() and [w["healthy"] for w in json.loads(
        r.workers_file.read_text(encoding="utf-8"))["workers"]] == [True], 30)

    trusting = openai.DefaultHttpxClient(verify=ssl.create_default_context(cafile=str(cert)))
    client = openai.OpenAI(base_url=r.url + "/v1", api_key=KEY, max_retries=0, timeout=30, http_client=trusting)
    assert "glm-5.3-flash" in [m.id for m in client.models.list()]
    reply = client.chat.completions.create(model="glm-5.3-flash", messages=[{"role": "user", "content": "Hello"}], max_tokens=16)
    assert reply.choices[0].message.content
    chunks = list(client.chat.completions.create(model="glm-5.3-flash", stream=True, max_tokens=16,
                                                 messages=[{"role": "user", "content": "Hello"}]))
    assert len(chunks) > 1
    wrong = openai.OpenAI(base_url=r.url + "/v1", api_key="not-the-key", max_retries=0, timeout=30, http_client=trusting)
    with pytest.raises(openai.AuthenticationError):
        wrong.chat.completions.create(model="glm-5.3-flash", messages=[{"role": "user", "content": "Hello"}], max_tokens=16)
    # a client without the certificate (the system's trust store) refuses the connection: nothing is sent
    untrusting = openai.OpenAI(base_url=r.url + "/v1", api_key=KEY, max_retries=0, timeout=30)
    with pytest.raises(openai.APIConnectionError):
        untrusting.models.list()
    # plain HTTP on the port gets no answer
    with pytest.raises(Exception) as plain:
        urllib.request.urlopen("http://127.0.0.1:%d/liveness" % r.port, timeout=5).read()
    assert not isinstance(plain.value, urllib.error.HTTPError), plain.value
    log = r.log
    assert "listening: https://127.0.0.1:%d/v1" % r.port in log and "(HTTPS, certificate %s)" % cert in log
    assert KEY not in log


def test_a_certificate_file_that_holds_none_ends_the_job_with_its_name(router, tmp_path):
    cert, key_pem = tmp_path / "not-a-cert.pem", tmp_path / "key.pem"
    cert.write_text("not a certificate\n", encoding="utf-8")
    key_pem.write_text("not a key\n", encoding="utf-8")
    r = router(tls=(cert, key_pem))
    assert r.proc.wait(timeout=30) != 0
    assert "cannot use the TLS certificate %s" % cert in r.log, r.log
