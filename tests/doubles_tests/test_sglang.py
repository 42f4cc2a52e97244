# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The SGLang server stand-in: start-up phases, auth, routes, --config, failures, SIGTERM."""

import json
import os
import signal

import pytest

from standin_helpers import KEY, STRAWBERRY, free_port, http, seed_args, wait_for


@pytest.fixture
def ready_server(servers, model_dir):
    """The seed's command line, served on 127.0.0.1 (a 0.0.0.0 bind would do too, but keep to loopback)."""
    server = servers(seed_args(model_dir, free_port(), host="127.0.0.1"), GLM_STANDIN_SGLANG_WARMUP="0")
    server.wait_ready()
    return server


def test_startup_phases_refused_then_503_then_200(servers, model_dir):
    server = servers(["--model-path", str(model_dir), "--tp-size", "8", "--api-key", KEY],
                     GLM_STANDIN_SGLANG_LOAD="0.6", GLM_STANDIN_SGLANG_WARMUP="0.8")
    # Loading the model: the port is not open yet (the real server starts uvicorn after the scheduler is ready).
    assert server.get("/health") == (None, "")
    status = wait_for(lambda: server.get("/health")[0], timeout=10)
    assert status == 503
    assert "max_total_num_tokens=" in server.out
    assert "fired up" not in server.out
    # During warm-up /v1/models already answers (with the key), /ready is 503 too.
    assert server.get("/v1/models", key=KEY)[0] == 200
    assert server.get("/ready")[0] == 503
    wait_for(lambda: server.get("/health")[0] == 200, timeout=10)
    assert server.get("/ready")[0] == 200
    assert server.get("/health_generate")[0] == 200
    assert "The server is fired up and ready to roll!" in server.out


def test_auth_401_without_or_with_wrong_key(ready_server):
    for key in (None, "wrong"):
        for method, path in (("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("GET", "/no/such/path")):
            status, body = http(method, ready_server.url + path, key=key, body={} if method == "POST" else None)
            assert status == 401, (path, key)
            assert json.loads(body) == {"error": "Unauthorized"}
    # Health, readiness and metrics paths need no key.
    assert ready_server.get("/health")[0] == 200
    assert ready_server.get("/ready")[0] == 200
    assert ready_server.get("/metrics")[0] == 404  # no --enable-metrics: the real route does not exist
    assert ready_server.get("/no/such/path", key=KEY)[0] == 404


def test_models_shape_with_key(ready_server):
    status, body = ready_server.get("/v1/models", key=KEY)
    assert status == 200
    doc = json.loads(body)
    assert set(doc) == {"object", "data"} and doc["object"] == "list"
    (card,) = doc["data"]
    assert set(card) == {"id", "object", "created", "owned_by", "root", "parent", "max_model_len"}
    assert card["id"] == card["root"] == "glm-5.3-flash"
    assert card["object"] == "model" and card["owned_by"] == "sglang" and card["parent"] is None
    assert isinstance(card["created"], int) and card["max_model_len"] == 202752


def test_chat_has_reasoning_and_content(ready_server):
    status, body = ready_server.post("/v1/chat/completions", {
        "model": "glm-5.3-flash", "messages": [{"role": "user", "content": STRAWBERRY}], "temperature": 1.0, "top_p": 0.95,
        "max_tokens": 4096, "chat_template_kwargs": {"reasoning_effort": "low", "clear_thinking": True}}, key=KEY)
    assert status == 200
    doc = json.loads(body)
    message = doc["choices"][0]["message"]
    assert "3" in message["content"] and message["reasoning_content"]
    assert doc["model"] == "glm-5.3-flash" and doc["object"] == "chat.completion"
    assert doc["usage"]["total_tokens"] == doc["usage"]["prompt_tokens"] + doc["usage"]["completion_tokens"]
    other = json.loads(ready_server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}, key=KEY)[1])
    assert other["choices"][0]["message"]["content"] and other["model"] == "glm-5.3-flash"
    assert ready_server.post("/v1/chat/completions", {"model": "x"}, key=KEY)[0] == 400
    assert ready_server.post("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2}}, key=KEY)[0] == 200


def test_logs_key_and_scheduler_line(ready_server):
    out = ready_server.out
    assert "server_args={'model_path': '%s'" % ready_server.out.split("'model_path': '")[1].split("'")[0] in out
    assert "'api_key': '%s'" % KEY in out
    assert "max_total_num_tokens=" in out and "context_len=202752, available_gpu_mem=" in out
    assert "Uvicorn running on http://127.0.0.1:%d" % ready_server.port in out


def test_config_file_key_and_cli_override(servers, model_dir, tmp_path):
    config = tmp_path / "serve.yaml"
    config.write_text("# written by the job\napi-key: 'from-config'\nserved-model-name: \"cfg-name\"\nenable-metrics: true\n",
                      encoding="utf-8")
    os.chmod(config, 0o600)
    server = servers(["--model-path", str(model_dir), "--tp-size", "8", "--config", str(config), "--served-model-name", "cli-name"])
    server.wait_ready()
    assert server.get("/v1/models", key="wrong")[0] == 401
    status, body = server.get("/v1/models", key="from-config")
    assert status == 200 and json.loads(body)["data"][0]["id"] == "cli-name"
    status, body = server.get("/metrics")
    assert status == 200 and "sglang:num_running_reqs" in body
    assert "'api_key': 'from-config'" in server.out


def test_server_info_and_model_info_as_0_5_21(servers, model_dir, tmp_path):
    """What SGLang's Model Gateway reads when a worker registers: /server_info (the resolved args, the key in them,
    so it needs the key) and /model_info, each with its deprecated /get_ alias; GET only."""
    config = tmp_path / "serve.yaml"
    config.write_text("api-key: '%s'\n" % KEY, encoding="utf-8")
    server = servers(["--model-path", str(model_dir), "--tp-size", "8", "--served-model-name", "glm-5.3-flash",
                      "--config", str(config), "--host", "127.0.0.1"], GLM_STANDIN_SGLANG_WARMUP="0")
    server.wait_ready()
    for path in ("/server_info", "/get_server_info", "/model_info", "/get_model_info"):
        assert server.get(path)[0] == 401, path
        assert server.post(path, {}, key=KEY)[0] == 405, path
    info = json.loads(server.get("/server_info", key=KEY)[1])
    assert info == json.loads(server.get("/get_server_info", key=KEY)[1])
    assert info["served_model_name"] == "glm-5.3-flash" and info["tp_size"] == 8 and info["api_key"] == KEY
    assert "--api-key %s" % KEY in info["launch_command"] and "--config" not in info["launch_command"]
    assert info["version"] == "0.5.21" and info["status"] == "ready" and info["frontend"] == "python"
    assert info["max_total_num_tokens"] > 0 and len(info["internal_states"]) == 1 and "config" not in info
    model = json.loads(server.get("/model_info", key=KEY)[1])
    assert set(model) == {"model_path", "served_model_name", "tokenizer_path", "is_generation", "preferred_sampling_params",
                          "weight_version", "load_format", "reasoning_parser", "tool_call_parser", "disaggregation_mode",
                          "has_image_understanding", "has_audio_understanding", "model_type", "architectures"}
    assert model["served_model_name"] == "glm-5.3-flash" and model["model_path"] == str(model_dir)


def test_bad_config_file_fails(servers, model_dir, tmp_path):
    config = tmp_path / "serve.txt"
    config.write_text("api-key: x\n", encoding="utf-8")
    server = servers(["--model-path", str(model_dir), "--config", str(config)])
    assert server.wait_exit() == 1
    assert "ValueError: Config file must be YAML format, got: .txt" in server.err


@pytest.mark.parametrize("argv, message", [
    (["--no-such-flag"], "sglang serve: error: unrecognized arguments: --no-such-flag"),
    (["--kv-cache-dtype", "fp9"], "sglang serve: error: argument --kv-cache-dtype: invalid choice: 'fp9'"),
    (["--cuda-graph-max-bs", "8"], "sglang serve: error: ambiguous option: --cuda-graph-max-bs could match"),
])
def test_parser_errors_exit_2(servers, model_dir, argv, message):
    server = servers(["--model-path", str(model_dir)] + argv)
    assert server.wait_exit() == 2
    assert message in server.err


@pytest.mark.parametrize("extra_args, env, message", [
    ([], {"GLM_STANDIN_SGLANG_FAIL": "oom"}, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"),
    ([], {"GLM_STANDIN_SGLANG_FAIL": "fp8"}, "FP8 KV cache"),
    (["--kv-cache-dtype", "fp8_e4m3"], {}, "ValueError: FP8 KV cache (--kv-cache-dtype fp8_e4m3) is not supported"),
    (["--tp-size", "4"], {}, "torch.OutOfMemoryError: CUDA out of memory"),
    (["--tp-size", "16"], {}, "exceeds the 8 GPUs"),
    (["--tp-size", "8"], {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, "exceeds the 4 GPUs"),
    (["--tp-size", "8", "--ep-size", "3"], {}, "must be divisible by ep_size"),
    (["--mem-fraction-static", "0.5"], {}, "Not enough memory. Please try to increase --mem-fraction-static"),
    (["--context-length", "300000"], {}, "greater than the derived context_length (202752)"),
])
def test_start_failures_exit_1(servers, model_dir, extra_args, env, message):
    server = servers(["--model-path", str(model_dir), "--tp-size", "8"] + extra_args, **env)
    assert server.wait_exit() == 1, server.out
    assert message in server.err
    assert "fired up" not in server.out


def test_fail_switch_by_control_file(servers, model_dir, tmp_path):
    (tmp_path / "control").mkdir(exist_ok=True)
    (tmp_path / "control" / "sglang-fail").write_text("oom\n", encoding="utf-8")
    server = servers(["--model-path", str(model_dir), "--tp-size", "8"])
    assert server.wait_exit() == 1
    assert "CUDA out of memory" in server.err


def test_incomplete_model_fails(servers, tmp_path, model_dir):
    partial = tmp_path / "partial"
    partial.mkdir()
    for name in os.listdir(model_dir):
        if name != "model-00005-of-00008.safetensors" and not name.startswith("."):
            os.symlink(model_dir / name, partial / name)
    server = servers(["--model-path", str(partial), "--tp-size", "8"])
    assert server.wait_exit() == 1
    assert "No such file or directory: '%s'" % (partial / "model-00005-of-00008.safetensors") in server.err
    missing = servers(["--model-path", str(tmp_path / "nothing")])
    assert missing.wait_exit() == 1
    assert "containing a config.json file" in missing.err


def test_sigterm_clean_exit(ready_server):
    ready_server.proc.send_signal(signal.SIGTERM)
    assert ready_server.wait_exit(5) == 0
    assert "Finished server process" in ready_server.out
    assert ready_server.get("/health") == (None, "")


def test_sigterm_while_loading(servers, model_dir):
    server = servers(["--model-path", str(model_dir), "--tp-size", "8"], GLM_STANDIN_SGLANG_LOAD="5")
    wait_for(lambda: "Load weight begin" in server.out)
    server.proc.send_signal(signal.SIGTERM)
    assert server.wait_exit(5) == 143


def test_node_address_when_host_is_all_interfaces(servers, model_dir):
    server = servers(["--model-path", str(model_dir), "--tp-size", "8", "--host", "0.0.0.0"], SLURMD_NODENAME="localhost",
                     CUDA_VISIBLE_DEVICES="0,1,2,3,4,5,6,7", SLURM_JOB_ID="9000001")
    server.wait_ready()
    assert "--host 0.0.0.0 on localhost: listening on 127.0.0.1:%d" % server.port in server.out
    assert server.get("/health")[0] == 200


def test_no_gpus_in_a_slurm_job_without_gres(servers, model_dir):
    server = servers(["--model-path", str(model_dir)], SLURM_JOB_ID="9000007")
    assert server.wait_exit() == 1
    assert "No CUDA GPUs are available" in server.err


@pytest.fixture
def metrics_server(servers, model_dir):
    server = servers(seed_args(model_dir, free_port(), host="127.0.0.1") + ["--enable-metrics"], GLM_STANDIN_SGLANG_WARMUP="0")
    server.wait_ready()
    return server


def families(text):
    """The exposition parsed by the real parser (prometheus_client), as {name: (type, {labels tuple: value})}."""
    from prometheus_client.parser import text_string_to_metric_families
    out = {}
    for family in text_string_to_metric_families(text):
        out[family.name] = (family.type, dict((tuple(sorted(s.labels.items())) + ((("__sample", s.name),)), s.value)
                                              for s in family.samples))
    return out


def test_metrics_names_types_and_labels_as_sglang_0_5_21(metrics_server):
    import urllib.request
    with urllib.request.urlopen(metrics_server.url + "/metrics") as response:    # no key needed
        assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        first = families(response.read().decode())
    sched = (("engine_type", "unified"), ("model_name", "glm-5.3-flash"), ("moe_ep_rank", "0"), ("pp_rank", "0"), ("tp_rank", "0"))
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:gen_throughput", "sglang:token_usage",
                 "sglang:num_used_tokens", "sglang:max_total_num_tokens", "sglang:cache_hit_rate"):
        kind, samples = first[name]
        assert kind == "gauge" and list(samples) == [sched + (("__sample", name),)], (name, samples)
    # counters are declared with _total: the family is the name without it (the parser strips it), the sample keeps it
    kind, samples = first["sglang:num_requests"]
    warm = (("engine_type", "unified"), ("is_streaming", "false"), ("model_name", "glm-5.3-flash"))
    assert kind == "counter" and samples == {warm + (("__sample", "sglang:num_requests_total"),): 1.0}  # the warm-up
    assert first["sglang:e2e_request_latency_seconds"][0] == "histogram"
    buckets = [dict(k)["le"] for k in first["sglang:e2e_request_latency_seconds"][1] if dict(k)["__sample"].endswith("_bucket")]
    assert buckets[:3] == ["0.1", "0.2", "0.4"] and buckets[-2:] == ["2400.0", "+Inf"]
    assert metrics_server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": STRAWBERRY}]}, key=KEY)[0] == 200
    metrics_server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stream": True}, key=KEY)
    assert metrics_server.get("/health")[0] == 200          # health checks are not requests (log_metrics=False)
    after = families(metrics_server.get("/metrics")[1])
    requests = after["sglang:num_requests"][1]
    assert requests[warm + (("__sample", "sglang:num_requests_total"),)] == 2.0
    streamed = (("engine_type", "unified"), ("is_streaming", "true"), ("model_name", "glm-5.3-flash"))
    assert requests[streamed + (("__sample", "sglang:num_requests_total"),)] == 1.0
    assert after["sglang:gen_throughput"][1][sched + (("__sample", "sglang:gen_throughput"),)] > 0
    http_counts = after["sglang:http_requests"][1]
    assert http_counts[(("endpoint", "/v1/chat/completions"), ("method", "POST"), ("__sample", "sglang:http_requests_total"))] == 2.0


def test_health_is_empty_and_takes_a_second_once_up(ready_server):
    import time as _time
    started = _time.monotonic()
    assert ready_server.get("/health") == (200, "")
    assert _time.monotonic() - started >= 1.0
    assert ready_server.get("/ready") == (200, "")


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                           "parameters": {"type": "object", "properties": {
                                               "city": {"type": "string"}, "days": {"type": "integer"}},
                                               "required": ["city", "days"]}}}]


def test_tool_call_as_glm47_makes_it(ready_server):
    ask = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}], "tools": TOOLS}
    status, body = ready_server.post("/v1/chat/completions", ask, key=KEY)
    assert status == 200, body
    choice = json.loads(body)["choices"][0]
    call = choice["message"]["tool_calls"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == ""
    assert call["type"] == "function" and call["index"] == 0 and len(call["id"]) == len("call_") + 24
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris", "days": 1}   # typed by the schema
    # the tool's answer comes back: a text reply
    follow = {"messages": ask["messages"] + [choice["message"], {"role": "tool", "tool_call_id": call["id"], "content": "sunny, 21 C"}],
              "tools": TOOLS}
    reply = json.loads(ready_server.post("/v1/chat/completions", follow, key=KEY)[1])["choices"][0]
    assert reply["finish_reason"] == "stop" and "sunny, 21 C" in reply["message"]["content"]
    # tool_choice none: no call; required without tools and an unknown named tool: 400 as the real one
    none = json.loads(ready_server.post("/v1/chat/completions", dict(ask, tool_choice="none"), key=KEY)[1])["choices"][0]
    assert none["message"]["tool_calls"] is None and none["finish_reason"] == "stop"
    status, body = ready_server.post("/v1/chat/completions", {"messages": ask["messages"], "tool_choice": "required"}, key=KEY)
    assert status == 400 and json.loads(body)["message"] == "Tools cannot be empty if tool choice is set to required."
    status, body = ready_server.post("/v1/chat/completions", dict(ask, tool_choice="sometimes"), key=KEY)
    assert status == 400
    status, body = ready_server.post("/v1/chat/completions", {"messages": ask["messages"], "tool_choice": {
        "type": "function", "function": {"name": "get_weather"}}}, key=KEY)
    assert status == 400 and json.loads(body)["message"] == "Tools cannot be empty if tool choice is set to a specific tool."
    named = dict(ask, tool_choice={"type": "function", "function": {"name": "nope"}})
    status, body = ready_server.post("/v1/chat/completions", named, key=KEY)
    assert status == 400 and json.loads(body)["message"] == "Tool 'nope' not found in tools list."


def test_tool_call_streamed_in_fragments(ready_server):
    ask = {"messages": [{"role": "user", "content": "What is the weather in Oslo?"}], "tools": TOOLS, "stream": True}
    status, body = ready_server.post("/v1/chat/completions", ask, key=KEY)
    assert status == 200
    chunks = [json.loads(line[6:]) for line in body.split("\n") if line.startswith("data: {")]
    calls = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks if c["choices"][0]["delta"].get("tool_calls")]
    assert calls[0]["id"].startswith("call_") and calls[0]["function"] == {"name": "get_weather", "arguments": ""}
    assert all(c["id"] is None and c["function"]["name"] is None for c in calls[1:])
    assert json.loads("".join(c["function"]["arguments"] for c in calls)) == {"city": "Oslo", "days": 1}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert body.rstrip().endswith("data: [DONE]")


def test_without_a_tool_call_parser_the_markup_stays_in_content(servers, model_dir):
    args = seed_args(model_dir, free_port(), host="127.0.0.1")
    at = args.index("--tool-call-parser")
    server = servers(args[:at] + args[at + 2:], GLM_STANDIN_SGLANG_WARMUP="0")
    server.wait_ready()
    ask = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}], "tools": TOOLS}
    choice = json.loads(server.post("/v1/chat/completions", ask, key=KEY)[1])["choices"][0]
    assert choice["message"]["tool_calls"] is None and choice["finish_reason"] == "stop"
    assert choice["message"]["content"] == "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>" \
                                           "<arg_key>days</arg_key><arg_value>1</arg_value></tool_call>"
