# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Helpers for the tests that run the router job's launcher (roles/router/files/glm_router.py) with the REAL router
(smg in .venv-router, or GLM_ROUTER_PYTHON) in front of SGLang stand-ins: the launcher in a subprocess
(Router), a chat request through it, and the key registry of the proxy in front (write_registry, team)."""

import hashlib
import json
import os
import re
import signal
import subprocess
import urllib.request

from standin_helpers import KEY, REPO, free_port, http

LAUNCHER = os.path.join(REPO, "roles", "router", "files", "glm_router.py")
ROUTER_PYTHON = os.environ.get("GLM_ROUTER_PYTHON") or os.path.join(REPO, ".venv-router", "bin", "python")
CHAT = {"model": "glm-5.3-flash", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


class Router:
    """glm_router.py in a subprocess, its files and the router's URLs."""

    def __init__(self, tmp_path, extra=(), key=KEY, policy="round_robin", router_args=(), tls=None, name="router", port=None,
                 metrics_port=None, env=None):
        self.key_file = tmp_path / "api-key"
        if key is not None:
            self.key_file.write_text(key + "\n", encoding="utf-8")
            os.chmod(self.key_file, 0o600)
        self.replicas = tmp_path / "replicas"
        self.replicas.mkdir(exist_ok=True)
        self.endpoint = tmp_path / "endpoint"
        self.workers_file = tmp_path / "router-workers.json"
        self.port, self.metrics_port = port or free_port(), metrics_port or free_port()
        self.url = "%s://127.0.0.1:%d" % ("https" if tls else "http", self.port)
        self.log_path = tmp_path / (name + ".log")
        ours = ["--key-file", str(self.key_file), "--replicas-dir", str(self.replicas), "--endpoint-file", str(self.endpoint),
                "--workers-file", str(self.workers_file), "--sync-interval", "0.5", "--advertise", "127.0.0.1"] + list(extra)
        theirs = ["--host", "127.0.0.1", "--port", str(self.port), "--policy", policy,
                  "--prometheus-port", str(self.metrics_port), "--health-check-interval-secs", "2"] + list(router_args)
        if tls:   # (certificate, key): HTTPS on the router's port, the gateway's own flags
            theirs += ["--tls-cert-path", str(tls[0]), "--tls-key-path", str(tls[1])]
        argv = [ROUTER_PYTHON, LAUNCHER] + ours + ["--"] + theirs
        with open(self.log_path, "w", encoding="utf-8") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, **(env or {})))

    @property
    def log(self):
        return re.sub(r"\x1b\[[0-9;]*m", "", self.log_path.read_text(encoding="utf-8"))

    def workers(self):
        status, body = http("GET", self.url + "/workers", key=KEY)
        assert status == 200, (status, body)
        return {w["url"]: w for w in json.loads(body)["workers"]}

    def served(self):
        """Requests the router passed to each worker (its own metric, per worker URL)."""
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port, timeout=5).read().decode()
        found = re.findall(r'^smg_worker_cb_outcomes_total\{worker="([^"]+)",outcome="success"\} (\d+)', text, re.M)
        return {url: int(count) for url, count in found}

    def announce(self, name, server):
        path = self.replicas / (name + ".url")
        path.write_text(server.url + "\n", encoding="utf-8")
        return path

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def write_registry(path, teams, version=1):
    """The proxy's key registry as glm.serve.team_keys writes it: atomically (a temporary file renamed over it), mode
    0600; TEAMS: {name: team(...)}."""
    temp = "%s.tmp" % path
    with open(temp, "w", encoding="utf-8") as handle:
        json.dump({"version": version, "teams": teams}, handle)
    os.chmod(temp, 0o600)
    os.replace(temp, path)


def team(key, rpm=None, tpm=None, max_parallel=None):
    """A team's entry in the registry: its key's SHA-256 (hex) and its limits (None: none)."""
    return {"sha256": hashlib.sha256(key.encode("utf-8")).hexdigest(), "rpm": rpm, "tpm": tpm, "max_parallel": max_parallel}


def chat(url, key=KEY):
    return http("POST", url + "/v1/chat/completions", key=key, body=CHAT)


def make_certificate(folder, names=("localhost", "127.0.0.1")):
    """A self-signed certificate and its key (mode 0600) made now with openssl; (cert path, key path). NAMES: DNS
    names and IP addresses it lists (subjectAltName)."""
    cert, key = folder / "router-cert.pem", folder / "router-key.pem"
    san = ",".join(("IP:%s" if re.match(r"^[0-9.]+$", n) else "DNS:%s") % n for n in names)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-days", "1", "-subj", "/CN=%s" % names[0], "-addext", "subjectAltName=" + san,
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    os.chmod(key, 0o600)
    return cert, key
