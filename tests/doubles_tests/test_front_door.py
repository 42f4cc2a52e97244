# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The router job's launcher with the front door (``--proxy glm``, the role's default router_proxy) in front of the
REAL gateway (smg 1.13, .venv-router) and two SGLang stand-ins: the door binds the router's port in the launcher's
process, the gateway a loopback port behind it; every request is checked on its own (key, route, body), the usage per
team is counted, a stream passes whole, HTTPS is the door's. (The door's bounds and limits, request by request, are
tests/unit/roles/test_glm_front.py.)"""

import http.client as http_client
import json
import os
import re
import pathlib
import signal
import ssl
import subprocess
import sys
import time

import pytest

from door_attack import exchange as raw
from router_helpers import ROUTER_PYTHON, chat, make_certificate, team, write_registry
from standin_helpers import KEY, free_port, http, seed_args, wait_for

TEAM_KEY = "c" * 48

pytestmark = pytest.mark.skipif(not os.access(ROUTER_PYTHON, os.X_OK),
                                reason="no router venv: make .venv-router/.installed (make pytest makes it)")


def fronted(router, tmp_path, teams=None, **kw):
    keys = tmp_path / "gateway-keys.json"
    write_registry(keys, teams or {"default": team(KEY), "team-a": team(TEAM_KEY)})
    extra = ["--proxy", "glm", "--gateway-keys", str(keys), "--usage-file", str(tmp_path / "usage.json")]
    started = time.monotonic()
    r = router(extra=extra + list(kw.pop("extra", ())), **kw)
    wait_for(lambda: r.endpoint.exists() or r.proc.poll() is not None, 60)
    assert r.proc.poll() is None, r.log
    print("\nDOOR: the endpoint written %.1f s after the launcher's start" % (time.monotonic() - started))
    return r


def test_the_door_takes_the_port_and_checks_every_request_before_the_gateway(servers, model_dir, router, tmp_path):
    one, two = [servers(seed_args(model_dir, free_port(), host="127.0.0.1"), GLM_STANDIN_SGLANG_WARMUP="0.5") for _n in range(2)]
    r = fronted(router, tmp_path)
    assert r.endpoint.read_text(encoding="utf-8") == "GLM_BASE_URL=http://127.0.0.1:%d/v1\nGLM_MODEL=glm-5.3-flash\n" % r.port
    behind = re.search(r"starting SGLang Model Gateway on 127\.0\.0\.1:(\d+)", r.log)
    assert behind and int(behind.group(1)) != r.port and "starting the front door on 127.0.0.1:%d" % r.port in r.log
    r.announce("glm-serve", one)
    r.announce("glm-serve-2", two)
    wait_for(lambda: r.workers_file.exists() and sorted((w["replica"], w["healthy"]) for w in json.loads(
        r.workers_file.read_text(encoding="utf-8"))["workers"]) == [("glm-serve", True), ("glm-serve-2", True)], 30)

    assert [chat(r.url)[0] for _n in range(3)] == [200] * 3 and chat(r.url, key=TEAM_KEY)[0] == 200
    assert chat(r.url, key=None)[0] == 401 and chat(r.url, key="wrong")[0] == 401
    # the gateway alone answers /v1/models and /workers to anyone; through the door they ask a key, /workers refused
    assert http("GET", r.url + "/v1/models")[0] == 401 and http("GET", r.url + "/v1/models/")[0] == 401
    assert http("GET", r.url + "/v1/models", key=TEAM_KEY)[0] == 200
    assert http("GET", r.url + "/workers", key=TEAM_KEY)[0] == 403 and http("GET", r.url + "/workers")[0] == 401
    assert http("GET", r.url + "/health_generate", key=TEAM_KEY)[0] == 403
    assert http("POST", r.url + "/models/glm-5.3-flash:generateContent", key=TEAM_KEY, body={})[0] == 403
    assert http("GET", r.url + "/liveness")[0] == 200
    status, body = http("POST", r.url + "/v1/chat/completions", key=TEAM_KEY, body={
        "model": "glm-5.3-flash", "messages": [{"role": "user", "content": "hi"}], "api_base": "http://127.0.0.1:9"})
    assert status == 400 and "api_base" in body
    # one kept-alive connection: a request with the key, then one without: the second is refused
    request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
    data = json.dumps({"model": "glm-5.3-flash", "messages": [{"role": "user", "content": "hi"}]}).encode()
    out = raw(r.port, request % (b"Authorization: Bearer " + TEAM_KEY.encode() + b"\r\n", len(data), data)
              + request % (b"Connection: close\r\n", len(data), data))
    assert re.findall(rb"HTTP/1\.1 (\d+)", out) == [b"200", b"401"], out[:300]
    # a stream passes whole
    status, text = http("POST", r.url + "/v1/chat/completions", key=TEAM_KEY, body={
        "model": "glm-5.3-flash", "messages": [{"role": "user", "content": "hi"}], "stream": True})
    assert status == 200 and text.endswith("data: [DONE]\n\n") and text.count("data: ") >= 4

    wait_for(lambda: (tmp_path / "usage.json").exists() and
             json.loads((tmp_path / "usage.json").read_text()).get("days"), 15)
    r.proc.send_signal(signal.SIGTERM)
    assert r.proc.wait(timeout=40) == 0, r.log
    today = json.loads((tmp_path / "usage.json").read_text())["days"][time.strftime("%Y-%m-%d", time.gmtime())]
    assert today["default"]["requests"] == 3 and today["team-a"]["requests"] == 3, today    # 2 chats, a stream
    assert today["team-a"]["prompt_tokens"] > 0 and today["team-a"]["completion_tokens"] > 0, today
    assert os.stat(tmp_path / "usage.json").st_mode & 0o777 == 0o600
    assert KEY not in r.log and TEAM_KEY not in r.log
    assert not r.workers_file.exists()


def test_https_is_the_doors_and_its_certificate_is_pinned_by_the_launcher(servers, model_dir, router, tmp_path):
    cert, key_pem = make_certificate(tmp_path)
    one = servers(seed_args(model_dir, free_port(), host="127.0.0.1"), GLM_STANDIN_SGLANG_WARMUP="0.5")
    r = fronted(router, tmp_path, tls=(cert, key_pem))
    assert r.endpoint.read_text(encoding="utf-8") == (
        "GLM_BASE_URL=https://127.0.0.1:%d/v1\nGLM_MODEL=glm-5.3-flash\nGLM_TLS_CERT=%s\n" % (r.port, cert))
    r.announce("glm-serve", one)
    wait_for(lambda: r.workers_file.exists() and [w["healthy"] for w in json.loads(
        r.workers_file.read_text(encoding="utf-8"))["workers"]] == [True], 30)
    context = ssl.create_default_context(cafile=str(cert))
    data = json.dumps({"model": "glm-5.3-flash", "messages": [{"role": "user", "content": "hi"}]}).encode()
    out = raw(r.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer %s\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (
                  TEAM_KEY.encode(), len(data), data), context)
    assert out.startswith(b"HTTP/1.1 200 "), out[:200]
    try:
        plain = raw(r.port, b"GET /liveness HTTP/1.1\r\n\r\n")     # plain HTTP on the door's port: no HTTP answer
    except ConnectionError:
        plain = b""
    assert not plain.startswith(b"HTTP/"), plain


def chat_latencies(port, count):
    """Seconds of COUNT chats of team-a, one after the other over one kept-alive connection."""
    conn = http_client.HTTPConnection("127.0.0.1", port, timeout=30)
    data = json.dumps({"model": "glm-5.3-flash", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8})
    took = []
    for _n in range(count):
        started = time.perf_counter()
        conn.request("POST", "/v1/chat/completions", body=data, headers={
            "Authorization": "Bearer " + TEAM_KEY, "Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        assert response.status == 200
        took.append(time.perf_counter() - started)
    conn.close()
    return sorted(took)


def p99(samples):
    return samples[max(0, int(len(samples) * 0.99) - 1)]


def attacker(port):
    """Another user of the cluster, as a process of its own (door_attack.py); attacks until its stdin closes."""
    proc = subprocess.Popen([sys.executable, str(pathlib.Path(__file__).with_name("door_attack.py")), str(port)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "attacking"
    return proc


def test_a_teams_latency_holds_under_a_keyless_flood_slow_heads_and_big_bodies(servers, model_dir, router, tmp_path):
    """Another user floods the door: keyless POSTs (200 a second), 200 connections whose heads trickle a line a
    second, two 4-GB bodies without a key; a team's chats keep their p99 within 2x of the unloaded figure, and the
    router job goes on (no restart)."""
    one = servers(seed_args(model_dir, free_port(), host="127.0.0.1"), GLM_STANDIN_SGLANG_WARMUP="0.5")
    r = fronted(router, tmp_path, extra=["--head-timeout", "15"])
    r.announce("glm-serve", one)
    wait_for(lambda: r.workers_file.exists() and [w["healthy"] for w in json.loads(
        r.workers_file.read_text(encoding="utf-8"))["workers"]] == [True], 30)
    chat_latencies(r.port, 50)                                      # warm
    before = chat_latencies(r.port, 1000)
    attack = attacker(r.port)
    time.sleep(3)
    loaded = chat_latencies(r.port, 1000)
    out, _err = attack.communicate("", timeout=60)
    counts = json.loads(out)
    after = chat_latencies(r.port, 1000)
    quiet = sorted(before + after)                                  # the unloaded figure, measured on both sides
    print("\nDOOR: team-a's chats, p50/p99 %.1f/%.1f ms unloaded (p99 %.1f before, %.1f after), %.1f/%.1f ms under "
          "the attack (%s)" % (quiet[len(quiet) // 2] * 1000, p99(quiet) * 1000, p99(before) * 1000, p99(after) * 1000,
                               loaded[len(loaded) // 2] * 1000, p99(loaded) * 1000, counts))
    assert counts["401"] > 300 and counts["big_refused"] >= 2, counts
    assert p99(loaded) <= 2 * p99(quiet), (p99(quiet), p99(loaded))
    assert r.proc.poll() is None and "the router exited" not in r.log


@pytest.mark.continuity
def test_an_eleven_minute_answer_passes_the_door_and_the_gateway(servers, model_dir, router, tmp_path):
    """A non-streamed answer that takes 11 minutes (the replica decodes for 660 s) reaches its client through the
    door and the gateway: router_request_timeout (1800 s) is the door's and the gateway's one timeout (LiteLLM's
    config cut every request at 600 s). make continuity."""
    one = servers(seed_args(model_dir, free_port(), host="127.0.0.1"), GLM_STANDIN_SGLANG_WARMUP="0.5",
                  GLM_STANDIN_SGLANG_DECODE="660")
    r = fronted(router, tmp_path, router_args=["--request-timeout-secs", "1800"])
    r.announce("glm-serve", one)
    wait_for(lambda: r.workers_file.exists() and [w["healthy"] for w in json.loads(
        r.workers_file.read_text(encoding="utf-8"))["workers"]] == [True], 30)
    started = time.monotonic()
    status, body = http("POST", r.url + "/v1/chat/completions", key=TEAM_KEY, timeout=900, body={
        "model": "glm-5.3-flash", "messages": [{"role": "user", "content": "hi"}]})
    took = time.monotonic() - started
    print("\nDOOR: an answer of %.0f s, status %s" % (took, status))
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"], body[:300]
    assert took >= 660
