# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The key gateway of the router job: LiteLLM's proxy (litellm[proxy] 1.108.7, no database) on the public port, in
front of SGLang's Model Gateway (smg) on the router node's loopback (docs/dev/gateway-keys.md). Standard library only
(LiteLLM is imported in main() alone, in the proxy's own process): the router launcher imports it to write the
proxy's config and start it; glm_gateway_hooks.py, which LiteLLM loads, imports it for the registry and usage book.

- proxy_config(): the LiteLLM config (a dict, written as JSON, which LiteLLM's YAML loader reads): one model routed
  to smg's OpenAI-compatible API through the ``openai/`` provider, the upstream key and the master key named as
  ``os.environ/...`` (never in the file), glm_gateway_hooks.user_api_key_auth as ``custom_auth`` and
  glm_gateway_hooks.usage_logger as callback, no retries and no cooldown (smg retries and knows the replicas).
- proxy_argv(): ``PYTHON glm_gateway.py --config C --host H --port P --num_workers 1`` (main(): LiteLLM's CLI; one
  worker: the limiter counts in that process's memory), ``--ssl_certfile_path/--ssl_keyfile_path`` for HTTPS.
  Nothing secret on it.
- proxy_env(): the child's environment: the keys and paths, offline and quiet settings, this folder on PYTHONPATH.
- Registry: the teams' keys (SHA-256 hex only) and limits, re-read when the file changes; fails closed.
- UsageBook: requests, errors, limited, prompt and completion tokens per UTC day per team, written atomically (0600)
  at most every flush_interval seconds and at exit, going on from the file's content when the gateway restarts.
- route_allowed(): the routes a team's key may use (the hooks answer 403 to the others).

What this relies on in LiteLLM 1.108.7 (paths under .venv-router's site-packages/litellm/):

- proxy/proxy_cli.py L771-772 (``--host``, ``--port``; also read from $HOST/$PORT), L773-781 (``--num_workers``,
  $NUM_WORKERS), L809-823 (``--debug``, ``--detailed_debug``; also from $DEBUG/$DETAILED_DEBUG: dropped from the
  child's environment), L940-953 (``--ssl_keyfile_path``, ``--ssl_certfile_path``), L1626-1631 (given to uvicorn as
  ssl_keyfile/ssl_certfile), L1086 (run_server, the click command main() calls), L55-57 and __init__.py L30-31 (a
  ``.env`` file is loaded while $LITELLM_MODE is DEV: PRODUCTION here).
- uvicorn 0.55 (its dependency) server.py L329-346: on SIGTERM/SIGINT it shuts down gracefully, puts back the
  handlers it found and raises the signal again; main() installs handlers that exit through SystemExit, so atexit
  (the usage book's last write) runs.
- proxy/types_utils/utils.py L15-64 (get_instance_fn): ``custom_auth`` (proxy/proxy_server.py L6913-6918) and
  callbacks (proxy/common_utils/callback_utils.py L391, L410), named ``module.attribute``, are loaded from
  ``<config's folder>/module.py`` by spec_from_file_location (a new module object each time, not in sys.modules),
  else by importlib.import_module (this folder is on sys.path: the script's own folder, and PYTHONPATH). So the
  hooks module may run twice; its registry and usage book are shared through shared_registry() and
  shared_usage_book() here, in a module imported once.
- proxy/auth/user_api_key_auth.py L2178-2190: with custom_auth, every route that asks for a key calls it and
  nothing else (not the master key, not the public-route shortcut at L2205-2209, not the route checks of
  custom_auth_run_common_checks): hence route_allowed().
- litellm_core_utils/get_model_cost_map.py L392, L676: LITELLM_LOCAL_MODEL_COST_MAP=True (else it fetches
  raw.githubusercontent.com, with retries, at start); litellm_core_utils/default_encoding.py L17-30: tiktoken's
  cl100k_base from the wheel's own folder (TIKTOKEN_CACHE_DIR, unless CUSTOM_TIKTOKEN_CACHE_DIR is set: dropped);
  utils.py L2524-2534, L2549-2560: a model name with llama-2/llama-3/replicate in it, or Cohere's or Anthropic's,
  would load a Hugging Face tokenizer by name (a download): HF_HUB_OFFLINE=1 makes that fail at once.
- proxy/utils.py L9186-9240: NO_DOCS, NO_REDOC, NO_OPENAPI turn off ``/`` (Swagger), ``/redoc``, ``/openapi.json``.
- proxy/telemetry/settings.py L34-44: LITELLM_TELEMETRY_DISABLED (its telemetry has no destination unless one is
  configured; off anyway).
"""

import atexit
import datetime
import fcntl
import hashlib
import json
import os
import re
import secrets
import signal
import sys
import tempfile
import threading
import time

LOG_PREFIX = '[glm.serve] gateway:'
HOOKS_MODULE = 'glm_gateway_hooks'
#: environment of the proxy (proxy_env): the upstream's key, LiteLLM's master key (random, used by nothing: with
#: custom_auth LiteLLM never compares it), the registry's and the usage book's paths
ENV_UPSTREAM_KEY = 'GLM_UPSTREAM_KEY'
ENV_MASTER_KEY = 'GLM_GATEWAY_MASTER_KEY'
ENV_KEYS = 'GLM_GATEWAY_KEYS'
ENV_USAGE = 'GLM_GATEWAY_USAGE'
#: LiteLLM's provider for smg: ``openai`` sends the request as the client wrote it (SGLang's own parameters such as
#: chat_template_kwargs, separate_reasoning, top_k in the body; tools with ``strict`` and ``additionalProperties``;
#: assistant content lists), where ``hosted_vllm`` strips strict/additionalProperties from tools and flattens content
PROVIDER = 'openai'
#: the routes a team's key may use (LiteLLM serves each with and without /v1): SGLang's OpenAI-compatible API. With
#: custom_auth LiteLLM runs no route check of its own, so any known key would reach its admin and debug routes.
ALLOWED_ROUTES = ('/chat/completions', '/completions', '/models', '/responses', '/embeddings')
#: routes with an id after them: GET /v1/models/NAME, GET/DELETE /v1/responses/ID
ALLOWED_PREFIXES = ('/models/', '/responses/')
COUNTERS = ('requests', 'errors', 'limited', 'prompt_tokens', 'completion_tokens')
LIMITS = ('rpm', 'tpm', 'max_parallel')
#: variables of the parent that would change what the proxy does or logs: LiteLLM's own (LITELLM_LOG=DEBUG logs
#: requests with their headers), its CLI's ($HOST, $PORT, $DEBUG, ...), a database (virtual keys: not used)
_DROPPED_ENV = ('HOST', 'PORT', 'NUM_WORKERS', 'DEBUG', 'DETAILED_DEBUG', 'SSL_KEYFILE_PATH', 'SSL_CERTFILE_PATH',
                'DATABASE_URL', 'DIRECT_URL', 'STORE_MODEL_IN_DB', 'CUSTOM_TIKTOKEN_CACHE_DIR', 'DOCS_URL', 'REDOC_URL',
                'OPENAPI_URL', 'ROOT_REDIRECT_URL', 'REDIS_HOST', 'REDIS_URL', 'REDIS_PORT', 'REDIS_PASSWORD',
                'PROMETHEUS_MULTIPROC_DIR', 'prometheus_multiproc_dir', 'PROMETHEUS_METRICS_PORT')
#: a site's HTTP proxy (the login node's environment, which the job inherits): LiteLLM's aiohttp transport honours it
#: (llms/custom_httpx/aiohttp_transport.py L494-520), and nothing exempts 127.0.0.1, so the upstream key and every
#: prompt would go to that proxy in clear text. The proxy calls smg on the loopback only: none of them applies.
PROXY_ENV = ('http_proxy', 'https_proxy', 'all_proxy', 'HTTP_PROXY', 'HTTPS_PROXY', 'ALL_PROXY', 'no_proxy', 'NO_PROXY')
_HEX64 = re.compile(r'^[0-9a-f]{64}$')


def log(message):
    sys.stdout.write('%s %s %s\n' % (time.strftime('%Y-%m-%d %H:%M:%S'), LOG_PREFIX, message))
    sys.stdout.flush()


def key_hash(key):
    """The registry's form of a key: SHA-256 of its UTF-8 bytes, lowercase hex."""
    return hashlib.sha256(key.encode('utf-8')).hexdigest()


def route_allowed(path):
    """Whether a team's key may use PATH (the request's URL path)."""
    path = path or '/'
    if path.startswith('/v1/'):
        path = path[len('/v1'):]
    path = path.rstrip('/') if path != '/' else path
    return path in ALLOWED_ROUTES or any(path.startswith(p) and len(path) > len(p) for p in ALLOWED_PREFIXES)


def proxy_config(model, upstream_base_url, request_timeout=600, metrics=False):
    """LiteLLM's config (a dict; written as JSON) for MODEL, the served model name clients send, served by the
    OpenAI-compatible API at UPSTREAM_BASE_URL (``http://127.0.0.1:PORT/v1``: smg). METRICS: also LiteLLM's
    ``prometheus`` callback (integrations/prometheus.py: requests, tokens and failures per key alias and team, served
    on proxy_argv's metrics port)."""
    config = {
        'model_list': [{
            'model_name': model,
            'litellm_params': {
                'model': '%s/%s' % (PROVIDER, model),
                'api_base': upstream_base_url,
                'api_key': 'os.environ/' + ENV_UPSTREAM_KEY,
                'timeout': request_timeout,
                'stream_timeout': request_timeout,
                'max_retries': 0,
            },
        }],
        'litellm_settings': {
            'callbacks': [HOOKS_MODULE + '.usage_logger'],
            'request_timeout': request_timeout,
            'num_retries': 0,
            'drop_params': False,
            # no prompt or answer in what LiteLLM's logging passes around, and no key material in its metadata
            'turn_off_message_logging': True,
        },
        'router_settings': {
            'num_retries': 0,
            # one deployment (smg): a cooldown after upstream errors would refuse every request for its length
            'disable_cooldowns': True,
        },
        'general_settings': {
            'custom_auth': HOOKS_MODULE + '.user_api_key_auth',
            'master_key': 'os.environ/' + ENV_MASTER_KEY,
            'disable_spend_logs': True,
            'disable_adding_master_key_hash_to_db': True,
        },
    }
    if metrics:
        config['litellm_settings']['callbacks'].append('prometheus')
    return config


def proxy_argv(python, config_path, host, port, tls_cert=None, tls_key=None, metrics_port=None):
    """The command that starts the proxy: this file run by PYTHON (main(): LiteLLM's CLI), one worker (the limits are
    counted in its memory); HTTPS with both TLS_CERT and TLS_KEY; METRICS_PORT: Prometheus /metrics on HOST:METRICS_PORT
    from a process of its own, without a key (proxy_cli.py L1073-1085: ``--prometheus_metrics_port``; the main port's
    /metrics asks for a key). Nothing secret on it."""
    argv = [python, os.path.abspath(__file__), '--config', str(config_path), '--host', str(host), '--port', str(port),
            '--num_workers', '1']
    if metrics_port:
        argv += ['--prometheus_metrics_port', str(metrics_port)]
    if tls_cert or tls_key:
        if not (tls_cert and tls_key):
            raise ValueError('HTTPS needs both a certificate and its key')
        argv += ['--ssl_certfile_path', str(tls_cert), '--ssl_keyfile_path', str(tls_key)]
    return argv


def proxy_env(base_env, upstream_key, registry_path, usage_path, metrics_dir=None):
    """The proxy's environment: BASE_ENV without what would make LiteLLM log more, listen elsewhere or use a
    database, plus the keys (the master key made now, random), the paths, offline settings and this folder on
    PYTHONPATH (glm_gateway_hooks imports this module)."""
    env = {k: v for k, v in base_env.items() if not k.startswith('LITELLM_') and k not in _DROPPED_ENV + PROXY_ENV}
    here = os.path.dirname(os.path.abspath(__file__))
    env.update({
        ENV_UPSTREAM_KEY: upstream_key,
        ENV_MASTER_KEY: 'sk-' + secrets.token_urlsafe(32),
        ENV_KEYS: str(registry_path),
        ENV_USAGE: str(usage_path),
        'PYTHONPATH': os.pathsep.join([here] + ([base_env['PYTHONPATH']] if base_env.get('PYTHONPATH') else [])),
        'PYTHONUNBUFFERED': '1',
        'LITELLM_MODE': 'PRODUCTION',
        'LITELLM_LOCAL_MODEL_COST_MAP': 'True',
        'LITELLM_TELEMETRY_DISABLED': 'True',
        'LITELLM_LOG': 'WARNING',
        'NO_DOCS': 'True',
        'NO_REDOC': 'True',
        'NO_OPENAPI': 'True',
        'DISABLE_ADMIN_UI': 'True',
        'HF_HUB_OFFLINE': '1',
        'TRANSFORMERS_OFFLINE': '1',
        'NO_PROXY': '127.0.0.1,localhost',
        'no_proxy': '127.0.0.1,localhost',
        'DISABLE_AIOHTTP_TRUST_ENV': 'True',
    })
    if metrics_dir:
        # the metrics' samples, shared by the proxy and its metrics process: a private folder (LiteLLM's default is
        # one fixed folder under /tmp, which it wipes at start: another user's proxy on the node would share it)
        env['PROMETHEUS_MULTIPROC_DIR'] = str(metrics_dir)
    return env


def _file_signature(path):
    stat = os.stat(path)
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino)


def _limit(team, name, value):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError('team %s: %s must be a positive integer or null, not %r' % (team, name, value))
    return value


def parse_registry(data):
    """{sha256 hex: {'team', 'rpm', 'tpm', 'max_parallel'}} from the registry's parsed JSON; ValueError names the
    first problem (no hash or key in the message)."""
    if not isinstance(data, dict) or data.get('version') != 1:
        raise ValueError('not a version 1 registry')
    teams = data.get('teams')
    if not isinstance(teams, dict):
        raise ValueError('"teams" is not a mapping')
    found = {}
    for team, entry in teams.items():
        if not isinstance(entry, dict):
            raise ValueError('team %s: not a mapping' % team)
        digest = entry.get('sha256')
        if not isinstance(digest, str) or not _HEX64.match(digest):
            raise ValueError('team %s: sha256 is not 64 lowercase hex digits' % team)
        if digest in found:
            raise ValueError('teams %s and %s have the same key' % (found[digest]['team'], team))
        found[digest] = dict({name: _limit(team, name, entry.get(name)) for name in LIMITS}, team=team)
    return found


class Registry:
    """The teams' keys and limits from PATH (glm.serve's key registry: SHA-256 hex of each key, never the key),
    re-read whenever its mtime, size or inode changes (checked on every lookup: an atomic rewrite by the deploy is
    seen by the next request). A missing, unreadable or invalid file refuses every key (logged once per change)."""

    def __init__(self, path):
        self.path = str(path)
        self._lock = threading.Lock()
        self._signature = object()   # matches nothing: the first lookup reads the file
        self._teams = {}

    def _refresh(self):
        try:
            signature = _file_signature(self.path)
        except OSError as error:
            signature = ('unreadable', error.errno)
            problem = error.strerror or str(error)
        else:
            problem = None
        if signature == self._signature:
            return
        teams = {}
        if problem is None:
            try:
                with open(self.path, encoding='utf-8') as handle:
                    teams = parse_registry(json.load(handle))
            except OSError as error:
                problem = error.strerror or str(error)
            except ValueError as error:   # json.JSONDecodeError included
                problem = 'invalid: %s' % error
        if problem is not None:
            teams = {}
            log('key registry %s: %s; every key is refused until it is fixed' % (self.path, problem))
        else:
            log('key registry %s: read, %d team(s)' % (self.path, len(teams)))
        self._signature, self._teams = signature, teams

    def lookup(self, key):
        """{'team', 'rpm', 'tpm', 'max_parallel'} of KEY (the key as the client sent it), or None."""
        if not isinstance(key, str) or not key:
            return None
        with self._lock:
            self._refresh()
            found = self._teams.get(key_hash(key))
        return dict(found) if found else None

    def teams(self):
        """Every team's {'team', 'rpm', 'tpm', 'max_parallel'}, as the last lookup read them."""
        with self._lock:
            return list(self._teams.values())


def _utc_day(now):
    return datetime.datetime.fromtimestamp(now, datetime.timezone.utc).strftime('%Y-%m-%d')


class UsageBook:
    """Counters per UTC day per team (COUNTERS) in the JSON file PATH: ``{"version": 1, "updated": T, "days":
    {DAY: {TEAM: {counter: n}}}}``. Starts from the file's content (a restarted gateway goes on counting); written
    atomically (a temporary file in the same folder, mode 0600, then os.replace) at most every FLUSH_INTERVAL
    seconds, by the add that finds the interval passed or by a timer, and at exit (flush()). Each write adds what
    was counted since the last one to the file as it is then, under a lock (PATH.lock, flock): two proxies of one
    deployment (a router and its successor, router_successors_until, for the minute they overlap) add up, neither
    overwrites the other's counts."""

    def __init__(self, path, flush_interval=2.0, clock=time.time):
        self.path = str(path)
        self.flush_interval = flush_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._days = self._read()
        self._pending = {}          # what add() counted since the last write: added to the file's counts then
        self._dirty = False
        self._last_write = 0.0
        self._timer = None
        atexit.register(self.flush)

    def _read(self):
        try:
            with open(self.path, encoding='utf-8') as handle:
                data = json.load(handle)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as error:
            self._set_aside('cannot read it (%s)' % (getattr(error, 'strerror', None) or error))
            return {}
        days = data.get('days') if isinstance(data, dict) else None
        if not isinstance(days, dict):
            self._set_aside('no "days" in it')
            return {}
        clean = {}
        for day, teams in days.items():
            if not isinstance(teams, dict):
                continue
            for team, counts in teams.items():
                if isinstance(counts, dict):
                    clean.setdefault(day, {})[team] = {
                        name: counts.get(name) if isinstance(counts.get(name), int) else 0 for name in COUNTERS}
        return clean

    def _set_aside(self, why):
        """A usage file that cannot be read is renamed (PATH.unreadable-TIME), not overwritten: its history stays for a
        person to look at; counting starts again in a new file."""
        aside = '%s.unreadable-%d' % (self.path, int(self._clock()))
        try:
            os.rename(self.path, aside)
            log('usage file %s: %s; kept as %s, counting from zero' % (self.path, why, aside))
        except OSError as error:
            log('usage file %s: %s, and it cannot be set aside (%s); counting from zero' % (self.path, why, error))

    def add(self, team, **counts):
        """Add COUNTS (names from COUNTERS) to TEAM's counters of today (UTC)."""
        unknown = set(counts) - set(COUNTERS)
        if unknown:
            raise TypeError('unknown counters: %s' % ', '.join(sorted(unknown)))
        now = self._clock()
        with self._lock:
            for book in (self._days, self._pending):
                row = book.setdefault(_utc_day(now), {}).setdefault(str(team), dict.fromkeys(COUNTERS, 0))
                for name, value in counts.items():
                    row[name] = row.get(name, 0) + int(value or 0)
            self._dirty = True
            due = now - self._last_write >= self.flush_interval
            if not due and self._timer is None:
                self._timer = threading.Timer(max(0.0, self.flush_interval - (now - self._last_write)), self.flush)
                self._timer.daemon = True
                self._timer.start()
        if due:
            self.flush()

    def snapshot(self):
        """A copy of the counters: {day: {team: {counter: n}}}."""
        with self._lock:
            return json.loads(json.dumps(self._days))

    def flush(self):
        """Write the file now if anything changed since the last write."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if not self._dirty:
                return
            now = self._clock()
            try:
                lock = os.open(self.path + '.lock', os.O_CREAT | os.O_WRONLY, 0o600)
            except OSError as error:
                log('usage file %s: cannot lock it: %s' % (self.path, error.strerror or error))
                return
            try:
                fcntl.flock(lock, fcntl.LOCK_EX)
                days = _add_days(self._read(), self._pending)       # the file now, and what this one counted since
                self._write(days, now)
            except OSError as error:
                log('usage file %s: cannot write it: %s' % (self.path, error.strerror or error))
                return
            finally:
                os.close(lock)
            self._days, self._pending = days, {}
            self._dirty = False
            self._last_write = now

    def _write(self, days, now):
        text = json.dumps({'version': 1, 'updated': int(now), 'days': days}, indent=1, sort_keys=True)
        handle, temp = tempfile.mkstemp(prefix='.%s.' % os.path.basename(self.path),
                                        dir=os.path.dirname(os.path.abspath(self.path)))
        try:
            with os.fdopen(handle, 'w', encoding='utf-8') as out:   # mkstemp: mode 0600
                out.write(text + '\n')
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, self.path)
        except BaseException:
            os.unlink(temp)
            raise


def _add_days(days, more):
    """DAYS ({day: {team: {counter: n}}}) with MORE's counters added (a new dict)."""
    out = json.loads(json.dumps(days))
    for day, teams in more.items():
        for team, counts in teams.items():
            row = out.setdefault(day, {}).setdefault(team, dict.fromkeys(COUNTERS, 0))
            for name, value in counts.items():
                row[name] = row.get(name, 0) + value
    return out


_SHARED = {}
_SHARED_LOCK = threading.Lock()


def _shared(kind, path, make):
    with _SHARED_LOCK:
        found = _SHARED.get((kind, str(path)))
        if found is None:
            found = _SHARED[(kind, str(path))] = make(path)
        return found


def shared_registry(path):
    """One Registry per path in this process (the hooks module may be loaded more than once)."""
    return _shared('registry', path, Registry)


def shared_usage_book(path):
    """One UsageBook per path in this process: two would overwrite each other's counts."""
    return _shared('usage', path, UsageBook)


def _stop(signum, frame):  # pylint: disable=unused-argument
    raise SystemExit(0)


def main(argv):
    """The proxy's process (proxy_argv): LiteLLM's CLI (``litellm``) with ARGV. uvicorn, which it runs, shuts down
    gracefully on SIGTERM/SIGINT, then puts back the handlers it found and raises the signal again: with Python's
    default handler the process would die there, before atexit, and the usage book's last counts with it. The
    handlers found are these: they end the process with SystemExit (status 0), so atexit runs."""
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    from litellm.proxy.proxy_cli import run_server  # pylint: disable=import-outside-toplevel,import-error
    run_server.main(args=list(argv), prog_name='litellm')


if __name__ == '__main__':
    main(sys.argv[1:])
