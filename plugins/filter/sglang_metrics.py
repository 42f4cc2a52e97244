# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_metrics: the load of an SGLang server from its /metrics text, read with prometheus_client's own parser."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

# family name as prometheus_client's parser gives it (counters without _total) -> (key, how samples combine)
_WANTED = {
    'sglang:num_running_reqs': ('running', sum),
    'sglang:num_queue_reqs': ('queued', sum),
    'sglang:gen_throughput': ('gen_throughput', sum),
    'sglang:token_usage': ('token_usage', max),
    'sglang:num_used_tokens': ('used_tokens', sum),
    'sglang:max_total_num_tokens': ('max_total_tokens', max),
    'sglang:num_requests': ('requests_total', sum),
    'sglang:prompt_tokens': ('prompt_tokens_total', sum),
    'sglang:generation_tokens': ('generation_tokens_total', sum),
}


def sglang_metrics(text):
    """A dict of the server's load from SGLang's Prometheus exposition (``/metrics``): running, queued,
    gen_throughput (tokens/s), token_usage (0..1, the KV cache), used_tokens, max_total_tokens, requests_total,
    prompt_tokens_total, generation_tokens_total; a value SGLang did not export (yet) is None. Series of one priority
    (``priority="<int>"``, with --enable-priority-scheduling) are left out: their total is already counted."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        raise AnsibleFilterError('glm.serve.sglang_metrics needs the prometheus-client Python package on the machine that '
                                 'runs ansible-playbook: pip install prometheus-client (it is in the requirements.txt of glm.serve)')
    if not isinstance(text, str):
        raise AnsibleFilterError('glm.serve.sglang_metrics expects the text of /metrics, got %s' % type(text).__name__)
    values = dict((key, []) for key, _how in _WANTED.values())
    try:
        for family in text_string_to_metric_families(text):
            wanted = _WANTED.get(family.name)
            if wanted is None:
                continue
            for sample in family.samples:
                if sample.name.endswith('_created') or sample.labels.get('priority'):
                    # with --enable-priority-scheduling the total is the series with priority="" and each priority
                    # has its own series beside it (observability/metrics_collector.py L1178-1190 of SGLang 0.5.21)
                    continue
                values[wanted[0]].append(sample.value)
    except ValueError as exc:
        raise AnsibleFilterError('glm.serve.sglang_metrics: not Prometheus text (%s)' % exc)
    result = {}
    for key, how in _WANTED.values():
        result[key] = how(values[key]) if values[key] else None
    return result


class FilterModule(object):
    def filters(self):
        return {'sglang_metrics': sglang_metrics}
