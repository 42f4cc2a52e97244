# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Cross-check: the REAL SGLang 0.5.21 parser and the stand-in's give the same verdict on the same command lines.

Needs the venv made by tests/tooling/sglang_cli/setup.sh (default .venv-sglang in the repo root, or $SGLANG_CLI_VENV);
skipped, with the reason, when it is missing. Only the parser is used: launch_server is never called.
"""

import json
import os
import subprocess

import pytest

from standin_helpers import PYTHON, REPO, SEED_SERVE_TEMPLATE

VENV = os.environ.get("SGLANG_CLI_VENV") or os.path.join(REPO, ".venv-sglang")
VENV_PYTHON = os.path.join(VENV, "bin", "python")
CHECK_ARGS = os.path.join(REPO, "tests", "tooling", "sglang_cli", "check_args.py")

SEED_HEAD = """#!/bin/bash
set -euo pipefail
WORK=$HOME/glm
IMAGE=$WORK/sglang.sqsh
export MODEL=$WORK/GLM-5.3-Flash
export GLM_API_KEY=$(cat "$WORK/api-key")
""" + SEED_SERVE_TEMPLATE
EAGLE = """    --speculative-algorithm EAGLE \\
    --speculative-num-steps 5 \\
    --speculative-eagle-topk 1 \\
    --speculative-num-draft-tokens 6 \\
"""
ARGS_FORM = """srun --container-image="$IMAGE" --ntasks=1 --gres=gpu:8 \\
  bash -c 'unset NCCL_NET; exec python3 -m sglang.launch_server "$@"' sglang \\
    --model-path "$MODEL" \\
    --served-model-name glm-5.3-flash \\
    --tp-size 8 \\
    --ep-size 8 \\
    --mem-fraction-static 0.75 \\
    --kv-cache-dtype bfloat16 \\
    --reasoning-parser glm45 \\
    --tool-call-parser glm47 \\
    --config "$CONFIG" \\
    --host 0.0.0.0 \\
    --port 30000
"""
BASE = ["--model-path", "/m", "--tp-size", "8"]

# name -> expected rc; every case must get the same (rc, message) from both parsers.
EXPECTED = {
    "seed-default": 0,
    "seed-low-latency-eagle": 0,
    "args-form-with-config": 0,
    "fp8-kv-parses (fails only at start)": 0,
    "common-flags": 0,
    "config-with-flags": 0,
    "unknown-flag": 2,
    "renamed-cuda-graph-max-bs (ambiguous)": 2,
    "bad-kv-cache-dtype": 2,
    "bad-reasoning-parser": 2,
    "bad-tool-call-parser": 2,
    "bad-moe-runner-backend": 2,
    "bad-dsa-backend": 2,
    "bad-int": 2,
    "missing-model-path": 2,
    "config-unknown-key": 2,
    "config-not-yaml": 1,
    "config-boolean-optional": 1,
}


def make_cases(tmp_path):
    def write(name, text):
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return str(path)

    config_ok = write("ok.yaml", "api-key: 'k'\nenable-metrics: true\ntrust-remote-code: false\nwatchdog-timeout: 600\n")
    return [
        {"name": "seed-default", "file": write("serve.sbatch", SEED_HEAD.format(mem="0.75", extra=""))},
        {"name": "seed-low-latency-eagle", "file": write("serve-ll.sbatch", SEED_HEAD.format(mem="0.70", extra=EAGLE))},
        {"name": "args-form-with-config", "file": write("serve-args.sbatch", ARGS_FORM)},
        {"name": "fp8-kv-parses (fails only at start)", "argv": BASE + ["--kv-cache-dtype", "fp8_e4m3"]},
        {"name": "common-flags", "argv": BASE + [
            "--context-length", "128k", "--chunked-prefill-size", "8192", "--max-running-requests", "64",
            "--cuda-graph-max-bs-decode", "64", "--trust-remote-code", "--log-level", "warning", "--enable-metrics",
            "--watchdog-timeout", "600", "--ep", "8", "--api-key", "k", "--served-model-name", "x", "--host", "0.0.0.0"]},
        {"name": "config-with-flags", "argv": BASE + ["--config", config_ok, "--port", "30001"]},
        {"name": "unknown-flag", "argv": BASE + ["--no-such-flag", "1"]},
        {"name": "renamed-cuda-graph-max-bs (ambiguous)", "argv": BASE + ["--cuda-graph-max-bs", "64"]},
        {"name": "bad-kv-cache-dtype", "argv": BASE + ["--kv-cache-dtype", "fp8"]},
        {"name": "bad-reasoning-parser", "argv": BASE + ["--reasoning-parser", "glm47"]},
        {"name": "bad-tool-call-parser", "argv": BASE + ["--tool-call-parser", "glm5"]},
        {"name": "bad-moe-runner-backend", "argv": BASE + ["--moe-runner-backend", "deepgemm"]},
        {"name": "bad-dsa-backend", "argv": BASE + ["--dsa-decode-backend", "flashinfer"]},
        {"name": "bad-int", "argv": BASE + ["--tp-size", "eight"]},
        {"name": "missing-model-path", "argv": ["--tp-size", "8"]},
        {"name": "config-unknown-key", "argv": BASE + ["--config", write("unknown.yaml", "no-such-key: 1\n")]},
        {"name": "config-not-yaml", "argv": BASE + ["--config", write("conf.txt", "api-key: k\n")]},
        {"name": "config-boolean-optional", "argv": BASE + ["--config", write("bo.yaml", "dcp-replicate-q-proj: true\n")]},
    ]


def run_cases(python, parser, cases_file):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    result = subprocess.run([python, CHECK_ARGS, "--parser", parser, "--cases", str(cases_file)], capture_output=True, text=True,
                            timeout=120, env=env, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return {case["name"]: case for case in json.loads(result.stdout)}


def test_real_and_standin_parsers_agree(tmp_path):
    if not os.access(VENV_PYTHON, os.X_OK):
        reason = "no real SGLang parser venv at %s: run tests/tooling/sglang_cli/setup.sh to make it" % VENV
        print(reason)
        pytest.skip(reason)
    cases = make_cases(tmp_path)
    assert {c["name"] for c in cases} == set(EXPECTED)
    cases_file = tmp_path / "cases.json"
    cases_file.write_text(json.dumps(cases), encoding="utf-8")
    real = run_cases(VENV_PYTHON, "real", cases_file)
    standin = run_cases(PYTHON, "standin", cases_file)
    report = []
    for name in EXPECTED:
        report.append("%-40s real rc=%s standin rc=%s  %s" % (name, real[name]["rc"], standin[name]["rc"], real[name]["message"][:110]))
    print("\n".join(report))
    for name, expected_rc in EXPECTED.items():
        assert real[name]["argv"] == standin[name]["argv"], name
        assert real[name]["rc"] == expected_rc, (name, real[name])
        assert (standin[name]["rc"], standin[name]["message"]) == (real[name]["rc"], real[name]["message"]), name


def test_extract_args_reads_both_script_forms(tmp_path):
    """No venv needed: the command-line extraction used by check_args.py."""
    import sys  # pylint: disable=import-outside-toplevel
    sys.path.insert(0, os.path.dirname(CHECK_ARGS))
    import check_args  # pylint: disable=import-outside-toplevel,import-error
    seed = check_args.extract_args(SEED_HEAD.format(mem="0.70", extra=EAGLE))
    assert seed[:2] == ["--model-path", "$MODEL"] and seed[-2:] == ["--port", "30000"]
    assert seed[seed.index("--speculative-algorithm") + 1] == "EAGLE"
    args_form = check_args.extract_args(ARGS_FORM)
    assert args_form[:2] == ["--model-path", "$MODEL"] and "sglang" not in args_form
    assert args_form[args_form.index("--config") + 1] == "$CONFIG"
    assert tmp_path.exists()
