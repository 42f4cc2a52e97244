# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""glm.serve's hooks in LiteLLM's proxy (the router job's key gateway; glm_gateway.py writes the config that names
them): the teams' keys and limits, and usage per team per day. Imported by LiteLLM only.

- user_api_key_auth (``general_settings.custom_auth``): the presented key's SHA-256 looked up in the registry
  ($GLM_GATEWAY_KEYS, glm_gateway.Registry). An unknown key (or none) gets a 401 that does not repeat it; a known
  key on a route other than the OpenAI-compatible ones a 403 (glm_gateway.route_allowed: with custom_auth LiteLLM
  checks no route itself, so a team's key would reach its admin and debug routes); else a UserAPIKeyAuth naming its
  team (team_id, team_alias, key_alias; api_key ``team:NAME``, which LiteLLM's limiter counts under and its 429
  names: no key, no hash) with the team's rpm_limit, tpm_limit and max_parallel_requests.
- usage_logger (``litellm_settings.callbacks``): requests, errors, limited, prompt and completion tokens per team
  per UTC day into $GLM_GATEWAY_USAGE (glm_gateway.UsageBook). An answered request: requests+1 and the tokens
  LiteLLM logged for it (the answer's ``usage``; for a stream without one from the upstream, LiteLLM's own count,
  the one it sends the client with stream_options.include_usage) in async_log_success_event. A request of a known
  team that fails after the key check: requests+1 and errors+1, or limited+1 instead of errors+1 when LiteLLM's
  limiter refused it (ProxyRateLimitError, 429), in async_post_call_failure_hook: the one hook called once per
  failed request, limiter refusals included (async_log_failure_event fires too, for the upstream's failures once
  per attempt, so it counts nothing here). A refused key is no team's request: not counted.

What this relies on in LiteLLM 1.108.7 (paths under .venv-router's site-packages/litellm/):

- proxy/auth/user_api_key_auth.py L2178-2190: custom_auth is awaited with (request, api_key) for every route that
  asks for a key, its result validated as UserAPIKeyAuth; proxy/auth/auth_exception_handler.py L73-74, L209-257:
  a ProxyException raised there is the answer (its code), after post_call_failure_hook with a UserAPIKeyAuth that
  holds the presented key as api_key and no team (so the usage logger skips it).
- types/proxy/auth/user_api_key_auth.py L224-270: an ``api_key`` that starts neither with ``sk-`` nor looks like
  a JWT is kept as it is (and copied to ``token``).
- proxy/hooks/parallel_request_limiter_v3.py L3293-3318: the limiter's per-key descriptor from the UserAPIKeyAuth's
  rpm_limit (requests a minute), tpm_limit (tokens a minute; an estimate of the request, prompt plus max_tokens, is
  reserved before it runs) and max_parallel_requests (a gauge: over it, refused at once, not queued; L1847-2007),
  keyed by its api_key, counted in the process's memory (one worker); L3664-3715: over a limit it raises
  ProxyRateLimitError, a 429 with ``retry-after`` = the window (L895: $LITELLM_RATE_LIMIT_WINDOW_SIZE, 60 s).
- proxy/utils.py L3781-3905 (post_call_failure_hook): every failure of an LLM route after the key check (the
  limiter's 429 included) calls each callback's async_post_call_failure_hook (L3883) with the request's
  UserAPIKeyAuth; integrations/custom_logger.py L190-194, L474-480: the hooks' signatures.
"""

import os

from fastapi import status
from litellm.integrations.custom_logger import CustomLogger
from litellm.proxy._types import ProxyException, UserAPIKeyAuth

import glm_gateway

try:
    from litellm.proxy.common_utils.proxy_rate_limit_error import ProxyRateLimitError
except ImportError:   # another LiteLLM: a 429 raised by the proxy counts as limited
    ProxyRateLimitError = None

TEAM_PREFIX = 'team:'


def _registry():
    return glm_gateway.shared_registry(os.environ[glm_gateway.ENV_KEYS])


def _book():
    return glm_gateway.shared_usage_book(os.environ[glm_gateway.ENV_USAGE])


async def user_api_key_auth(request, api_key):
    """LiteLLM's custom_auth: the team of API_KEY with its limits; a 401 for an unknown key, a 403 for a route
    other than the OpenAI-compatible ones (glm_gateway.route_allowed)."""
    found = _registry().lookup(api_key)
    if found is None:
        raise ProxyException(message='Invalid API key: not one of the keys this gateway accepts.',
                             type='auth_error', param='api_key', code=status.HTTP_401_UNAUTHORIZED)
    if not glm_gateway.route_allowed(request.url.path):
        raise ProxyException(message='This gateway serves the OpenAI-compatible API only (/v1/chat/completions, '
                             '/v1/completions, /v1/models, /v1/responses, /v1/embeddings).',
                             type='auth_error', param='route', code=status.HTTP_403_FORBIDDEN)
    team = found['team']
    return UserAPIKeyAuth(api_key=TEAM_PREFIX + team, key_alias=team, team_id=team, team_alias=team,
                          rpm_limit=found['rpm'], tpm_limit=found['tpm'], max_parallel_requests=found['max_parallel'])


def _team_of_kwargs(kwargs):
    """The team of a logged call: the UserAPIKeyAuth's team_id as LiteLLM put it in the call's metadata."""
    places = [(kwargs.get('standard_logging_object') or {}).get('metadata')]
    litellm_params = kwargs.get('litellm_params') or {}
    places += [litellm_params.get('metadata'), litellm_params.get('litellm_metadata')]
    for metadata in places:
        if isinstance(metadata, dict):
            team = metadata.get('user_api_key_team_id')
            if team:
                return team
    return None


def _usage_of(kwargs, response_obj):
    standard = kwargs.get('standard_logging_object') or {}
    prompt, completion = standard.get('prompt_tokens'), standard.get('completion_tokens')
    if prompt is None and completion is None:
        usage = getattr(response_obj, 'usage', None) or {}
        get = usage.get if isinstance(usage, dict) else lambda name: getattr(usage, name, None)
        prompt, completion = get('prompt_tokens'), get('completion_tokens')
    return int(prompt or 0), int(completion or 0)


def _limited(exception):
    if ProxyRateLimitError is not None:
        return isinstance(exception, ProxyRateLimitError)
    return getattr(exception, 'status_code', None) == 429


class UsageLogger(CustomLogger):
    """Counts each request of a known team in the usage book (see the module's docstring)."""

    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
        team = _team_of_kwargs(kwargs)
        if team is None:
            return
        prompt, completion = _usage_of(kwargs, response_obj)
        _book().add(team, requests=1, prompt_tokens=prompt, completion_tokens=completion)

    async def async_post_call_failure_hook(self, request_data, original_exception, user_api_key_dict,
                                           traceback_str=None):
        team = getattr(user_api_key_dict, 'team_id', None)
        if not team or not str(getattr(user_api_key_dict, 'api_key', '') or '').startswith(TEAM_PREFIX):
            return None       # no known key: refused by user_api_key_auth, not a team's request
        if _limited(original_exception):
            _book().add(team, requests=1, limited=1)
        else:
            _book().add(team, requests=1, errors=1)
        return None


usage_logger = UsageLogger()
