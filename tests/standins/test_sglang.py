"""The SGLang server stand-in: start-up phases, auth, routes, --config, failures, SIGTERM."""

import json
import os
import signal
import sys

import pytest

from standin_helpers import free_port, http, wait_for

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "sglang_cli"))
import check_args  # noqa: E402  pylint: disable=wrong-import-position,import-error

KEY = "0123abcd" * 6
SEED_SERVE = """srun --container-image="$IMAGE" \\
  --ntasks=1 --gres=gpu:8 --cpus-per-task="$SLURM_CPUS_ON_NODE" \\
  bash -c 'unset NCCL_NET; exec python3 -m sglang.launch_server \\
    --model-path "$MODEL" \\
    --served-model-name glm-5.3-flash \\
    --tp-size 8 \\
    --ep-size 8 \\
    --mem-fraction-static 0.75 \\
    --kv-cache-dtype bfloat16 \\
    --dsa-prefill-backend tilelang \\
    --dsa-decode-backend tilelang \\
    --moe-runner-backend deep_gemm \\
    --reasoning-parser glm45 \\
    --tool-call-parser glm47 \\
    --api-key "$GLM_API_KEY" \\
    --host 0.0.0.0 \\
    --port 30000'
"""
STRAWBERRY = "How many times does the letter r appear in strawberry?"


def seed_args(model_dir, port, **replace):
    """The seed guide's server arguments, with $MODEL / $GLM_API_KEY filled in and a free port."""
    args = check_args.extract_args(SEED_SERVE)
    values = {"$MODEL": str(model_dir), "$GLM_API_KEY": KEY, "30000": str(port)}
    args = [values.get(a, a) for a in args]
    for flag, value in replace.items():
        args[args.index("--" + flag.replace("_", "-")) + 1] = value
    return args


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
                     CUDA_VISIBLE_DEVICES="0,1,2,3,4,5,6,7", SLURM_JOB_ID="1")
    server.wait_ready()
    assert "--host 0.0.0.0 on localhost: listening on 127.0.0.1:%d" % server.port in server.out
    assert server.get("/health")[0] == 200


def test_no_gpus_in_a_slurm_job_without_gres(servers, model_dir):
    server = servers(["--model-path", str(model_dir)], SLURM_JOB_ID="7")
    assert server.wait_exit() == 1
    assert "No CUDA GPUs are available" in server.err
