# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The nvidia-smi stand-in against the output captured on a real H200, and the server job's GPU check
(roles/server/files/gpu_check.bash) against both the stand-in and the real captured CSV."""

import os
import re
import subprocess
import time

import pytest

from standin_helpers import REPO, STANDINS

SMI = os.path.join(STANDINS, "node-bin", "nvidia-smi")
CAPTURED = os.path.join(STANDINS, "python", "nvidia_smi_captured")
CHECK = os.path.join(REPO, "roles", "server", "files", "gpu_check.bash")
# The fields of the captured --query-gpu (its README), in that order.
FIELDS = ("index,uuid,name,pci.bus_id,memory.total,memory.used,memory.free,utilization.gpu,temperature.gpu,power.draw,"
          "ecc.errors.uncorrected.volatile.total,ecc.mode.current,compute_mode,persistence_mode")


def captured(name):
    with open(os.path.join(CAPTURED, name), encoding="utf-8") as handle:
        return handle.read()


def smi(args, control=None, **env):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GLM_STANDIN_") and k != "CUDA_VISIBLE_DEVICES"}
    environ.update(GLM_STANDIN_CONTROL=control or "/nonexistent", SLURMD_NODENAME="node1", **env)
    return subprocess.run([SMI] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          env=environ, stdin=subprocess.DEVNULL, check=False)


def test_the_capture_is_the_real_one():
    """The copy in the repository is the file captured on the H200 (when the reference is at hand)."""
    shared = os.path.join(REPO, "..", "shared", "reference", "captured", "h200")
    if not os.path.isdir(shared):
        pytest.skip("no ../shared/reference here")
    for name in ("nvidia-smi.txt", "nvidia-smi-q.txt", "query-gpu.csv", "query-apps.csv", "query-gpu-driver.csv"):
        with open(os.path.join(shared, name), encoding="utf-8") as handle:
            assert captured(name) == handle.read(), name


def test_one_gpu_prints_exactly_the_capture():
    one = {"CUDA_VISIBLE_DEVICES": "0"}
    assert smi(["--query-gpu=" + FIELDS, "--format=csv"], **one).stdout == captured("query-gpu.csv")
    assert smi(["--query-compute-apps=pid,process_name,used_memory", "--format=csv"], **one).stdout == captured("query-apps.csv")
    table, real = smi([], **one).stdout.splitlines(), captured("nvidia-smi.txt").splitlines()
    assert re.match(r"^\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4} {7}$", table[0])     # the time of the call
    assert table[1:] == real[1:]
    details, real = smi(["-q"], **one).stdout.splitlines(), captured("nvidia-smi-q.txt").splitlines()
    assert len(details) == len(real)
    assert [a for a, b in zip(details, real) if a != b] == [details[3]] and details[3].startswith("Timestamp")


def test_eight_gpus_one_row_each_and_the_switches():
    rows = smi(["--query-gpu=index,pci.bus_id,memory.free,ecc.errors.uncorrected.volatile.total,compute_mode",
                "--format=csv,noheader,nounits"]).stdout.splitlines()
    assert [r.split(", ")[0] for r in rows] == [str(i) for i in range(8)]
    assert len({r.split(", ")[1] for r in rows}) == 8
    env = {"GLM_STANDIN_GPU_BUSY": "node1:3", "GLM_STANDIN_GPU_ECC": "5", "GLM_STANDIN_GPU_MISSING": "node1:7 node2:0",
           "GLM_STANDIN_GPU_PROHIBITED": "node2:1"}
    rows = smi(["--query-gpu=index,memory.used,memory.free,ecc.errors.uncorrected.volatile.total,compute_mode",
                "--format=csv,noheader,nounits"], **env).stdout.splitlines()
    assert [r.split(", ")[0] for r in rows] == [str(i) for i in range(7)]           # GPU 7 of node1 is gone
    assert rows[3] == "3, 70000, 73156, 0, Default" and rows[5] == "5, 0, 143156, 2, Default"
    assert rows[1].endswith("Default")                                              # node2's switch: not here
    apps = smi(["--query-compute-apps=gpu_bus_id,pid,process_name,used_memory", "--format=csv"], **env).stdout
    assert apps.splitlines() == ["gpu_bus_id, pid, process_name, used_gpu_memory [MiB]", "00000000:5D:00.0, 4242, python3, 70000 MiB"]
    table = smi([], **env).stdout
    assert "   70000MiB / 143771MiB" in table and "|    3   N/A  N/A            4242      C   python3" in table
    details = smi(["-q", "-i", "3"], **env).stdout
    assert "Attached GPUs                                          : 1" in details
    assert re.search(r"Process ID\s+: 4242", details) and re.search(r"Used\s+: 70000 MiB", details)


def test_what_the_real_tool_refuses():
    bad = smi(["--query-gpu=index,bogus", "--format=csv"])
    assert bad.returncode == 2 and bad.stdout.strip() == 'Field "bogus" is not a valid field to query.'
    missing = smi(["-i", "9", "--query-gpu=index", "--format=csv"])
    assert missing.returncode == 6


# -- the GPU check of serve.sbatch ----------------------------------------------------------------------------


def check(want, tmp_path, fake=None, fraction="0.95", min_driver=None, **env):
    """Run glm_gpu_check WANT FRACTION with the stand-in (or a fake nvidia-smi printing fake's text) on the PATH."""
    path = [os.path.dirname(SMI)]
    if fake is not None:
        bin_dir = tmp_path / "fake-bin"
        bin_dir.mkdir(exist_ok=True)
        script = bin_dir / "nvidia-smi"
        apps = tmp_path / "apps.csv"          # the capture's processes: none (its header only, which noheader drops)
        apps.write_text("")
        script.write_text("#!/bin/sh\ncase \"$*\" in *--query-compute-apps*) cat %s;; *) cat %s;; esac\n" % (apps, fake))
        script.chmod(0o755)
        path = [str(bin_dir)]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GLM_STANDIN_")}
    environ.update(PATH=os.pathsep.join(path + ["/usr/bin", "/bin"]), GLM_STANDIN_CONTROL="/nonexistent",
                   SLURMD_NODENAME="node1", **env)
    started = time.monotonic()
    extra = [min_driver] if min_driver else []
    proc = subprocess.run(["bash", "-c", 'set -euo pipefail; . "$1"; shift; glm_gpu_check "$@"', "check", CHECK, str(want),
                           fraction] + extra,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, env=environ,
                          stdin=subprocess.DEVNULL, check=False)
    return proc, time.monotonic() - started


def test_a_healthy_node_passes_with_a_line_per_gpu(tmp_path):
    proc, took = check(8, tmp_path, CUDA_VISIBLE_DEVICES="0,1,2,3,4,5,6,7")
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(lines) == 9 and all(line.endswith(": ok") for line in lines[:8])
    assert lines[0] == ("gpu-check: node1 GPU 0 NVIDIA H200 00000000:00:06.0: 143156 of 143771 MiB free, ECC 0, Default, "
                        "no process, driver 580.159.04: ok")
    assert re.match(r"^gpu-check: node1: 8 GPUs ok \(\d+s\)$", lines[8])
    print("GPU check of a healthy 8-GPU node: %.2f s" % took)


@pytest.mark.parametrize("env, cause", [
    ({"GLM_STANDIN_GPU_BUSY": "node1:3"}, "GPU 3 (00000000:5D:00.0): 73156 of 143771 MiB free (51%, under 95%: memory "
                                          "held by another process); 1 compute process (pid 4242 python3 70000 MiB)"),
    ({"GLM_STANDIN_GPU_ECC": "node1:2"}, "GPU 2 (00000000:3A:00.0): 2 uncorrectable ECC errors (volatile)"),
    ({"GLM_STANDIN_GPU_MISSING": "node1:6"}, "7 GPUs visible, the job asked for 8 (a GPU missing: lost from the bus, "
                                             "or not given to the job)"),
    ({"GLM_STANDIN_GPU_PROHIBITED": "node1:0"}, "GPU 0 (00000000:00:06.0): compute mode Prohibited"),
])
def test_each_fault_fails_naming_the_node_the_gpu_and_the_cause(tmp_path, env, cause):
    proc, _took = check(8, tmp_path, **env)
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[-1] == "gpu-check: FAILED on node1: " + cause


def test_the_real_captured_csv_one_h200(tmp_path):
    """The check reads the CSV the real nvidia-smi printed (the capture's rows, without the header, as
    --format=csv,noheader,nounits prints them): one healthy H200 (query-gpu-driver.csv: the check's fields and
    driver_version, 580.159.04)."""
    heads, rows = captured("query-gpu-driver.csv").splitlines()[:2]
    values = dict(zip([re.sub(r" \[.*\]$", "", h) for h in heads.split(", ")], rows.split(", ")))
    asked = ("index,uuid,name,pci.bus_id,memory.total,memory.used,memory.free,ecc.errors.uncorrected.volatile.total,"
             "compute_mode,driver_version")
    assert re.search(r"fields=%s$" % re.escape(asked), open(CHECK, encoding="utf-8").read(), re.M)
    line = ", ".join(re.sub(r" (MiB|%|W)$", "", values[f]) for f in asked.split(","))
    (tmp_path / "gpus.csv").write_text(line + "\n")
    ok, _t = check(1, tmp_path, fake=str(tmp_path / "gpus.csv"))
    short, _t = check(8, tmp_path, fake=str(tmp_path / "gpus.csv"))
    assert ok.returncode == 0 and ok.stdout.splitlines()[-1].startswith("gpu-check: node1: 1 GPUs ok"), ok.stdout
    assert short.returncode == 1 and "1 GPU visible, the job asked for 8" in short.stdout


def test_no_nvidia_smi_is_a_failure_of_the_node(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    environ = {"PATH": str(empty) + ":/usr/bin:/bin", "SLURMD_NODENAME": "node1"}
    if os.path.exists("/usr/bin/nvidia-smi"):
        pytest.skip("this machine has a real nvidia-smi")
    proc = subprocess.run(["bash", "-c", '. "$1"; glm_gpu_check 8 0.95', "check", CHECK], stdout=subprocess.PIPE,
                          universal_newlines=True, env=environ, stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode == 1 and proc.stdout.strip() == "gpu-check: FAILED on node1: nvidia-smi not found (no NVIDIA driver on this node)"


# -- the driver: SGLang 0.5.21's image is CUDA 13 (torch 2.13 and flashinfer-python[cu13] 0.6.18 in the wheel's
# METADATA), which needs the NVIDIA driver 580 or later ------------------------------------------------------------


def test_driver_version_as_the_real_query_prints_it():
    """The capture of query-gpu-driver.csv (the check's fields plus driver_version, on the real H200); the switch
    gpu-driver makes the node's driver another one (the table's and -q's too)."""
    fields = ("index,uuid,name,pci.bus_id,driver_version,memory.total,memory.used,memory.free,"
              "ecc.errors.uncorrected.volatile.total,compute_mode")
    assert smi(["--query-gpu=" + fields, "--format=csv"], CUDA_VISIBLE_DEVICES="0").stdout == captured("query-gpu-driver.csv")
    old = {"GLM_STANDIN_GPU_DRIVER": "node1:570.172.08"}
    rows = smi(["--query-gpu=index,driver_version", "--format=csv,noheader,nounits"], **old).stdout.splitlines()
    assert rows == ["%d, 570.172.08" % i for i in range(8)]
    assert "Driver Version: 570.172.08     CUDA Version: 12.8" in smi([], **old).stdout
    assert re.search(r"^Driver Version\s+: 570\.172\.08$", smi(["-q"], **old).stdout, re.M)
    other_node = smi(["--query-gpu=driver_version", "--format=csv,noheader"], GLM_STANDIN_GPU_DRIVER="node2:570.172.08")
    assert other_node.stdout.splitlines()[0] == "580.159.04"


@pytest.mark.parametrize("driver, ok", [("570.172.08", False), ("575.64.05", False), ("580.159.04", True),
                                        ("590.44.01", True)])
def test_a_driver_older_than_the_minimum_fails_naming_it(tmp_path, driver, ok):
    """An old driver has its own verdict (DRIVER, status 2), which the deploy's bad-node pattern does not match: a
    driver is the partition's, not the node's fault. No GPU line says ok on such a node."""
    proc, _took = check(8, tmp_path, GLM_STANDIN_GPU_DRIVER="node1:" + driver)
    lines = proc.stdout.splitlines()
    if ok:
        assert proc.returncode == 0, proc.stdout
        assert "driver %s" % driver in lines[0]
        return
    assert proc.returncode == 2, proc.stdout
    assert lines[-1] == ("gpu-check: DRIVER on node1: NVIDIA driver %s is older than 580, the minimum for SGLang "
                         "0.5.21's image (CUDA 13)" % driver)
    assert len(lines) == 9 and all(line.endswith("driver %s: DRIVER" % driver) for line in lines[:8]), lines


@pytest.mark.parametrize("driver", ["[N/A]", "580.159.04-custom"])
def test_a_driver_that_is_not_a_version_says_so(tmp_path, driver):
    """nvidia-smi --help-query-gpu (captured/h200/help-query-gpu.txt:6-7): driver_version is "an alphanumeric
    string"; an unavailable field prints [N/A] (the table's "N/A", nvidia-smi.txt:10). Not "older than 580"."""
    proc, _took = check(8, tmp_path, GLM_STANDIN_GPU_DRIVER="node1:" + driver)
    assert proc.returncode == 2, proc.stdout
    assert proc.stdout.splitlines()[-1] == (
        'gpu-check: DRIVER on node1: NVIDIA driver "%s" (nvidia-smi\'s driver_version) is not a version number: cannot '
        "tell whether it is 580 or later, the minimum for SGLang 0.5.21's image (CUDA 13)" % driver)
    assert "older than" not in proc.stdout and ": ok" not in proc.stdout


def test_the_driver_verdict_wins_and_names_the_other_faults(tmp_path):
    """An old driver and a GPU fault: the driver's verdict (not retried elsewhere: every node of the partition
    would fail alike), the GPU's fault after it; that GPU's line says BAD, the others DRIVER."""
    proc, _took = check(8, tmp_path, GLM_STANDIN_GPU_DRIVER="570.172.08", GLM_STANDIN_GPU_ECC="node1:2")
    lines = proc.stdout.splitlines()
    assert proc.returncode == 2
    assert lines[-1] == ("gpu-check: DRIVER on node1: NVIDIA driver 570.172.08 is older than 580, the minimum for SGLang "
                         "0.5.21's image (CUDA 13); GPU 2 (00000000:3A:00.0): 2 uncorrectable ECC errors (volatile)")
    assert lines[2].endswith(": BAD") and lines[1].endswith(": DRIVER")


def test_the_minimum_is_a_parameter(tmp_path):
    environ = dict(GLM_STANDIN_GPU_DRIVER="node1:570.172.08")
    lower, _took = check(8, tmp_path, min_driver="570.100", **environ)
    higher, _took = check(8, tmp_path, min_driver="570.172.9", **environ)
    off, _took = check(8, tmp_path, min_driver="0", GLM_STANDIN_GPU_DRIVER="node1:[N/A]")
    assert lower.returncode == 0, lower.stdout
    assert higher.returncode == 2 and "older than 570.172.9" in higher.stdout
    assert off.returncode == 0 and off.stdout.splitlines()[0].endswith("driver [N/A]: ok"), off.stdout
