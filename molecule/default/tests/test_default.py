# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Verify the deploy on the local cluster, as the login user, over SSH (testinfra's ansible backend)."""

import re

import pytest

SEED_SERVE = [
    "#SBATCH --partition=compute-h100",
    "#SBATCH --nodes=1",
    "#SBATCH --gres=gpu:8",
    "#SBATCH --exclusive",
    "#SBATCH --mem=0",
    "#SBATCH --output=%x-%j.out",
    "unset NCCL_NET",
    "--served-model-name glm-5.3-flash",
    "--tp-size 8",
    "--ep-size 8",
    "--mem-fraction-static 0.75",
    "--kv-cache-dtype bfloat16",
    "--dsa-prefill-backend tilelang",
    "--dsa-decode-backend tilelang",
    "--moe-runner-backend deep_gemm",
    "--reasoning-parser glm45",
    "--tool-call-parser glm47",
    "--host 0.0.0.0",
    "--port 30000",
    "export PYTHONUNBUFFERED=1",
]
SEED_DOWNLOAD = [
    "#SBATCH --partition=compute-h100",
    "#SBATCH --nodes=1",
    "#SBATCH --ntasks=1",
    "#SBATCH --cpus-per-task=16",
    "#SBATCH --mem=64G",
    "#SBATCH --time=06:00:00",
    "#SBATCH --output=%x-%j.out",
    "--container-image=docker://lmsysorg/sglang:v0.5.21",
    "hf download zai-org/GLM-5.3-Flash --local-dir \"$MODEL\"",
]


@pytest.fixture(scope="module")
def cfg(host):
    v = host.ansible.get_variables()
    home = host.user().home
    work = v["glm_work_dir"].replace("~", home, 1)
    return {
        "work": work,
        "serve": v["glm_serve_job_name"],
        "download": v["glm_download_job_name"],
        "key": work + "/api-key",
    }


@pytest.fixture(scope="module")
def serve_job(host, cfg):
    out = host.check_output("squeue --me --noheader --name=%s --format='%%i|%%T|%%N'", cfg["serve"])
    rows = [line.split("|") for line in out.splitlines() if line.strip()]
    assert len(rows) == 1, rows
    return {"id": rows[0][0], "state": rows[0][1], "node": rows[0][2]}


def curl_status(host, url, with_key, key_file):
    header = '-H @<(printf "Authorization: Bearer %%s\\n" "$(cat %s)")' % key_file if with_key else ""
    # bash reads the key with its builtins: it is never on curl's (or any) command line
    cmd = "bash -c '%s'" % ("curl -s -o /dev/null -m 5 -w %%{http_code} %s %s" % (header, url)).replace("'", "'\\''")
    return host.check_output(cmd)


def test_key_is_private_and_48_hex(host, cfg):
    key = host.file(cfg["key"])
    assert key.is_file
    assert key.mode == 0o600
    assert key.user == host.user().name
    assert host.file(cfg["work"]).mode == 0o700
    # checked on the host: the key never comes back to the test
    assert host.run("grep -Eqx '[0-9a-f]{48}' %s", cfg["key"]).rc == 0


def test_scripts_carry_the_seed(host, cfg):
    serve = host.file(cfg["work"] + "/serve.sbatch")
    assert serve.mode == 0o600
    text = serve.content_string
    for flag in SEED_SERVE:
        assert flag in text, flag
    assert "#SBATCH --job-name=%s" % cfg["serve"] in text
    assert "--api-key" not in text
    # srun -c implies --exact; the step already has every CPU of the job on its node
    assert "--cpus-per-task" not in text
    download = host.file(cfg["work"] + "/download.sbatch").content_string
    for flag in SEED_DOWNLOAD:
        assert flag in download, flag
    assert "HF_XET_HIGH_PERFORMANCE=1" in download


def test_serve_job_is_running(serve_job):
    assert serve_job["state"] == "RUNNING"
    assert serve_job["node"]


def test_models_answers_with_the_key_only(host, cfg, serve_job):
    url = "http://%s:30000/v1/models" % serve_job["node"]
    assert curl_status(host, url, True, cfg["key"]) == "200"
    assert curl_status(host, url, False, cfg["key"]) == "401"


def test_endpoint_file(host, cfg, serve_job):
    f = host.file(cfg["work"] + "/endpoint")
    assert f.mode == 0o600
    assert "GLM_BASE_URL=http://%s:30000/v1" % serve_job["node"] in f.content_string
    assert "GLM_MODEL=glm-5.3-flash" in f.content_string


def test_job_logs_are_private(host, cfg, serve_job):
    logs = host.check_output("ls %s", cfg["work"]).split()
    ours = [name for name in logs if re.match(r"(%s|%s)-\d+\.out$" % (re.escape(cfg["serve"]), re.escape(cfg["download"])), name)]
    assert "%s-%s.out" % (cfg["serve"], serve_job["id"]) in ours
    for name in ours:
        assert host.file(cfg["work"] + "/" + name).mode == 0o600, name


def test_key_is_on_no_command_line_and_in_no_script(host, cfg, serve_job):
    # The check runs on the host and reads the key there; only a count comes back.
    script = (
        "import os,sys\n"
        "k=open(sys.argv[1]).read().strip().encode()\n"
        "n=0\n"
        "for p in os.listdir('/proc'):\n"
        "    if p.isdigit() and int(p)!=os.getpid():\n"
        "        try: n+=k in open('/proc/%s/cmdline'%p,'rb').read()\n"
        "        except OSError: pass\n"
        "for f in sys.argv[2:]:\n"
        "    n+=k in open(f,'rb').read()\n"
        "print(n)\n"
    )
    job_script = host.check_output("scontrol write batch_script %s - 2>/dev/null || true", serve_job["id"])
    assert "--api-key" not in job_script
    count = host.check_output(
        "python3 -c %s %s %s %s", script, cfg["key"], cfg["work"] + "/serve.sbatch", cfg["work"] + "/download.sbatch")
    assert count.strip() == "0"
