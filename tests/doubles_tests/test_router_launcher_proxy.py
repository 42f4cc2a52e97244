# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The router job's launcher with LiteLLM's proxy in front of the gateway (``--proxy litellm``, the role's default
router_proxy): the REAL proxy (litellm[proxy] 1.108.7) and the REAL gateway (smg 1.13), both from .venv-router, in
front of two SGLang stand-ins. The proxy takes the router's port (and its certificate), the gateway a loopback port
behind it; the launcher keeps the replicas in step through that port; every route but health asks for a key of the
registry; the usage per team is counted; either child ending ends the job. (The proxy itself, its routes, limits and
usage: test_gateway_proxy.py.)"""

import hashlib
import json
import os
import re
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from router_helpers import ROUTER_PYTHON, chat, make_certificate, team, write_registry
from standin_helpers import KEY, free_port, http, seed_args, wait_for

TEAM_KEY = "b" * 48

pytestmark = pytest.mark.skipif(
    not os.access(ROUTER_PYTHON, os.X_OK) or subprocess.run([ROUTER_PYTHON, "-c", "import litellm.proxy"],
                                                            capture_output=True, check=False).returncode != 0,
    reason="no router venv with LiteLLM's proxy: make .venv-router/.installed (make pytest makes it)")


def proxied(router, tmp_path, **kw):
    keys = tmp_path / "gateway-keys.json"
    write_registry(keys, {"default": team(KEY), "team-a": team(TEAM_KEY)})
    metrics = free_port()
    extra = ["--proxy", "litellm", "--gateway-keys", str(keys), "--usage-file", str(tmp_path / "usage.json"),
             "--gateway-config", str(tmp_path / "gateway-config.json"), "--proxy-metrics-port", str(metrics)]
    started = time.monotonic()
    r = router(extra=extra, **kw)
    r.proxy_metrics = "http://127.0.0.1:%d/metrics" % metrics
    wait_for(lambda: r.endpoint.exists() or r.proc.poll() is not None, 90)
    assert r.proc.poll() is None, r.log
    print("\nPROXY: the router job's endpoint written %.1f s after its start (LiteLLM's proxy answering)" % (time.monotonic() - started))
    return r


def children(pid):
    """The pids of PID's child processes (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry, encoding="utf-8") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_the_proxy_takes_the_port_the_gateway_the_loopback_and_every_route_asks_a_key(servers, model_dir, router, tmp_path,
                                                                                      monkeypatch):
    one, two = [servers(seed_args(model_dir, free_port(), host="127.0.0.1"), GLM_STANDIN_SGLANG_WARMUP="0.5") for _server in range(2)]
    # a site's HTTP proxy in the job's environment (a login node's): neither the proxy nor the gateway may send the
    # key through it (port 9: nothing listens; a request sent there fails)
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    r = proxied(router, tmp_path)
    monkeypatch.undo()
    assert r.endpoint.read_text(encoding="utf-8") == "GLM_BASE_URL=http://127.0.0.1:%d/v1\nGLM_MODEL=glm-5.3-flash\n" % r.port
    behind = re.search(r"starting SGLang Model Gateway on 127\.0\.0\.1:(\d+)", r.log)
    assert behind and int(behind.group(1)) != r.port, r.log
    assert "starting LiteLLM's proxy on 127.0.0.1:%d" % r.port in r.log
    r.announce("glm-serve", one)
    r.announce("glm-serve-2", two)
    # the launcher added both through the gateway's loopback port (its workers file says what the gateway has)
    wait_for(lambda: r.workers_file.exists() and sorted((w["replica"], w["healthy"]) for w in json.loads(
        r.workers_file.read_text(encoding="utf-8"))["workers"]) == [("glm-serve", True), ("glm-serve-2", True)], 30)

    for _request in range(4):
        status, body = chat(r.url)
        assert status == 200 and json.loads(body)["choices"][0]["message"]["content"], body
    assert chat(r.url, key=TEAM_KEY)[0] == 200
    assert chat(r.url, key=None)[0] == 401 and chat(r.url, key="wrong")[0] == 401
    # /v1/models: the gateway alone answers it to anyone; through the proxy it asks for a key
    assert http("GET", r.url + "/v1/models")[0] == 401 and http("GET", r.url + "/v1/models", key="wrong")[0] == 401
    status, body = http("GET", r.url + "/v1/models", key=TEAM_KEY)
    assert status == 200 and [m["id"] for m in json.loads(body)["data"]] == ["glm-5.3-flash"], body
    assert http("GET", "http://127.0.0.1:%s/v1/models" % behind.group(1))[0] == 200     # (the gateway's own answer)
    assert http("GET", r.url + "/health/liveliness")[0] == 200
    assert r.served() == {one.url: 3, two.url: 2} or sorted(r.served().values()) == [2, 3]   # round_robin behind the proxy

    # the usage per team (the proxy writes it every 2 s)
    wait_for(lambda: (tmp_path / "usage.json").exists() and
             sum(t["requests"] for d in json.loads((tmp_path / "usage.json").read_text())["days"].values() for t in d.values()) >= 5, 15)
    days = json.loads((tmp_path / "usage.json").read_text())["days"]
    today = days[time.strftime("%Y-%m-%d", time.gmtime())]
    assert today["default"]["requests"] == 4 and today["team-a"]["requests"] == 1, days
    assert today["team-a"]["prompt_tokens"] > 0 and today["team-a"]["completion_tokens"] > 0, days
    assert os.stat(tmp_path / "usage.json").st_mode & 0o777 == 0o600
    # the same per team in the proxy's Prometheus metrics (its own port, no key; LiteLLM's prometheus callback)
    text = urllib.request.urlopen(r.proxy_metrics, timeout=10).read().decode()
    per_team = {team: float(n) for team, n in re.findall(r'^litellm_requests_metric_total\{[^}]*\bteam="([^"]+)"[^}]*\} (\S+)', text, re.M)}
    assert per_team == {"default": 4.0, "team-a": 1.0}, per_team
    assert KEY not in text and TEAM_KEY not in text and hashlib.sha256(TEAM_KEY.encode()).hexdigest() not in text

    # the key: in no command line of the job's processes, in no file but its own, not in the log
    pids = [r.proc.pid] + children(r.proc.pid)
    assert len(pids) >= 3, pids                                   # the launcher, the gateway, the proxy
    assert [p for p in pids if KEY in cmdline(p) or TEAM_KEY in cmdline(p)] == []
    config = (tmp_path / "gateway-config.json").read_text(encoding="utf-8")
    assert KEY not in config and TEAM_KEY not in config and os.stat(tmp_path / "gateway-config.json").st_mode & 0o777 == 0o600
    assert KEY not in r.log and TEAM_KEY not in r.log

    # SIGTERM (scancel, the time limit): both children go, the job ends with 0, the workers file is removed
    r.proc.send_signal(signal.SIGTERM)
    assert r.proc.wait(timeout=40) == 0, r.log
    assert [p for p in pids[1:] if os.path.exists("/proc/%d" % p) and "zombie" not in open("/proc/%d/status" % p).read().lower()] == []
    assert not r.workers_file.exists()


def test_https_is_the_proxys_and_a_dead_proxy_ends_the_job(servers, model_dir, router, tmp_path):
    cert, key_pem = make_certificate(tmp_path)
    one = servers(seed_args(model_dir, free_port(), host="127.0.0.1"), GLM_STANDIN_SGLANG_WARMUP="0.5")
    r = proxied(router, tmp_path, tls=(cert, key_pem))
    assert r.endpoint.read_text(encoding="utf-8") == (
        "GLM_BASE_URL=https://127.0.0.1:%d/v1\nGLM_MODEL=glm-5.3-flash\nGLM_TLS_CERT=%s\n" % (r.port, cert))
    r.announce("glm-serve", one)
    wait_for(lambda: r.workers_file.exists() and [w["healthy"] for w in json.loads(
        r.workers_file.read_text(encoding="utf-8"))["workers"]] == [True], 30)
    trusting = ssl.create_default_context(cafile=str(cert))
    request = urllib.request.Request(r.url + "/v1/chat/completions", method="POST", data=json.dumps(
        {"model": "glm-5.3-flash", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}).encode(),
        headers={"Authorization": "Bearer " + TEAM_KEY, "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30, context=trusting) as response:
        assert response.status == 200 and json.loads(response.read())["choices"]
    with pytest.raises(urllib.error.URLError):                   # the system's store does not trust it
        urllib.request.urlopen(r.url + "/health/liveliness", timeout=10)
    assert "(HTTPS, certificate %s)" % cert in r.log

    # the proxy dies (OOM, a crash): the launcher stops the gateway and the job ends, not a router without its door
    proxy = [p for p in children(r.proc.pid) if "glm_gateway.py" in cmdline(p)]
    assert len(proxy) == 1, [cmdline(p) for p in children(r.proc.pid)]
    os.kill(proxy[0], signal.SIGKILL)
    assert r.proc.wait(timeout=40) != 0, r.log
    assert "LiteLLM's proxy exited" in r.log and not r.workers_file.exists()
