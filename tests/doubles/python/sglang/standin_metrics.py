"""The stand-in's /metrics: what SGLang 0.5.21 exports with --enable-metrics, for one unified (not disaggregated)
engine on one node, as prometheus_client renders it in multiprocess mode.

READ FROM (the sglang==0.5.21 wheel, python/sglang/srt/...):
- observability/metrics_collector.py: the names, types, HELP texts and buckets. Scheduler gauges (L281-354,
  L1052-1057; multiprocess_mode "mostrecent", so no pid label): num_running_reqs, num_queue_reqs, gen_throughput,
  cache_hit_rate, token_usage (0..1, rounded to 2 decimals), num_used_tokens, max_total_num_tokens; labels
  engine_type, model_name, moe_ep_rank, pp_rank, tp_rank (SchedulerMetricsCollector.init_new, L1114-1170).
  Tokenizer metrics (L1540-1760), labels engine_type, model_name, is_streaming: prompt_tokens_total,
  generation_tokens_total, num_requests_total (counters declared with their _total), time_to_first_token_seconds
  and e2e_request_latency_seconds (histograms, the default buckets of L1663-1709), recorded when a request
  finishes (observe_one_finished_request, L1780-1835); the warm-up /generate counts, /health probes do not
  (log_metrics=False, entrypoints/http_server.py L735-746).
- --enable-priority-scheduling (observability/metrics_collector.py L1118-1151, L1178-1190, QueueCount L55-72): every
  scheduler gauge gets the label priority="" (the total); num_running_reqs and num_queue_reqs add one series per
  priority seen so far, priority="<int>" ("None" for a request without one when --default-priority-value is unset:
  L64-66, managers/tokenizer_manager.py L3790-3797), kept at 0 once that priority has no request.
- The HTTP middleware's sglang:http_requests_total{endpoint,method}.
- utils/common.py L2658-2686: prometheus_client's MultiProcessCollector behind make_asgi_app; a family appears only
  once a child was touched, no _created samples, labels sorted by name, values as floats; content type
  "text/plain; version=0.0.4; charset=utf-8".
STAND-IN ACCOMMODATIONS: the gauges are current values (the real scheduler refreshes them on each prefill, every 40
decode steps and at least every 30 s when idle); gen_throughput is the tokens generated over the last 10 seconds
divided by 10 (the real one: over the last decode log interval). Only the families above; the real server exports
more (spec decoding, HiCache, per-stage latency, ...), none of which glm.serve reads.
"""

import threading
import time

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0)
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0,
               600.0, 1200.0, 1800.0, 2400.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

SCHEDULER_GAUGES = (
    ("sglang:num_running_reqs", "The number of running requests."),
    ("sglang:num_queue_reqs", "The number of requests in the waiting queue."),
    ("sglang:gen_throughput", "The generation throughput (token/s)."),
    ("sglang:cache_hit_rate", "The prefix cache hit rate."),
    ("sglang:token_usage", "The token usage."),
    ("sglang:num_used_tokens", "The number of used tokens."),
    ("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool."),
)


def _labels(**labels):
    return "{%s}" % ",".join('%s="%s"' % (k, labels[k]) for k in sorted(labels))


def _value(number):
    return repr(float(number))


def _le(bound):
    return "+Inf" if bound is None else repr(float(bound))


class Metrics:
    """Counts what the handlers report; ``render()`` is the /metrics body."""

    def __init__(self, model_name, max_total_tokens, priority_scheduling=False):
        self.model = model_name
        self.max_total = max_total_tokens
        self.priority_scheduling = priority_scheduling
        self.lock = threading.Lock()
        self.running = 0
        self.by_priority = {}       # str(priority) -> running requests, every priority seen (with priority_scheduling)
        self.running_tokens = 0
        self.finished = {}          # is_streaming -> {'requests', 'prompt', 'generation', 'ttft': [..], 'e2e': [..]}
        self.generated = []         # (time, tokens) of the last seconds, for gen_throughput
        self.http = {}              # (endpoint, method) -> count

    def http_request(self, endpoint, method):
        with self.lock:
            self.http[(endpoint, method)] = self.http.get((endpoint, method), 0) + 1

    def start(self, tokens, priority=None):
        with self.lock:
            self.running += 1
            self.running_tokens += tokens
            if self.priority_scheduling:
                self.by_priority[str(priority)] = self.by_priority.get(str(priority), 0) + 1

    def finish(self, streaming, prompt_tokens, generation_tokens, ttft, e2e, tokens, priority=None):
        with self.lock:
            self.running = max(0, self.running - 1)
            if self.priority_scheduling:
                self.by_priority[str(priority)] = max(0, self.by_priority.get(str(priority), 0) - 1)
            self.running_tokens = max(0, self.running_tokens - tokens)
            entry = self.finished.setdefault("true" if streaming else "false", {
                "requests": 0, "prompt": 0, "generation": 0, "ttft": [], "e2e": []})
            entry["requests"] += 1
            entry["prompt"] += prompt_tokens
            entry["generation"] += generation_tokens
            entry["ttft"].append(ttft)
            entry["e2e"].append(e2e)
            self.generated.append((time.time(), generation_tokens))

    def render(self):
        now = time.time()
        with self.lock:
            self.generated = [(t, n) for t, n in self.generated if now - t <= 10]
            values = {
                "sglang:num_running_reqs": self.running,
                "sglang:num_queue_reqs": 0,
                "sglang:gen_throughput": sum(n for _t, n in self.generated) / 10.0,
                "sglang:cache_hit_rate": 0.0,
                "sglang:token_usage": round(self.running_tokens / float(self.max_total), 2) if self.max_total else 0.0,
                "sglang:num_used_tokens": self.running_tokens,
                "sglang:max_total_num_tokens": self.max_total,
            }
            finished = dict((k, dict(v, ttft=list(v["ttft"]), e2e=list(v["e2e"]))) for k, v in self.finished.items())
            http = dict(self.http)
            by_priority = dict(self.by_priority)
        out = []
        base = dict(engine_type="unified", model_name=self.model, moe_ep_rank="0", pp_rank="0", tp_rank="0")
        if self.priority_scheduling:
            base["priority"] = ""
        sched = _labels(**base)
        for name, help_text in SCHEDULER_GAUGES:
            out += ["# HELP %s %s" % (name, help_text), "# TYPE %s gauge" % name, "%s%s %s" % (name, sched, _value(values[name]))]
            if name in ("sglang:num_running_reqs", "sglang:num_queue_reqs"):
                for priority in sorted(by_priority):
                    count = by_priority[priority] if name == "sglang:num_running_reqs" else 0
                    out.append("%s%s %s" % (name, _labels(**dict(base, priority=priority)), _value(count)))
        if finished:
            for name, help_text, key in (
                    ("sglang:prompt_tokens_total", "Number of prefill tokens processed.", "prompt"),
                    ("sglang:generation_tokens_total", "Number of generation tokens processed.", "generation"),
                    ("sglang:num_requests_total", "Number of requests processed.", "requests")):
                out += ["# HELP %s %s" % (name, help_text), "# TYPE %s counter" % name]
                for streaming in sorted(finished):
                    out.append("%s%s %s" % (name, _labels(engine_type="unified", is_streaming=streaming, model_name=self.model),
                                            _value(finished[streaming][key])))
            for name, help_text, key, buckets in (
                    ("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", "ttft", TTFT_BUCKETS),
                    ("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", "e2e", E2E_BUCKETS)):
                out += ["# HELP %s %s" % (name, help_text), "# TYPE %s histogram" % name]
                for streaming in sorted(finished):
                    seen = finished[streaming][key]
                    base = dict(engine_type="unified", is_streaming=streaming, model_name=self.model)
                    out.append("%s_sum%s %s" % (name, _labels(**base), _value(sum(seen))))
                    for bound in buckets + (None,):
                        count = sum(1 for s in seen if bound is None or s <= bound)
                        out.append("%s_bucket%s %s" % (name, _labels(le=_le(bound), **base), _value(count)))
                    out.append("%s_count%s %s" % (name, _labels(**base), _value(len(seen))))
        if http:
            out += ["# HELP sglang:http_requests_total Total number of HTTP requests by endpoint and method",
                    "# TYPE sglang:http_requests_total counter"]
            for (endpoint, method), count in sorted(http.items()):
                out.append("sglang:http_requests_total%s %s" % (_labels(endpoint=endpoint, method=method), _value(count)))
        return ("\n".join(out) + "\n").encode()
