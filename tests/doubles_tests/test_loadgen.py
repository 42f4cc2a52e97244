# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The test bed's load generator (tests/tooling/loadgen.py) against an SGLang stand-in: it sends what it says at
the rate it says, counts every answer (streamed ones to their [DONE]), counts a server that goes away, refuses a
host outside the test bed, and keeps the key out of its argv and its output."""

import json
import os
import subprocess
import sys
import threading
import time

from standin_helpers import KEY, REPO, free_port, seed_args

LOADGEN = os.path.join(REPO, "tests", "tooling", "loadgen.py")


def loadgen(tmp_path, url, *args, key=KEY):
    key_file = tmp_path / ("key-%s" % len(os.listdir(tmp_path)))
    key_file.write_text(key + "\n", encoding="utf-8")
    os.chmod(key_file, 0o600)
    return subprocess.Popen([sys.executable, LOADGEN, "--url", url, "--key-file", str(key_file)] + list(args),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(proc, timeout=60):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def test_counts_every_answer_streamed_and_not_and_keeps_the_key_out(servers, model_dir, tmp_path):
    server = servers(seed_args(model_dir, free_port(), host="127.0.0.1"), GLM_STANDIN_SGLANG_WARMUP="0.2")
    server.wait_ready()
    log = tmp_path / "requests.jsonl"
    proc = loadgen(tmp_path, server.url + "/v1", "--rate", "20", "--duration", "2", "--streamed", "0.25",
                   "--log", str(log))
    assert KEY not in " ".join(proc.args)                                   # the key file's path, not the key
    rc, out, err = finished(proc)
    assert rc == 0, err
    got = json.loads(out)
    assert got["sent"] == 40 and got["outcomes"] == {"200": 40} and got["failed"] == 0, got
    assert got["streamed"] == {"200": 10} and got["plain"] == {"200": 30}, got     # every 4th request streamed
    assert got["latency_ms"]["p50"] > 0 and got["ttft_ms"]["p50"] > 0
    rows = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 40 and sorted(r["i"] for r in rows) == list(range(40))
    assert KEY not in out + err + log.read_text(encoding="utf-8")

    wrong = loadgen(tmp_path, server.url + "/v1", "--rate", "10", "--duration", "1", key="not-the-key")
    rc, out, err = finished(wrong)
    got = json.loads(out)
    assert rc == 0 and got["outcomes"] == {"401": 10} and got["failed"] == 10, got


def test_a_server_that_goes_away_is_counted_not_lost(servers, model_dir, tmp_path):
    server = servers(seed_args(model_dir, free_port(), host="127.0.0.1"), GLM_STANDIN_SGLANG_WARMUP="0.2")
    server.wait_ready()
    proc = loadgen(tmp_path, server.url + "/v1", "--rate", "10", "--duration", "4", "--timeout", "5")
    time.sleep(1.0)
    threading.Thread(target=server.stop).start()
    rc, out, err = finished(proc)
    assert rc == 0, err
    got = json.loads(out)
    outcomes = got["outcomes"]
    assert got["sent"] == 40 and sum(outcomes.values()) + got["unfinished"] == 40, got
    # about 1 s served, then the server stops (within a second or so, however busy the machine): 2 s or more refused
    assert outcomes.get("200", 0) >= 5 and got["failed"] >= 10, got
    assert set(outcomes) <= {"200", "refused", "reset", "stream_broken", "error", "timeout"}, got


def test_refuses_hosts_outside_the_test_bed_and_bad_bounds(tmp_path):
    for args, words in [(["--url", "http://192.0.2.1:30000/v1"], "not a loopback address"),
                        (["--url", "http://127.0.0.1:1/v1", "--duration", "7200"], "--duration"),
                        (["--url", "http://127.0.0.1:1/v1", "--streamed", "2"], "--streamed"),
                        (["--url", "ftp://127.0.0.1/v1"], "http://HOST:PORT/v1")]:
        proc = loadgen(tmp_path, args[1], *args[2:])
        rc, out, err = finished(proc, 30)
        assert rc == 2 and words in err and out == "", (args, err)
    # a host named with --allow-host passes the check (nothing listens there: every request is refused, counted)
    proc = loadgen(tmp_path, "http://localhost:%d/v1" % free_port(), "--rate", "5", "--duration", "1",
                   "--allow-host", "localhost")
    rc, out, err = finished(proc)
    assert rc == 0 and json.loads(out)["outcomes"] == {"refused": 5}, (out, err)
