# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Scale to zero in the router job's launcher (roles/router/files/glm_router.py --scale-config --hold): the hold
(glm_hold.py) on the router's port, the REAL router (smg 1.13, .venv-router) on a loopback port behind it, an SGLang
stand-in as the replica the autoscaler starts. No Slurm: ``sbatch`` and ``squeue`` are small scripts on PATH that
record their arguments (the cluster test, tests/integration/test_scale_zero.py, runs the real ones); the test plays
the replica's job (it starts the stand-in and writes its address file once sbatch was called)."""

import json
import os
import ssl
import threading
import time
import urllib.request

import pytest

from router_helpers import CHAT, ROUTER_PYTHON, make_certificate
from standin_helpers import KEY, free_port, http, seed_args, wait_for

pytestmark = pytest.mark.skipif(not os.access(ROUTER_PYTHON, os.X_OK),
                                reason="no router venv: make .venv-router/.installed (make pytest makes it)")

FAKE_SBATCH = """#!/bin/sh
printf '%s\\n' "$*" >> "{calls}"
echo 4242
"""
FAKE_SQUEUE = """#!/bin/sh
printf 'squeue %s\\n' "$*" >> "{calls}"
"""


def scale_setup(tmp_path, hold=60):
    """The autoscaler's settings (least 0, most 1) and the fake Slurm commands; (launcher's extra args, env, calls)."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "slurm-calls"
    bin_dir.mkdir()
    for name, text in (("sbatch", FAKE_SBATCH), ("squeue", FAKE_SQUEUE)):
        (bin_dir / name).write_text(text.format(calls=calls), encoding="utf-8")
        os.chmod(bin_dir / name, 0o755)
    (tmp_path / "serve.sbatch").write_text("#!/bin/sh\n", encoding="utf-8")
    cfg = tmp_path / "scale.json"
    cfg.write_text(json.dumps({
        "least": 0, "most": 1, "target": 8, "up_after": 60, "down_after": 900, "cooldown": 120, "coming_timeout": 3600,
        "script": str(tmp_path / "serve.sbatch"), "sbatch_args": [], "bad_nodes_file": "", "bad_node_ttl": 1,
        "umask": "0077", "replicas": [["glm-serve", "glm.serve:glm:replica:1"]], "log": str(tmp_path / "scale.log"),
        "service_end": str(tmp_path / "service-end"), "hold": hold}), encoding="utf-8")
    env = {"PATH": "%s:%s" % (bin_dir, os.environ["PATH"])}
    return ["--scale-config", str(cfg), "--hold"], env, calls


def test_a_request_at_zero_starts_the_first_replica_and_waits_for_it(servers, model_dir, router, tmp_path, tls=True):
    """Over HTTPS (the hold serves the certificate, the gateway plain HTTP on the loopback behind it): the plain-HTTP
    path is the cluster test's (make continuity) and the hold's unit tests'; one launcher start less in make test."""
    extra, env, calls = scale_setup(tmp_path)
    cert = make_certificate(tmp_path) if tls else None
    r = router(extra=extra, env=env, tls=cert)
    wait_for(lambda: r.endpoint.exists() or r.proc.poll() is not None, 30)
    assert r.proc.poll() is None, r.log
    context = ssl.create_default_context(cafile=str(cert[0])) if tls else None

    def call(method, path, key=KEY, body=None, timeout=10):
        request = urllib.request.Request(r.url + path, data=json.dumps(body).encode() if body else None, method=method)
        if key:
            request.add_header("Authorization", "Bearer " + key)
        if body:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
    # at zero: the hold lists the model for the key, and nothing wakes the service but a request for work
    status, body = call("GET", "/v1/models")
    assert status == 200 and json.loads(body)["data"][0]["id"] == "glm-5.3-flash", body
    assert call("GET", "/v1/models", key="wrong")[0] == 401
    assert call("GET", "/liveness")[0] == 200                       # the gateway's, through the hold
    wait_for(lambda: "zero: no replica serves" in (tmp_path / "scale.log").read_text(encoding="utf-8")
             if (tmp_path / "scale.log").exists() else False, 10)
    assert not calls.exists() or "--job-name" not in calls.read_text(encoding="utf-8")

    answers = []
    since = time.monotonic()
    thread = threading.Thread(target=lambda: answers.append(call("POST", "/v1/chat/completions", body=CHAT, timeout=60)))
    thread.start()
    wait_for(lambda: calls.exists() and "--job-name=glm-serve" in calls.read_text(encoding="utf-8"), 10)
    woke = time.monotonic() - since
    assert woke < 3, woke                                          # at once, not after a round or a window
    assert "--comment=glm.serve:glm:replica:1" in calls.read_text(encoding="utf-8")
    time.sleep(1)
    assert not answers                                             # held while the replica "loads"
    server = servers(seed_args(model_dir, free_port(), host="127.0.0.1"), GLM_STANDIN_SGLANG_WARMUP="0.5")
    server.wait_ready()
    (r.replicas / "glm-serve.url").write_text("%s\n4242\n%d\n" % (server.url, time.time()), encoding="utf-8")
    thread.join(30)
    assert answers and answers[0][0] == 200, (answers, r.log[-3000:])
    assert json.loads(answers[0][1])["model"] == "glm-5.3-flash"
    log = r.log
    assert "a request came while no replica serves: it waits (at most 60 s)" in log
    assert "a replica serves: the 1 request(s) held go on" in log
    assert "scale up: glm-serve submitted as job 4242 (1 request(s) came while no replica serves" in log
    assert KEY not in log
    # once it serves, requests pass through the hold to the router at once
    for _request in range(3):
        assert call("POST", "/v1/chat/completions", body=CHAT)[0] == 200
    assert call("POST", "/v1/chat/completions", key="wrong", body=CHAT)[0] == 401   # the gateway's, behind the hold


def test_past_the_bound_a_held_request_gets_503_with_retry_after(router, tmp_path):
    extra, env, _calls = scale_setup(tmp_path, hold=2)
    r = router(extra=extra, env=env)
    wait_for(lambda: r.endpoint.exists() or r.proc.poll() is not None, 30)
    since = time.monotonic()
    request = urllib.request.Request(r.url + "/v1/chat/completions", data=json.dumps(CHAT).encode(), method="POST",
                                     headers={"Authorization": "Bearer " + KEY, "Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=30)
    waited = time.monotonic() - since
    assert raised.value.code == 503 and raised.value.headers["Retry-After"] == "30"
    assert json.loads(raised.value.read().decode())["error"]["code"] == "scaled_to_zero"
    assert 1.8 < waited < 6, waited
    assert http("GET", r.url + "/liveness")[0] == 200
