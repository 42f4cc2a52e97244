# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Verify two replicas behind the router on the local cluster, as the login user, over SSH (testinfra's ansible
backend): the jobs and their nodes, the endpoint file naming the router, requests through it with and without the
key, both replicas serving (the router's own counter), and the key on no command line."""

import json
import re

import pytest

CHAT = ("import json, sys, urllib.request, urllib.error\n"
        "base, key = sys.argv[1], open(sys.argv[2]).read().strip() if sys.argv[2] != '-' else None\n"
        "req = urllib.request.Request(base + '/chat/completions', method='POST', data=json.dumps({'model': 'glm-5.3-flash',"
        " 'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 8}).encode(), headers=dict("
        "[('Content-Type', 'application/json')] + ([('Authorization', 'Bearer ' + key)] if key else [])))\n"
        "try:\n    print(urllib.request.urlopen(req, timeout=30).status)\n"
        "except urllib.error.HTTPError as e:\n    print(e.code)\n")


@pytest.fixture(scope="module")
def cfg(host):
    v = host.ansible.get_variables()
    home = host.user().home
    work = v["glm_work_dir"].replace("~", home, 1)
    serve = v["glm_serve_job_name"]
    return {"work": work, "serve": serve, "router": serve + "-router", "replicas": [serve, serve + "-2"],
            "key": work + "/api-key"}


def running(host, name):
    out = host.check_output("squeue --me -h -t R -n %s -o '%%i %%N'" % name)
    rows = [line.split() for line in out.splitlines() if line.strip()]
    assert len(rows) == 1, (name, out)
    return rows[0]


def base_url(host, cfg):
    text = host.file(cfg["work"] + "/endpoint").content_string
    return dict(line.split("=", 1) for line in text.split())["GLM_BASE_URL"]


def chat(host, cfg, key=True):
    script = cfg["work"] + "/molecule-chat.py"
    host.run("cat > %s <<'EOF'\n%sEOF" % (script, CHAT))
    return int(host.check_output("python3 %s %s %s" % (script, base_url(host, cfg), cfg["key"] if key else "-")))


def test_jobs_and_nodes(host, cfg):
    assert running(host, cfg["router"])[1] == "node3"
    assert sorted(running(host, name)[1] for name in cfg["replicas"]) == ["node1", "node2"]


def test_endpoint_file_names_the_router(host, cfg):
    endpoint = host.file(cfg["work"] + "/endpoint")
    assert endpoint.mode == 0o600
    assert base_url(host, cfg) == "http://node3:30000/v1"


def test_requests_through_the_router_need_the_key_and_reach_both_replicas(host, cfg):
    assert [chat(host, cfg) for _request in range(4)] == [200] * 4
    assert chat(host, cfg, key=False) == 401
    metrics = host.check_output("python3 -c \"import urllib.request; print(urllib.request.urlopen('http://node3:29000/metrics').read().decode())\"")
    served = dict(re.findall(r'^smg_worker_cb_outcomes_total\{worker="([^"]+)",outcome="success"\} (\d+)', metrics, re.M))
    assert sorted(served) == ["http://node1:30000", "http://node2:30000"], metrics[-2000:]
    assert all(int(count) >= 2 for count in served.values()), served


def test_router_has_both_replicas_and_the_key_is_on_no_command_line(host, cfg):
    workers = json.loads(host.file(cfg["work"] + "/router-workers.json").content_string)["workers"]
    assert sorted((w["replica"], w["healthy"]) for w in workers) == sorted((name, True) for name in cfg["replicas"])
    key = host.file(cfg["key"]).content_string.strip()
    assert key and key not in host.check_output("ps -eo args")
