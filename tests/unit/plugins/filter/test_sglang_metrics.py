# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sglang_metrics filter over SGLang 0.5.21's exposition (names, labels and layout as prometheus_client renders them
in multiprocess mode; values invented)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.glm.serve.plugins.filter.sglang_metrics import sglang_metrics

SCHED = '{engine_type="unified",model_name="glm-5.3-flash",moe_ep_rank="0",pp_rank="0",tp_rank="0"}'
TEXT = '''# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs%(s)s 3.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs%(s)s 1.0
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput%(s)s 412.5
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage%(s)s 0.12
# HELP sglang:num_requests_total Number of requests processed.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{engine_type="unified",is_streaming="false",model_name="glm-5.3-flash"} 10.0
sglang:num_requests_total{engine_type="unified",is_streaming="true",model_name="glm-5.3-flash"} 4.0
# HELP sglang:e2e_request_latency_seconds Histogram of End-to-end request latency in seconds
# TYPE sglang:e2e_request_latency_seconds histogram
sglang:e2e_request_latency_seconds_sum{engine_type="unified",is_streaming="false",model_name="glm-5.3-flash"} 2.5
sglang:e2e_request_latency_seconds_bucket{engine_type="unified",is_streaming="false",le="+Inf",model_name="glm-5.3-flash"} 10.0
sglang:e2e_request_latency_seconds_count{engine_type="unified",is_streaming="false",model_name="glm-5.3-flash"} 10.0
''' % {'s': SCHED}


def test_the_load_from_the_exposition():
    load = sglang_metrics(TEXT)
    assert load['running'] == 3 and load['queued'] == 1 and load['gen_throughput'] == 412.5
    assert load['token_usage'] == 0.12
    assert load['requests_total'] == 14            # summed over is_streaming
    assert load['generation_tokens_total'] is None  # not exported yet (no request finished in that family)


def test_not_metrics_is_a_clear_error():
    with pytest.raises(AnsibleFilterError, match='not Prometheus text'):
        sglang_metrics('sglang:num_running_reqs{engine_type="unified" 1.0\n')
    with pytest.raises(AnsibleFilterError, match='expects the text of /metrics'):
        sglang_metrics(None)


def _priority(labels, priority):
    return labels.replace(',tp_rank=', ',priority="%s",tp_rank=' % priority)


# With --enable-priority-scheduling SGLang 0.5.21 labels every scheduler gauge with priority="" (observability/
# metrics_collector.py L1150-1151) and writes running and queued twice: the total under priority="" and one series per
# priority seen, priority="<int>" (L1178-1190, QueueCount of L55-72); "None" for requests without a priority when no
# --default-priority-value is set (L64-66). Here 3 running (2 at priority 0, 1 at 5) and 1 queued (at 5).
PRIORITY_TEXT = '''# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs%(total)s 3.0
sglang:num_running_reqs%(p0)s 2.0
sglang:num_running_reqs%(p5)s 1.0
sglang:num_running_reqs%(pnone)s 0.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs%(total)s 1.0
sglang:num_queue_reqs%(p0)s 0.0
sglang:num_queue_reqs%(p5)s 1.0
sglang:num_queue_reqs%(pnone)s 0.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage%(total)s 0.12
''' % {'total': _priority(SCHED, ''), 'p0': _priority(SCHED, '0'), 'p5': _priority(SCHED, '5'),
       'pnone': _priority(SCHED, 'None')}


def test_priority_scheduling_counts_the_total_only():
    load = sglang_metrics(PRIORITY_TEXT)
    assert load['running'] == 3 and load['queued'] == 1
    assert load['token_usage'] == 0.12
