# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The SGLang stand-in where SGLang 0.5.21 is less kind than it looked (issue 23 §3), each against the real source
(the sglang==0.5.21 wheel, python/sglang/srt/...), and what glm.serve reads from it:

- the weights' progress bar: multi-thread loading by default (model_loader/loader.py L602, L651-690), the bar
  "Multi-thread loading shards" (model_loader/weight_utils.py L1269-1275, BAR_FORMAT of utils/common.py L1315), as
  tqdm writes it into the job's log (carriage returns, one newline at the end); the single-thread bar only when the
  flags select that loader; the deploy's progress line (plugins/module_utils/serve_progress.py) reads both;
- /health's latency follows the load (entrypoints/http_server.py L699-777, managers/scheduler.py L2092-2099,
  managers/scheduler_components/output_streamer.py L420-445);
- /metrics with --enable-priority-scheduling (observability/metrics_collector.py L1118-1190): the totals under
  priority="", one series per priority beside them; the collection's readers count the totals only.
"""

import io
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from standin_helpers import REPO, STANDIN_PYTHONPATH, http

sys.path.insert(0, os.path.join(REPO, ".collections"))
sys.path.insert(0, STANDIN_PYTHONPATH)
from ansible_collections.glm.serve.plugins.module_utils import serve_progress  # noqa: E402
from sglang import standin_tqdm  # noqa: E402  pylint: disable=wrong-import-position

KEY = "0123abcd" * 6
BAR = re.compile(r"^(?P<desc>[\w -]+): (?P<pct>[ \d]{2}\d)% Completed \| (?P<n>\d+)/(?P<total>\d+) "
                 r"\[(?:\d+:)?\d\d:\d\d<(?:(?:\d+:)?\d\d:\d\d|\?), (?:\?it/s|[ \d]\d\.\d\d(?:it/s|s/it))\] *$")

# tqdm 4.70.1 itself, bar_format=BAR_FORMAT, into a file: 3 shards of 1.3 s each (a clock stood in for time.time)
TQDM_3_SHARDS = (
    "\rMulti-thread loading shards:   0% Completed | 0/3 [00:00<?, ?it/s]"
    "\rMulti-thread loading shards:  33% Completed | 1/3 [00:01<00:02,  1.30s/it]"
    "\rMulti-thread loading shards:  67% Completed | 2/3 [00:02<00:01,  1.30s/it]"
    "\rMulti-thread loading shards: 100% Completed | 3/3 [00:03<00:00,  1.30s/it]"
    "\rMulti-thread loading shards: 100% Completed | 3/3 [00:03<00:00,  1.30s/it]\n")


def test_the_bar_is_written_as_tqdm_writes_it():
    now = [1000.0]
    out = io.StringIO()
    progress = standin_tqdm.Bar(3, standin_tqdm.MULTI_THREAD, out=out, clock=lambda: now[0])
    for _shard in range(3):
        now[0] += 1.3
        progress.update(1)
    progress.close()
    assert out.getvalue() == TQDM_3_SHARDS


def bars(text):
    """(desc, n, total) of every refresh of a tqdm bar in the text."""
    found = []
    for part in re.split(r"[\r\n]", text):
        match = BAR.match(part)
        if match:
            found.append((match.group("desc"), int(match.group("n")), int(match.group("total"))))
    return found


@pytest.mark.parametrize("extra, desc", [
    ([], "Multi-thread loading shards"),
    (["--weight-loader-prefetch-checkpoints"], "Loading safetensors checkpoint shards"),
    (["--weight-loader-prefetch-checkpoints", "--model-loader-extra-config", '{"num_threads": 4}'],
     "Multi-thread loading shards"),
    (["--weight-loader-prefetch-checkpoints", "--weight-loader-disable-mmap"], "Multi-thread loading shards"),
    (["--model-loader-extra-config", '{"enable_multithread_load": false}'], "Loading safetensors checkpoint shards"),
])
def test_the_weights_bar_the_flags_select(servers, model_dir, extra, desc):
    shards = len([n for n in os.listdir(str(model_dir)) if n.endswith(".safetensors")])
    server = servers(["--model-path", str(model_dir), "--tp-size", "8"] + extra, GLM_STANDIN_SGLANG_LOAD="0.8",
                     GLM_STANDIN_SGLANG_WARMUP="0")
    server.wait_ready()
    err = server.err_path.read_bytes().decode()      # as written (read_text would turn each \r into a newline)
    seen = bars(err)
    assert seen and {d for d, _n, _t in seen} == {desc}, err
    assert seen[0][1:] == (0, shards) and seen[-1][1:] == (shards, shards)
    written = err[err.index("\r" + desc):]
    assert written.count("\n") == 1 and written.endswith("]\n")     # one line in the log, ended when the bar closes
    assert "checkpoint shards" not in server.out and "loading shards" not in server.out    # not a log line
    # the deploy's progress line while it loads: the log as it is before the bar closes
    running = {"job_id": "12", "name": "glm-serve", "state": "RUNNING", "nodes": "node1"}
    log = server.out.split("Load weight end")[0] + err.rstrip("\n").rsplit("\r", 1)[0]
    said = serve_progress.Progress(read_log=lambda job: log).describe([running])
    assert said["phase"] == "loading" and re.search(r"loading the weights: \d+/%d shards \(\d+%%\)" % shards, said["line"])


def timed(fn):
    started = time.monotonic()
    value = fn()
    return value, time.monotonic() - started


def chat(server, stream=False, priority=None):
    body = {"model": "glm-5.3-flash", "messages": [{"role": "user", "content": "hello"}], "stream": stream}
    if priority is not None:
        body["priority"] = priority
    return http("POST", server.url + "/v1/chat/completions", key=KEY, body=body, timeout=30)


def in_background(fn):
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()
    time.sleep(0.3)
    return thread


def test_health_takes_a_second_when_idle_and_waits_for_the_load(servers, model_dir):
    """Idle: the probe's token comes back at once, the handler looks after its first 1-s sleep. Busy: the probe is
    dropped and the answer waits for a running request's next output, in whole seconds; none within
    SGLANG_HEALTH_CHECK_TIMEOUT: 503 and the real error line."""
    server = servers(["--model-path", str(model_dir), "--tp-size", "8", "--api-key", KEY],
                     GLM_STANDIN_SGLANG_WARMUP="0", GLM_STANDIN_SGLANG_DECODE="3", SGLANG_HEALTH_CHECK_TIMEOUT="5")
    server.wait_ready()
    status, took = timed(lambda: server.get("/health")[0])
    assert status == 200 and 1.0 <= took < 1.8
    # a request decoding for 3 s, not streamed and shorter than 50 tokens: its only output is its answer
    busy = in_background(lambda: chat(server))
    status, took = timed(lambda: server.get("/health")[0])
    busy.join()
    assert status == 200 and 2.5 <= took < 4.0, took
    # streamed: a token every step, so the first check after 1 s finds one
    busy = in_background(lambda: chat(server, stream=True))
    status, took = timed(lambda: server.get("/health_generate")[0])
    busy.join()
    assert status == 200 and 1.0 <= took < 1.8, took
    assert server.get("/ready")[0] == 200


def test_health_fails_when_nothing_comes_back_within_the_timeout(servers, model_dir):
    server = servers(["--model-path", str(model_dir), "--tp-size", "8", "--api-key", KEY],
                     GLM_STANDIN_SGLANG_WARMUP="0", GLM_STANDIN_SGLANG_DECODE="6", SGLANG_HEALTH_CHECK_TIMEOUT="2")
    server.wait_ready()
    busy = in_background(lambda: chat(server))
    status, took = timed(lambda: server.get("/health")[0])
    assert status == 503 and 2.0 <= took < 3.5, took
    assert re.search(r"Health check failed\. Server couldn't get a response from detokenizer for last 2 seconds\. "
                     r"tic start time: \d\d:\d\d:\d\d\. last_heartbeat time: \d\d:\d\d:\d\d", server.out)
    busy.join()


def metrics_of(text, name):
    """{labels text: value} of one family."""
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^%s(\{[^}]*\}) (\S+)$" % re.escape(name), text, re.M)}


def test_priority_scheduling_metrics_and_the_readers_count_the_totals(servers, model_dir, tmp_path):
    server = servers(["--model-path", str(model_dir), "--tp-size", "8", "--api-key", KEY, "--enable-metrics",
                      "--enable-priority-scheduling", "--default-priority-value", "0"],
                     GLM_STANDIN_SGLANG_WARMUP="0", GLM_STANDIN_SGLANG_DECODE="3")
    server.wait_ready()
    busy = [in_background(lambda: chat(server)), in_background(lambda: chat(server, priority=5))]
    text = server.get("/metrics")[1]
    running = metrics_of(text, "sglang:num_running_reqs")
    sched = '{engine_type="unified",model_name="%s",moe_ep_rank="0",pp_rank="0",priority="%s",tp_rank="0"}'
    assert running == {sched % (model_dir, ""): 2.0, sched % (model_dir, "0"): 1.0, sched % (model_dir, "5"): 1.0}
    assert metrics_of(text, "sglang:num_queue_reqs") == {sched % (model_dir, p): 0.0 for p in ("", "0", "5")}
    assert list(metrics_of(text, "sglang:token_usage")) == [sched % (model_dir, "")]
    # what the collection reads: the status playbook's filter, the router's drain, the idle watch of the server job
    from ansible_collections.glm.serve.plugins.filter.sglang_metrics import sglang_metrics
    assert sglang_metrics(text)["running"] == 2 and sglang_metrics(text)["queued"] == 0
    sys.path.insert(0, os.path.join(REPO, "roles", "router", "files"))
    import glm_router  # pylint: disable=import-error,import-outside-toplevel
    assert glm_router.busy_requests(server.url) == 2
    functions = os.path.join(REPO, "roles", "server", "files", "serve_ready.bash")
    sums = subprocess.run(["bash", "-c", 'source "$0" && glm_sglang_load', functions], input=text, capture_output=True,
                          text=True, check=True).stdout.split()
    assert sums[1:] == ["2", "0", "1"] and sums[0].isdigit(), sums     # served so far, running, queued, SGLang's
    for thread in busy:
        thread.join()
