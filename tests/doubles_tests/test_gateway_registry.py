# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The key gateway's standard-library half (roles/router/files/glm_gateway.py) without LiteLLM: the key registry
(SHA-256 hex of each team's key, re-read when the file changes, every key refused while the file is missing or
invalid, one log line per change), the usage book (per UTC day per team, atomic 0600 writes at most every
flush_interval seconds, going on from the file's content), the config, argv and environment of the proxy, and the
routes a team's key may use. The proxy itself: test_gateway_proxy.py."""

import json
import os
import stat
import sys
import time

import pytest

from router_helpers import team, write_registry
from standin_helpers import REPO

sys.path.insert(0, os.path.join(REPO, "roles", "router", "files"))
import glm_gateway  # noqa: E402  pylint: disable=wrong-import-position,import-error


def test_registry_looks_up_the_hash_and_follows_the_file(tmp_path, capsys):
    path = tmp_path / "keys.json"
    write_registry(path, {"default": team("key-default"), "team-a": team("key-a", rpm=600, tpm=200000, max_parallel=8)})
    registry = glm_gateway.Registry(path)
    assert registry.lookup("key-a") == {"team": "team-a", "rpm": 600, "tpm": 200000, "max_parallel": 8}
    assert registry.lookup("key-default") == {"team": "default", "rpm": None, "tpm": None, "max_parallel": None}
    for wrong in ("key-b", "", None, "Bearer key-a", glm_gateway.key_hash("key-a")):
        assert registry.lookup(wrong) is None, wrong
    assert capsys.readouterr().out.count("key registry %s: read, 2 team(s)" % path) == 1
    for _call in range(5):
        registry.lookup("key-a")
    assert capsys.readouterr().out == ""                       # not read again while unchanged

    # revoked: the deploy rewrites the file without team-a (same second, same size: the inode tells)
    write_registry(path, {"default": team("key-default"), "team-b": team("key-b", rpm=1)})
    assert registry.lookup("key-a") is None
    assert registry.lookup("key-b")["team"] == "team-b"
    assert "key registry %s: read, 2 team(s)" % path in capsys.readouterr().out

    # a file that is not a registry refuses every key, said once (not per lookup), until it is fixed
    for broken, problem in (("{not json", "invalid: "), (json.dumps({"version": 2, "teams": {}}), "not a version 1 registry"),
                            (json.dumps({"version": 1, "teams": {"x": {"sha256": "abc"}}}), "team x: sha256 is not 64"),
                            (json.dumps({"version": 1, "teams": {"x": dict(team("k"), rpm=0)}}), "rpm must be a positive"),
                            (json.dumps({"version": 1, "teams": {"x": team("k"), "y": team("k")}}), "the same key")):
        path.write_text(broken, encoding="utf-8")
        assert [registry.lookup("key-default") for _call in range(3)] == [None] * 3
        out = capsys.readouterr().out
        assert out.count("key registry %s: " % path) == 1 and problem in out and "every key is refused" in out, out
        assert glm_gateway.key_hash("k") not in out
    os.unlink(path)
    assert registry.lookup("key-default") is None
    out = capsys.readouterr().out
    assert "key registry %s: No such file or directory; every key is refused" % path in out, out
    write_registry(path, {"default": team("key-default")})
    assert registry.lookup("key-default")["team"] == "default"


def test_usage_book_counts_per_day_and_team_and_writes_atomically(tmp_path):
    path = tmp_path / "usage.json"
    now = [1796400000.0]                                         # 2026-12-04 UTC
    book = glm_gateway.UsageBook(path, flush_interval=2.0, clock=lambda: now[0])
    book.add("team-a", requests=1, prompt_tokens=10, completion_tokens=5)
    assert json.loads(path.read_text(encoding="utf-8"))["days"] == {"2026-12-04": {"team-a": {
        "requests": 1, "errors": 0, "limited": 0, "prompt_tokens": 10, "completion_tokens": 5}}}
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    now[0] += 0.5
    book.add("team-a", requests=1, limited=1)
    book.add("team-b", requests=1, errors=1)
    assert "team-b" not in path.read_text(encoding="utf-8")      # not yet: at most every 2 s
    time.sleep(2.5)                                              # the timer writes what is pending
    days = json.loads(path.read_text(encoding="utf-8"))["days"]
    assert days["2026-12-04"]["team-a"]["limited"] == 1 and days["2026-12-04"]["team-b"]["errors"] == 1
    now[0] += 86400                                              # the next UTC day
    book.add("team-a", requests=1)
    book.flush()
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["version"] == 1 and data["updated"] == int(now[0])
    assert data["days"]["2026-12-05"] == {
        "team-a": {"requests": 1, "errors": 0, "limited": 0, "prompt_tokens": 0, "completion_tokens": 0}}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["usage.json", "usage.json.lock"]   # no temporary file left
    assert stat.S_IMODE(os.stat(str(path) + ".lock").st_mode) == 0o600
    with pytest.raises(TypeError):
        book.add("team-a", cost=1)

    # a restarted gateway goes on from the file
    again = glm_gateway.UsageBook(path, clock=lambda: now[0])
    again.add("team-a", requests=2, prompt_tokens=1)
    again.flush()
    assert json.loads(path.read_text(encoding="utf-8"))["days"]["2026-12-05"]["team-a"]["requests"] == 3
    assert json.loads(path.read_text(encoding="utf-8"))["days"]["2026-12-04"]["team-a"]["requests"] == 2


def test_two_books_of_one_file_add_up(tmp_path):
    """A router and its successor (router_successors_until) overlap for a minute, each proxy with its own book of the
    same file: each write adds what that book counted since its last one to the file as it is, so neither overwrites
    the other's counts."""
    path = tmp_path / "usage.json"

    def clock():
        return 1796400000.0                                        # 2026-12-04 UTC
    old, new = glm_gateway.UsageBook(path, clock=clock), glm_gateway.UsageBook(path, clock=clock)
    for _request in range(3):
        old.add("team-a", requests=1, prompt_tokens=10)
    old.flush()
    new.add("team-a", requests=1, prompt_tokens=10)
    new.add("team-b", requests=1)
    new.flush()
    old.add("team-a", requests=1)                                  # the old one's last request, written at its exit
    old.flush()
    days = json.loads(path.read_text(encoding="utf-8"))["days"]["2026-12-04"]
    assert days["team-a"]["requests"] == 5 and days["team-a"]["prompt_tokens"] == 40 and days["team-b"]["requests"] == 1
    assert old.snapshot()["2026-12-04"]["team-b"]["requests"] == 1   # each book sees the file's totals after a write


def test_an_unreadable_usage_file_is_set_aside_not_overwritten(tmp_path):
    path = tmp_path / "usage.json"
    path.write_text('{"days": {"2026-12-01": {"team-a": {"requests": 7', encoding="utf-8")     # cut short
    book = glm_gateway.UsageBook(path, clock=lambda: 1796400000.0)
    book.add("team-a", requests=1)
    book.flush()
    aside = tmp_path / "usage.json.unreadable-1796400000"
    assert aside.read_text(encoding="utf-8").startswith('{"days": {"2026-12-01"')            # its history kept
    assert json.loads(path.read_text(encoding="utf-8"))["days"]["2026-12-04"]["team-a"]["requests"] == 1


def test_proxy_config_argv_and_environment_hold_no_secret(tmp_path):
    config = glm_gateway.proxy_config("glm-5.3-flash", "http://127.0.0.1:30001/v1", request_timeout=900)
    json.dumps(config)                                           # written as JSON by the launcher
    params = config["model_list"][0]["litellm_params"]
    assert config["model_list"][0]["model_name"] == "glm-5.3-flash"
    assert params["model"] == "openai/glm-5.3-flash" and params["api_base"] == "http://127.0.0.1:30001/v1"
    assert params["api_key"] == "os.environ/GLM_UPSTREAM_KEY" and params["timeout"] == 900
    assert config["general_settings"]["custom_auth"] == "glm_gateway_hooks.user_api_key_auth"
    assert config["general_settings"]["master_key"] == "os.environ/GLM_GATEWAY_MASTER_KEY"
    assert config["litellm_settings"]["callbacks"] == ["glm_gateway_hooks.usage_logger"]

    argv = glm_gateway.proxy_argv("/venv/bin/python", tmp_path / "c.json", "0.0.0.0", 8000)
    assert argv == ["/venv/bin/python", os.path.abspath(glm_gateway.__file__), "--config", str(tmp_path / "c.json"),
                    "--host", "0.0.0.0", "--port", "8000", "--num_workers", "1"]
    assert glm_gateway.proxy_argv("p", "c", "h", 1, "cert.pem", "key.pem")[-4:] == [
        "--ssl_certfile_path", "cert.pem", "--ssl_keyfile_path", "key.pem"]
    with pytest.raises(ValueError):
        glm_gateway.proxy_argv("p", "c", "h", 1, "cert.pem")

    assert glm_gateway.proxy_argv("p", "c", "h", 1, metrics_port=29001)[-2:] == ["--prometheus_metrics_port", "29001"]
    assert glm_gateway.proxy_config("m", "u", metrics=True)["litellm_settings"]["callbacks"][-1] == "prometheus"

    base = {"PATH": "/usr/bin", "LITELLM_LOG": "DEBUG", "DEBUG": "1", "DATABASE_URL": "postgresql://x", "PORT": "1",
            "PYTHONPATH": "/elsewhere", "http_proxy": "http://proxy.site:3128", "HTTPS_PROXY": "http://proxy.site:3128",
            "PROMETHEUS_MULTIPROC_DIR": "/tmp/shared"}
    env = glm_gateway.proxy_env(base, "upstream-secret", tmp_path / "keys.json", tmp_path / "usage.json")
    again = glm_gateway.proxy_env(base, "upstream-secret", tmp_path / "keys.json", tmp_path / "usage.json")
    assert env["GLM_UPSTREAM_KEY"] == "upstream-secret"
    assert env["GLM_GATEWAY_MASTER_KEY"].startswith("sk-") and len(env["GLM_GATEWAY_MASTER_KEY"]) > 40
    assert env["GLM_GATEWAY_MASTER_KEY"] != again["GLM_GATEWAY_MASTER_KEY"]     # made at each start
    assert env["GLM_GATEWAY_KEYS"] == str(tmp_path / "keys.json") and env["GLM_GATEWAY_USAGE"] == str(tmp_path / "usage.json")
    assert env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True" and env["LITELLM_MODE"] == "PRODUCTION"
    assert env["LITELLM_LOG"] == "WARNING" and "DEBUG" not in env and "DATABASE_URL" not in env and "PORT" not in env
    assert env["PYTHONPATH"] == os.pathsep.join([os.path.dirname(glm_gateway.__file__), "/elsewhere"])
    assert env["PATH"] == "/usr/bin" and base["LITELLM_LOG"] == "DEBUG"       # the parent's dict is left alone
    # a site's HTTP proxy would get the upstream key and the prompts: gone, and the loopback exempt
    assert "http_proxy" not in env and "HTTPS_PROXY" not in env and env["NO_PROXY"] == "127.0.0.1,localhost"
    assert "PROMETHEUS_MULTIPROC_DIR" not in env
    mine = glm_gateway.proxy_env(base, "k", "r", "u", metrics_dir=tmp_path / "metrics")
    assert mine["PROMETHEUS_MULTIPROC_DIR"] == str(tmp_path / "metrics")


@pytest.mark.parametrize("path, allowed", [
    ("/v1/chat/completions", True), ("/chat/completions", True), ("/v1/completions", True), ("/v1/models", True),
    ("/models", True), ("/v1/models/glm-5.3-flash", True), ("/v1/responses", True), ("/v1/responses/resp_1", True),
    ("/v1/embeddings", True), ("/v1/chat/completions/", True),
    ("/", False), ("/routes", False), ("/health", False), ("/model/info", False), ("/key/generate", False),
    ("/v1/models/", True), ("/openai/v1/chat/completions", False), ("/v1/realtime", False), ("/metrics", False),
    ("/debug/asyncio-tasks", False), ("/v1/chat/completionsX", False), ("/v2/chat/completions", False),
])
def test_routes_a_team_key_may_use(path, allowed):
    assert glm_gateway.route_allowed(path) is allowed
