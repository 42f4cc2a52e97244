# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The key gateway with the REAL LiteLLM proxy (litellm[proxy] 1.108.7 in .venv-router: make .venv-router/.installed),
started as the router job starts it (roles/router/files/glm_gateway.py: proxy_config, proxy_argv, proxy_env; the hooks
in glm_gateway_hooks.py) in front of an SGLang stand-in (the upstream smg would be; the stand-in asks for the upstream
key as smg does). Started twice in all (module-scoped): once over HTTP, once again over HTTPS for the restart.

- every OpenAI route: 401 without a key and with a wrong one (the master key and the upstream key included), 200
  with a team's key; LiteLLM's admin and debug routes: 403 with a team's key (glm_gateway.route_allowed); the routes
  that answer without any key (health, LiteLLM's static UI and public catalogue) give nothing that needs a key;
- limits per team (LiteLLM's limiter, parallel_request_limiter_v3.py, from the UserAPIKeyAuth the hook returns):
  rpm 2 -> 200, 200, 429 (retry-after: 60) while another team keeps getting 200; tpm; max_parallel;
- revocation and a new team through the registry file, no restart;
- the usage file against what the clients saw; the keys in no file, log or command line; the start time.
"""

import json
import os
import re
import secrets
import ssl
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from router_helpers import ROUTER_PYTHON, make_certificate, team, write_registry
from standin_helpers import KEY, REPO, Server, free_port, seed_args, wait_for

sys.path.insert(0, os.path.join(REPO, "roles", "router", "files"))
import glm_gateway  # noqa: E402  pylint: disable=wrong-import-position,import-error


def _has_litellm():
    if not os.access(ROUTER_PYTHON, os.X_OK):
        return False
    return subprocess.run([ROUTER_PYTHON, "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('litellm') is None)"],
                          check=False).returncode == 0


pytestmark = pytest.mark.skipif(not _has_litellm(), reason="no LiteLLM in the router venv %s: make .venv-router/.installed "
                                "(requirements-router.txt has litellm[proxy])" % ROUTER_PYTHON)

MODEL = "glm-5.3-flash"
#: the teams (names no page of LiteLLM's holds) and their limits; "glmteam-late" joins later
LIMITS = {"glmteam-open": {}, "glmteam-rpm2": {"rpm": 2}, "glmteam-other": {"rpm": 100}, "glmteam-tpm": {"tpm": 150},
          "glmteam-par1": {"max_parallel": 1}}
#: each team's key, made now (only their hashes go into the registry)
KEYS = {name: "glm-%s-%s" % (name, secrets.token_urlsafe(24)) for name in list(LIMITS) + ["glmteam-late"]}
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "How many times does the letter r appear in strawberry?"}],
        "max_tokens": 16}
STREAM_USAGE = dict(CHAT, stream=True, stream_options={"include_usage": True})
#: GET routes LiteLLM 1.108.7 answers without any key (probed over its whole route table: the 559 paths with
#: LITELLM_DISABLE_LAZY_ROUTES; every other one answered 401, 404, 422 or a database error). None may hold the model's
#: name, a team, a key or a count.
OPEN_ROUTES = ["/health/liveliness", "/health/liveness", "/health/readiness", "/ui/", "/fallback/login", "/get_image",
               "/get_favicon", "/get_logo_url", "/.well-known/litellm-ui-config", "/get/ui_theme_settings",
               "/public/model_hub", "/public/model_hub/info", "/public/mcp_hub", "/public/agent_hub", "/public/providers",
               "/public/endpoints", "/sso/key/generate"]
#: routes a known team key got 200 from before the hook's route check (debug dumps, settings, the upstream's URL)
ADMIN_ROUTES = [("GET", "/"), ("GET", "/routes"), ("GET", "/health"), ("GET", "/health/readiness/details"),
                ("GET", "/model/info"), ("GET", "/v1/model/info"), ("GET", "/model_group/info"), ("GET", "/settings"),
                ("GET", "/active/callbacks"), ("GET", "/get/config/callbacks"), ("GET", "/debug/asyncio-tasks"),
                ("GET", "/memory-usage-in-mem-cache-items"), ("GET", "/router/settings"), ("GET", "/metrics"),
                ("POST", "/key/generate"), ("POST", "/model/new"), ("POST", "/config/update"), ("POST", "/cache/flushall"),
                ("POST", "/debug/memory/gc/configure"), ("GET", "/openai/v1/models"), ("GET", "/cursor/v1/models"),
                ("POST", "/utils/token_counter"), ("GET", "/credentials")]


class Ledger:
    """What the clients saw, per team: requests (any answer to an LLM route after the key was accepted), errors,
    limited (LiteLLM's 429), and the tokens of each answer's usage."""

    def __init__(self):
        self.teams = {}

    def count(self, name, status, usage=None):
        row = self.teams.setdefault(name, dict.fromkeys(glm_gateway.COUNTERS, 0))
        row["requests"] += 1
        if status == 200:
            row["prompt_tokens"] += usage["prompt_tokens"]
            row["completion_tokens"] += usage["completion_tokens"]
        elif status == 429:
            row["limited"] += 1
        else:
            row["errors"] += 1


class Gateway:
    """The LiteLLM proxy as the router job starts it, its files and URL."""

    def __init__(self, folder, upstream_url):
        self.folder = folder
        self.registry = folder / "gateway-keys.json"
        self.usage = folder / "gateway-usage.json"
        self.config = folder / "gateway.json"
        self.upstream_url = upstream_url
        self.ledger = Ledger()
        self.proc = self.env = self.url = self.log_path = self.started_in = None
        self.context = None
        self.starts = 0
        write_registry(self.registry, {name: team(KEYS[name], **LIMITS[name]) for name in LIMITS})

    def start(self, tls=None):
        self.config.write_text(json.dumps(glm_gateway.proxy_config(MODEL, self.upstream_url + "/v1")), encoding="utf-8")
        os.chmod(self.config, 0o600)
        self.env = glm_gateway.proxy_env(os.environ, KEY, self.registry, self.usage)
        port = free_port()
        self.url = "%s://127.0.0.1:%d" % ("https" if tls else "http", port)
        self.context = ssl.create_default_context(cafile=str(tls[0])) if tls else None
        self.starts += 1
        self.log_path = self.folder / ("gateway-%d.log" % self.starts)
        argv = glm_gateway.proxy_argv(ROUTER_PYTHON, self.config, "127.0.0.1", port, *(tls or ()))
        started = time.monotonic()
        with open(self.log_path, "w", encoding="utf-8") as log:
            self.proc = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=str(self.folder))
        wait_for(lambda: self.call("GET", "/health/liveliness")[0] == 200 or self.proc.poll() is not None, 90, 0.1)
        assert self.proc.poll() is None, self.log
        self.started_in = time.monotonic() - started

    @property
    def log(self):
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def call(self, method, path, key=None, body=None, timeout=30):
        """(status, headers, body text); status None when nothing answers."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method)
        if key is not None:
            request.add_header("Authorization", "Bearer %s" % key)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self.context) as response:
                return response.status, response.headers, response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as error:
            return error.code, error.headers, error.read().decode("utf-8", "replace")
        except (urllib.error.URLError, ConnectionError) as error:
            return None, {}, str(error)

    def llm(self, name, path="/v1/chat/completions", body=None, key=None):
        """A request of team NAME to an LLM route, counted in the ledger as the usage file should count it."""
        body = CHAT if body is None else body
        status, headers, text = self.call("POST", path, key=KEYS[name] if key is None else key, body=body)
        usage = None
        if status == 200:
            usage = usage_of(text) if body.get("stream") else json.loads(text)["usage"]
        self.ledger.count(name, status, usage)
        return status, headers, text

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def usage_of(stream_text):
    """The usage chunk of a streamed answer (stream_options.include_usage), or zeros."""
    for line in stream_text.splitlines():
        if line.startswith("data: {"):
            chunk = json.loads(line[len("data: "):])
            if chunk.get("usage"):
                return chunk["usage"]
    return {"prompt_tokens": 0, "completion_tokens": 0}


def chunks(stream_text):
    return [json.loads(line[len("data: "):]) for line in stream_text.splitlines() if line.startswith("data: {")]


def rss_mb(pid):
    with open("/proc/%d/status" % pid, encoding="utf-8") as handle:
        return int(re.search(r"^VmRSS:\s+(\d+) kB", handle.read(), re.M).group(1)) / 1024.0


@pytest.fixture(scope="module")
def upstream(model_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("gateway-upstream")
    server = Server(seed_args(model_dir, free_port(), host="127.0.0.1"), folder)
    server.control = folder / "control"          # sglang-decode there: seconds each generation takes
    server.wait_ready(20)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(upstream, tmp_path_factory):
    made = Gateway(tmp_path_factory.mktemp("gateway"), upstream.url)
    made.start()
    print("\nLiteLLM proxy start: %.1f s to /health/liveliness, RSS %.0f MB" % (made.started_in, rss_mb(made.proc.pid)))
    yield made
    made.stop()


def test_every_openai_route_wants_a_team_key(gateway):
    wrong = ["not-a-key", gateway.env["GLM_GATEWAY_MASTER_KEY"], KEY, glm_gateway.key_hash(KEYS["glmteam-open"])]
    routes = [("GET", "/v1/models", None), ("GET", "/models", None), ("GET", "/v1/models/" + MODEL, None),
              ("POST", "/v1/chat/completions", CHAT), ("POST", "/chat/completions", CHAT),
              ("POST", "/v1/chat/completions", STREAM_USAGE), ("POST", "/v1/completions", {"model": MODEL, "prompt": "hi"}),
              ("POST", "/v1/responses", {"model": MODEL, "input": "hi"}), ("POST", "/v1/embeddings", {"model": MODEL, "input": "hi"})]
    for method, path, body in routes:
        for key in [None] + wrong:
            status, _headers, text = gateway.call(method, path, key=key, body=body)
            assert status == 401, (method, path, key, status, text)
            assert "Invalid API key" in text and (key is None or key not in text)
    assert json.loads(gateway.call("GET", "/v1/models", KEYS["glmteam-open"])[2])["data"][0]["id"] == MODEL
    assert gateway.call("GET", "/v1/models/" + MODEL, KEYS["glmteam-open"])[0] == 200
    status, headers, text = gateway.llm("glmteam-open")
    assert status == 200 and json.loads(text)["choices"][0]["message"]["content"], text
    # LiteLLM's x-litellm-* headers name the team's limits and the upstream's URL (smg on loopback), no key
    assert headers["x-litellm-model-api-base"] == gateway.upstream_url + "/v1" and KEY not in str(headers)
    assert gateway.llm("glmteam-open", path="/chat/completions")[0] == 200
    status, _headers, text = gateway.llm("glmteam-open", body=STREAM_USAGE)
    assert status == 200 and chunks(text)[-1]["usage"]["completion_tokens"] > 0, text
    assert text.rstrip().endswith("data: [DONE]")


def test_sglang_answers_pass_through(gateway):
    """reasoning_content, tool calls (whole and streamed), usage, and SGLang's own request parameters accepted."""
    extra = dict(CHAT, top_k=5, min_p=0.1, repetition_penalty=1.05, separate_reasoning=True,
                 chat_template_kwargs={"enable_thinking": True}, regex=None, stream_reasoning=False)
    status, _headers, text = gateway.llm("glmteam-open", body=extra)
    answer = json.loads(text)
    assert status == 200, text
    assert answer["choices"][0]["message"]["reasoning_content"] and "3" in answer["choices"][0]["message"]["content"]
    tools = [{"type": "function", "function": {"name": "get_weather", "strict": True, "parameters": {
        "type": "object", "additionalProperties": False, "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    ask = {"model": MODEL, "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": tools}
    status, _headers, text = gateway.llm("glmteam-open", body=ask)
    choice = json.loads(text)["choices"][0]
    assert status == 200 and choice["finish_reason"] == "tool_calls", text
    call = choice["message"]["tool_calls"][0]
    assert call["function"]["name"] == "get_weather" and set(json.loads(call["function"]["arguments"])) == {"city"}
    status, _headers, text = gateway.llm("glmteam-open", body=dict(ask, stream=True, stream_options={"include_usage": True}))
    deltas = [c["choices"][0]["delta"] for c in chunks(text) if c.get("choices")]
    arguments = "".join((d.get("tool_calls") or [{}])[0].get("function", {}).get("arguments") or "" for d in deltas)
    assert status == 200 and json.loads(arguments) == json.loads(call["function"]["arguments"]), text
    assert any(d.get("reasoning_content") for d in deltas)
    assert [c["choices"][0]["finish_reason"] for c in chunks(text) if c.get("choices") and c["choices"][0].get("finish_reason")] == [
        "tool_calls"]


def test_routes_without_a_key_give_nothing_that_needs_one(gateway):
    for path in OPEN_ROUTES:
        status, _headers, text = gateway.call("GET", path)
        assert status == 200, (path, status, text[:300])
        for secret in [MODEL, KEY, gateway.env["GLM_GATEWAY_MASTER_KEY"], gateway.upstream_url] + list(KEYS) + list(KEYS.values()):
            assert secret not in text, (path, secret)
    for path in ("/docs", "/redoc", "/openapi.json", "/swagger/", "/.env"):     # NO_DOCS, NO_REDOC, NO_OPENAPI
        assert gateway.call("GET", path)[0] in (404, 401), path
    status, _headers, text = gateway.call("POST", "/login", body={"username": "admin", "password": "admin"})
    assert status == 401, text


def test_litellm_admin_routes_refuse_a_team_key(gateway):
    for method, path in ADMIN_ROUTES:
        status, _headers, text = gateway.call(method, path, key=KEYS["glmteam-open"], body={} if method == "POST" else None)
        # /metrics wraps any refusal of the key check in its own 401
        assert status == (401 if path == "/metrics" else 403) and "OpenAI-compatible API only" in text, (
            method, path, status, text[:300])
        assert gateway.call(method, path, body={} if method == "POST" else None)[0] == 401, path


def test_rpm_limit_of_one_team_leaves_the_others_alone(gateway):
    statuses, other = [], []
    for _request in range(3):
        status, headers, text = gateway.llm("glmteam-rpm2")
        statuses.append(status)
        other.append(gateway.llm("glmteam-other")[0])
    assert statuses == [200, 200, 429] and other == [200, 200, 200], (statuses, other, text)
    assert headers["retry-after"] == "60" and headers["rate_limit_type"] == "requests", dict(headers)
    error = json.loads(text)["error"]
    assert error["type"] == "throttling_error" and error["code"] == "429"
    assert error["message"].startswith("Rate limit exceeded for api_key: team:glmteam-rpm2. Limit type: requests. Current limit: 2")
    assert KEYS["glmteam-rpm2"] not in text and glm_gateway.key_hash(KEYS["glmteam-rpm2"]) not in text


def test_tpm_limit(gateway):
    """tpm 150: the answers' tokens (about 45 each) use it up; LiteLLM also reserves an estimate (prompt + max_tokens)
    before each request, so the 429 can come before the tokens used reach the limit."""
    statuses = []
    while len(statuses) < 10 and 429 not in statuses:
        status, headers, text = gateway.llm("glmteam-tpm")
        statuses.append(status)
    assert statuses[-1] == 429 and set(statuses[:-1]) == {200} and len(statuses) >= 3, statuses
    assert headers["rate_limit_type"] == "tokens" and "Limit type: tokens. Current limit: 150" in text, text
    assert gateway.llm("glmteam-other")[0] == 200


def test_max_parallel_refuses_the_second_request_at_once(gateway, upstream):
    (upstream.control / "sglang-decode").write_text("2", encoding="utf-8")
    results = []
    try:
        def one():
            started = time.monotonic()
            results.append((gateway.llm("glmteam-par1")[0], time.monotonic() - started))
        first = threading.Thread(target=one)
        first.start()
        time.sleep(0.5)
        one()                                    # while the first one decodes
        first.join(30)
    finally:
        os.unlink(upstream.control / "sglang-decode")
    assert sorted(status for status, _seconds in results) == [200, 429], results
    refused = [seconds for status, seconds in results if status == 429][0]
    assert refused < 1.0, results                # not queued: refused at once
    assert gateway.llm("glmteam-par1")[0] == 200         # its slot is given back when the first one ends


def test_a_key_removed_from_the_registry_is_refused_within_a_second(gateway):
    teams = {name: team(KEYS[name], **LIMITS[name]) for name in LIMITS if name != "glmteam-rpm2"}
    write_registry(gateway.registry, teams)
    removed = time.monotonic()
    wait_for(lambda: gateway.call("GET", "/v1/models", KEYS["glmteam-rpm2"])[0] == 401, 1.0, 0.02)
    print("\nrevoked key refused after %.3f s" % (time.monotonic() - removed))
    assert gateway.call("POST", "/v1/chat/completions", KEYS["glmteam-rpm2"], CHAT)[0] == 401   # not counted: no team
    assert gateway.llm("glmteam-other")[0] == 200
    assert gateway.call("GET", "/v1/models", KEYS["glmteam-late"])[0] == 401
    write_registry(gateway.registry, dict(teams, **{"glmteam-late": team(KEYS["glmteam-late"])}))
    assert gateway.llm("glmteam-late")[0] == 200                       # at once, no restart
    assert gateway.proc.poll() is None and gateway.starts == 1
    # a registry that cannot be read refuses every key, and says so once
    gateway.registry.write_text("{", encoding="utf-8")
    assert [gateway.call("GET", "/v1/models", KEYS[name])[0] for name in ("glmteam-open", "glmteam-other", "glmteam-late")] == [401] * 3
    write_registry(gateway.registry, dict(teams, **{"glmteam-late": team(KEYS["glmteam-late"])}))
    assert gateway.call("GET", "/v1/models", KEYS["glmteam-open"])[0] == 200
    assert gateway.log.count("key registry %s: invalid: " % gateway.registry) == 1, gateway.log


def test_routes_the_standin_does_not_serve_pass_its_404_on(gateway):
    """The key is accepted and the upstream's 404 passed on (as smg would pass a replica's); the next request on the
    proxy's kept-alive connection to the upstream is answered (the stand-in reads the body it does not serve, as
    uvicorn does in the real SGLang; before it did, that request got 501)."""
    for path, body in (("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 4}),
                       ("/v1/responses", {"model": MODEL, "input": "hi"})):
        status, _headers, text = gateway.llm("glmteam-open", path=path, body=body)
        assert status == 404 and "NotFoundError" in text, (path, status, text)
    assert gateway.llm("glmteam-open")[0] == 200


def usage_today(gateway):
    data = json.loads(gateway.usage.read_text(encoding="utf-8"))
    assert data["version"] == 1 and time.time() - data["updated"] < 60
    return data["days"][time.strftime("%Y-%m-%d", time.gmtime())]


def test_usage_file_counts_what_the_clients_saw(gateway):
    expected = gateway.ledger.teams
    try:
        wait_for(lambda: gateway.usage.exists() and usage_today(gateway) == expected, 5, 0.2)
    except AssertionError:
        assert usage_today(gateway) == expected
    assert stat.S_IMODE(os.stat(gateway.usage).st_mode) == 0o600
    assert expected["glmteam-rpm2"]["limited"] == 1 and expected["glmteam-par1"]["limited"] == 1 and expected["glmteam-tpm"]["limited"] == 1
    assert expected["glmteam-open"]["errors"] == 2                     # the two routes the stand-in does not serve


def test_no_key_in_files_logs_or_command_lines(gateway):
    secrets_ = [KEY, gateway.env["GLM_GATEWAY_MASTER_KEY"]] + list(KEYS.values())
    hashes = [glm_gateway.key_hash(k) for k in secrets_]
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    cmdlines = []
    for pid in pids:
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as handle:
                cmdline = handle.read().decode("utf-8", "replace")
        except OSError:
            continue
        if "sglang.launch_server" not in cmdline:   # the stand-in: the seed guide gives SGLang --api-key, not ours
            cmdlines.append(cmdline)
    assert any("glm_gateway.py\0--config" in c for c in cmdlines)
    texts = {"log": gateway.log, "config": gateway.config.read_text(encoding="utf-8"),
             "usage": gateway.usage.read_text(encoding="utf-8"), "argv": "\n".join(cmdlines)}
    for where, text in texts.items():
        for secret in secrets_ + (hashes if where != "argv" else []):
            assert secret not in text, (where, secret[:8])
    # offline: no fetch of the cost map (LITELLM_LOCAL_MODEL_COST_MAP), no tokenizer download (the streamed answers'
    # usage was counted with the wheel's own tiktoken files)
    assert "githubusercontent" not in gateway.log and "huggingface" not in gateway.log.lower()
    registry = gateway.registry.read_text(encoding="utf-8")
    assert all(k not in registry for k in secrets_) and glm_gateway.key_hash(KEYS["glmteam-open"]) in registry


def test_usage_goes_on_after_a_restart_over_https(gateway, tmp_path):
    before = usage_today(gateway)
    rss = rss_mb(gateway.proc.pid)
    gateway.stop()
    assert gateway.proc.returncode == 0, gateway.log[-2000:]
    assert usage_today(gateway) == gateway.ledger.teams     # written at exit too
    cert, key_pem = make_certificate(tmp_path)
    gateway.start(tls=(cert, key_pem))
    print("\nLiteLLM proxy restart (HTTPS): %.1f s to /health/liveliness; RSS before the stop %.0f MB" % (gateway.started_in, rss))
    assert gateway.url.startswith("https://")
    assert gateway.llm("glmteam-open")[0] == 200 and gateway.llm("glmteam-late", body=STREAM_USAGE)[0] == 200
    wait_for(lambda: usage_today(gateway) == gateway.ledger.teams, 5, 0.2)
    after = usage_today(gateway)
    assert after["glmteam-open"]["requests"] == before["glmteam-open"]["requests"] + 1
    assert after["glmteam-late"]["requests"] == before["glmteam-late"]["requests"] + 1
    assert stat.S_IMODE(os.stat(gateway.usage).st_mode) == 0o600
    with pytest.raises((urllib.error.URLError, ConnectionError)):   # plain HTTP on the port: no answer
        urllib.request.urlopen(gateway.url.replace("https", "http") + "/health/liveliness", timeout=5).read()
