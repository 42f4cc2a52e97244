"""How long the stand-in's /health takes: as SGLang 0.5.21's, it follows the server's load.

READ FROM (the sglang==0.5.21 wheel, python/sglang/srt/...):
- entrypoints/http_server.py L699-777 (health_generate, for /health and /health_generate): 503 at once while starting
  or shutting down; with SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION false (environ.py L347, EnvBool L143-150) /health
  answers 200 at once; else it sends a 1-token generation and then loops: ``await asyncio.sleep(1)``, and answers 200
  as soon as the tokenizer manager received ANY output from the scheduler after the probe was sent
  (``last_receive_tstamp > tic``); after HEALTH_CHECK_TIMEOUT seconds (L201: env SGLANG_HEALTH_CHECK_TIMEOUT, default
  20) it logs ``Health check failed. Server couldn't get a response from detokenizer for last 20 seconds. ...`` and
  answers 503. So: at least 1 s, in whole seconds, up to the timeout.
- managers/scheduler.py L2092-2099: the probe itself is dropped when the scheduler is not fully idle (L5011-5025): the
  answer then waits for the running requests' next output.
- managers/scheduler_components/output_streamer.py L420-445: a running request sends output when it finishes, every
  token when streamed (stream_interval, default 1), and every SGLANG_FORCE_STREAM_INTERVAL (environ.py L641: 50)
  tokens when not streamed.
STAND-IN ACCOMMODATION: an idle server's probe is answered at once (a real 1-token forward takes milliseconds); a
request's tokens are spread evenly over the seconds it decodes (the switch sglang-decode).
"""

import itertools
import os
import threading
import time

FORCE_STREAM_INTERVAL = 50


def health_timeout():
    try:
        return int(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", 20))
    except ValueError:
        return 20


def generation_enabled():
    return os.environ.get("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true").lower() not in ("false", "0", "no", "n")


class Outputs:
    """When the scheduler last sent an output back (the tokenizer manager's last_receive_tstamp)."""

    def __init__(self, clock=time.time):
        self.clock = clock
        self.lock = threading.Lock()
        self.last = 0.0
        self.running = {}       # id -> (start, seconds, tokens, streamed)
        self.ids = itertools.count()

    def begin(self, seconds, tokens, streamed):
        with self.lock:
            ident = next(self.ids)
            self.running[ident] = (self.clock(), max(0.0, seconds), max(1, int(tokens)), bool(streamed))
            return ident

    def end(self, ident):
        with self.lock:
            self.running.pop(ident, None)
            self.last = max(self.last, self.clock())

    def idle(self):
        with self.lock:
            return not self.running

    def probe(self):
        """The health probe's own token, on an idle scheduler."""
        with self.lock:
            self.last = max(self.last, self.clock())

    def last_receive(self):
        now = self.clock()
        with self.lock:
            latest = self.last
            for start, seconds, tokens, streamed in self.running.values():
                every = 1 if streamed else FORCE_STREAM_INTERVAL
                if seconds <= 0 or tokens < every:
                    continue
                period = seconds / tokens * every        # seconds between two outputs of this request
                sent = int(min(now - start, seconds) / period)
                if sent:
                    latest = max(latest, start + sent * period)
            return latest


def wait_healthy(outputs, sleep=time.sleep, clock=time.time, log=None):
    """health_generate's loop once the server is up: 200, or 503 after the timeout (logged as the real one)."""
    if not generation_enabled():
        return 200
    tic = clock()
    if outputs.idle():
        outputs.probe()
    timeout = health_timeout()
    while clock() < tic + timeout:
        sleep(1)
        if outputs.last_receive() > tic:
            return 200
    if log:
        log("Health check failed. Server couldn't get a response from detokenizer for last %d seconds. tic start "
            "time: %s. last_heartbeat time: %s" % (timeout, time.strftime("%H:%M:%S", time.localtime(tic)),
                                                   time.strftime("%H:%M:%S", time.localtime(outputs.last_receive()))))
    return 503
