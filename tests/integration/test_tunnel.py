"""From a laptop: the key copied with fetch_key.yml, an SSH tunnel through the login user (the line deploy prints),
and the official openai client on the operator's side, against the server on its node (issue 10, section 4).

The login node is the only way in: the tunnel is `ssh -N -L PORT:NODE:30000` to the login user over real SSH, as
deploy.yml prints it; the client never talks to the node directly.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import shutil
import socket
import subprocess
import time

import pytest

import cluster_target as target
from deploy_helpers import isolated_vars, login_home, require_cluster, run_playbook, scancel_names

openai = pytest.importorskip('openai')

WORK = 'glm-it-tunnel'
VARS = isolated_vars(WORK, 'it-tun-download', 'it-tun-serve', server_time='00:20:00')
TUNNEL = re.compile(r'"from your machine \(the login node is the only way in\): (ssh -N -L [^"]+)"')


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


@pytest.fixture(scope='module')
def served(tmp_path_factory):
    require_cluster()
    tmp = str(tmp_path_factory.mktemp('tunnel'))
    work = os.path.join(login_home(), WORK)
    scancel_names(['it-tun-download', 'it-tun-serve'])
    shutil.rmtree(work, ignore_errors=True)
    try:
        proc = run_playbook('deploy.yml', VARS, tmp, result_json=True)
        assert proc.returncode == 0, proc.stdout[-4000:]
        found = TUNNEL.search(proc.stdout)
        assert found, proc.stdout[-3000:]
        command = found.group(1)
        with open(os.path.join(work, 'api-key')) as handle:
            key = handle.read().strip()
        yield {'tmp': tmp, 'tunnel': command, 'key': key}
    finally:
        run_playbook('teardown.yml', dict(VARS, glm_teardown_download=True), tmp)
        scancel_names(['it-tun-download', 'it-tun-serve'])
        shutil.rmtree(work, ignore_errors=True)


def test_fetch_key_copies_the_key_0600_and_never_prints_it(served, tmp_path):
    dest = str(tmp_path / 'laptop' / 'api-key')
    os.makedirs(os.path.dirname(dest))
    proc = run_playbook('fetch_key.yml', dict(VARS, glm_key_dest=dest), served['tmp'], verbosity=3)
    assert proc.returncode == 0, proc.stdout[-3000:]
    with open(dest) as handle:
        assert handle.read().strip() == served['key']
    assert oct(os.stat(dest).st_mode & 0o777) == '0o600'
    assert served['key'] not in proc.stdout + proc.stderr                 # not even at -vvv
    assert 'Anyone who can read it can call the server' in proc.stdout
    bad = run_playbook('fetch_key.yml', dict(VARS, glm_key_dest='relative/key'), served['tmp'])
    assert bad.returncode != 0 and 'glm_key_dest="relative/key" is not valid' in bad.stdout


def test_the_printed_tunnel_and_the_openai_client(served):
    match = re.match(r'^ssh -N -L (\d+):(\S+):(\d+) (.*)$', served['tunnel'])
    assert match, served['tunnel']
    port = free_port()
    argv = ['ssh', '-N', '-o', 'ExitOnForwardFailure=yes', '-L', '%d:%s:%s' % (port, match.group(2), match.group(3))]
    argv += match.group(4).split()
    tunnel = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(('127.0.0.1', port), timeout=1).close()
                break
            except OSError:
                assert tunnel.poll() is None, tunnel.communicate()
                time.sleep(0.2)
        client = openai.OpenAI(base_url='http://127.0.0.1:%d/v1' % port, api_key=served['key'], max_retries=0, timeout=30)
        assert 'glm-5.3-flash' in [m.id for m in client.models.list()]
        reply = client.chat.completions.create(model='glm-5.3-flash', messages=[{'role': 'user', 'content': 'Hello'}],
                                               max_tokens=64)
        assert reply.choices[0].message.content
        chunks = list(client.chat.completions.create(model='glm-5.3-flash', stream=True, max_tokens=64,
                                                     messages=[{'role': 'user', 'content': 'Hello'}]))
        assert len(chunks) > 1 and ''.join(c.choices[0].delta.content or '' for c in chunks if c.choices)
        # a tool call (the server runs with --tool-call-parser glm47), and the tool's answer sent back
        tools = [{'type': 'function', 'function': {
            'name': 'get_weather', 'description': 'The weather in a city',
            'parameters': {'type': 'object', 'properties': {'city': {'type': 'string'}}, 'required': ['city']}}}]
        ask = [{'role': 'user', 'content': 'What is the weather in Paris?'}]
        called = client.chat.completions.create(model='glm-5.3-flash', messages=ask, tools=tools, max_tokens=256)
        choice = called.choices[0]
        assert choice.finish_reason == 'tool_calls', choice
        call = choice.message.tool_calls[0]
        assert call.function.name == 'get_weather' and json.loads(call.function.arguments) == {'city': 'Paris'}
        answered = client.chat.completions.create(model='glm-5.3-flash', tools=tools, max_tokens=256, messages=ask + [
            choice.message.model_dump(exclude_none=True), {'role': 'tool', 'tool_call_id': call.id, 'content': 'sunny, 21 C'}])
        assert 'sunny, 21 C' in answered.choices[0].message.content
        wrong = openai.OpenAI(base_url='http://127.0.0.1:%d/v1' % port, api_key='not-the-key', max_retries=0, timeout=30)
        with pytest.raises(openai.AuthenticationError):
            wrong.models.list()
    finally:
        tunnel.terminate()
        tunnel.wait(10)


def test_logs_shows_the_end_masked_and_follows(served):
    """logs.yml: the server's log with the key masked (SGLang prints it in server_args), the download's, and a
    follow that prints lines written while it runs."""
    proc = run_playbook('logs.yml', dict(VARS, glm_log_lines=200), served['tmp'], verbosity=3)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert 'it-tun-serve-' in proc.stdout and 'server_args=' in proc.stdout, proc.stdout[-3000:]
    assert served['key'] not in proc.stdout + proc.stderr
    download = run_playbook('logs.yml', dict(VARS, glm_log_job='download', glm_log_lines=5), served['tmp'])
    assert download.returncode == 0 and 'it-tun-download-' in download.stdout, download.stdout[-2000:]
    path = [line.split('== ', 1)[1].split(' ')[0] for line in proc.stdout.splitlines() if '== /' in line][0]
    follow_writer = 'sleep 4; for i in 1 2 3; do echo "follow test $i" >> %s; sleep 1; done' % path
    writer = subprocess.Popen(target.slurm_argv(['runuser', '-u', 'glmuser', '--', 'sh', '-c', follow_writer]),
                              stdin=subprocess.DEVNULL)
    follow = run_playbook('logs.yml', dict(VARS, glm_log_lines=1, glm_log_follow=10), served['tmp'])
    writer.wait(30)
    assert follow.returncode == 0, follow.stdout[-3000:]
    assert all('follow test %d' % i in follow.stdout for i in (1, 2, 3)), follow.stdout[-3000:]
    bad = run_playbook('logs.yml', dict(VARS, glm_log_job='both'), served['tmp'])
    assert bad.returncode != 0 and 'glm_log_job="both" is not valid' in bad.stdout
