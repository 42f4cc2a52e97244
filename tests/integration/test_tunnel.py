"""From a laptop: the key copied with fetch_key.yml, an SSH tunnel through the login user (the line deploy prints),
and the official openai client on the operator's side, against the server on its node (issue 10, section 4).

The login node is the only way in, and its SSH gateway forwards only to loopback ports of the login node: "The
gateway supports shells, commands, SFTP (including modern scp), and forwarding to loopback ports on the login node.
[...] Remote forwarding and non-loopback destinations are refused." (the guide's platform notes,
../shared/reference/serve-glm-sglang-seed.md, its first lines). The local login node's sshd enforces the same
(tests/tooling/cluster/cluster.sh, write_sshd_config: AllowTcpForwarding local, PermitOpen localhost:* 127.0.0.1:*; OpenSSH
9.2p1's sshd_config(5): PermitOpen does "no pattern matching or address lookups" on names), so the old line
`ssh -N -L PORT:NODE:30000` fails with "open failed: administratively prohibited" (issue 23, section 1). The line
deploy prints now is `ssh -o ExitOnForwardFailure=yes -L PORT:127.0.0.1:RELAY ... 'python3 WORK/glm_relay.py RELAY
NODE:30000 WORK/endpoint'`: the relay (roles/glm/files/glm_relay.py) listens on the login node's loopback for as long as that ssh
runs. The test runs exactly that line (only the laptop's port is a free one instead of 30000), with its input kept
open as a terminal's would be, then checks that no relay is left on the login node once the ssh client has exited.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import tempfile
import threading
import time

import pytest

import cluster_target as target
from deploy_helpers import OTHER_USER, SSH_OTHER, isolated_vars, login_home, require_cluster, run_playbook, scancel_names, ssh, ssh_other

openai = pytest.importorskip('openai')

WORK = 'glm-it-tunnel'
VARS = isolated_vars(WORK, 'it-tun-download', 'it-tun-serve', server_time='00:20:00')
TUNNEL = re.compile(r'"from your machine \(the login node is the only way in\): (ssh (?:[^"\\]|\\.)+)"')


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
        command = json.loads('"%s"' % found.group(1))   # the JSON string's text
        # the line after it: where a client on this machine connects, with the endpoint's scheme (https behind an
        # HTTPS router: test_replicas)
        assert 'then http://localhost:30000/v1 with the key' in ' '.join(proc.stdout.split()), proc.stdout[-3000:]
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
    assert 'http://localhost:' in proc.stdout and not os.path.exists(str(tmp_path / 'laptop' / 'router.pem'))  # plain HTTP
    bad = run_playbook('fetch_key.yml', dict(VARS, glm_key_dest='relative/key'), served['tmp'])
    assert bad.returncode != 0 and 'glm_key_dest="relative/key" is not valid' in bad.stdout


def open_tunnel(argv):
    """Start the ssh line (argv) with its input kept open; its stderr collected. Returns (process, lines)."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            universal_newlines=True)
    lines = []

    def read():
        for line in proc.stderr:
            lines.append(line.rstrip('\n'))

    reader = threading.Thread(target=read)
    reader.daemon = True
    reader.start()
    return proc, lines


#: run as another user on the login node (this machine: the file is read there): connect to the relay's port, send a
#: request, print how many bytes came back before the connection closed
PEEK = '''import socket, sys
sock = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=10)
sock.sendall(b'GET /v1/models HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')
try:
    data = sock.recv(100)
except OSError:
    data = b''
print(len(data))
'''


def another_user_gets_nothing_through(relay_port, work):
    """Another user of the cluster, logged in on the same login node (issue 37): a connection of theirs to this
    relay's port, straight or through their own tunnel (ssh -L to it, which the gateway allows: a loopback port),
    gets no byte back (the relay closes a connection from another user's socket at once); the work dir is closed to
    them."""
    peek = os.path.join(tempfile.mkdtemp(prefix='glm-it-peek-'), 'peek.py')
    with open(peek, 'w') as handle:
        handle.write(PEEK)
    os.chmod(os.path.dirname(peek), 0o755)
    os.chmod(peek, 0o644)
    try:
        status, out = ssh_other('python3 %s %d' % (peek, relay_port))
        assert status == 0 and out.split() == ['0'], (status, out)
        status, out = ssh_other('ls %s; cat %s/endpoint' % (shlex.quote(work), shlex.quote(work)))
        assert status != 0 and 'Permission denied' in out, (status, out)
        port = free_port()
        # their own ssh, no shared connection (ssh takes an option's first value: the helpers' Control* left out)
        base = SSH_OTHER[:-1]
        argv = [a for i, a in enumerate(base) if not a.startswith('Control') and not (a == '-o' and base[i + 1].startswith('Control'))]
        theirs, lines = open_tunnel(argv + ['-N', '-o', 'ExitOnForwardFailure=yes', '-L',
                                            '%d:127.0.0.1:%d' % (port, relay_port), SSH_OTHER[-1]])
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    sock = socket.create_connection(('127.0.0.1', port), timeout=10)
                    break
                except OSError:
                    assert theirs.poll() is None and time.monotonic() < deadline, lines
                    time.sleep(0.2)
            with sock:
                sock.sendall(b'GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n')
                try:
                    got = sock.recv(100)
                except OSError:
                    got = b''
            assert got == b'', got
        finally:
            theirs.terminate()
            theirs.wait(10)
    finally:
        shutil.rmtree(os.path.dirname(peek), ignore_errors=True)


def relays_left(relay_file):
    """The login node's processes running the relay (pgrep there, as the login user)."""
    pattern = '[' + relay_file[0] + ']' + relay_file[1:]
    return ssh('pgrep -a -u %s -f %s || true' % (target.LOGIN_USER, shlex.quote(pattern))).strip()


def printed_argv(served, port):
    """The printed line as argv, with the laptop's port (the -L's first field) replaced by port."""
    argv = shlex.split(served['tunnel'])
    spec = argv.index('-L') + 1
    local, relay_port = re.match(r'^(\d+):127\.0\.0\.1:(\d+)$', argv[spec]).groups()
    assert local == '30000', served['tunnel']
    argv[spec] = '%d:127.0.0.1:%s' % (port, relay_port)
    return argv, int(relay_port)


def test_the_gateway_refuses_a_node_as_destination(served):
    """The test cluster's sshd is as strict as the platform's gateway: -L to a node (the line deploy printed before
    issue 23) opens the local port, but every connection through it is refused by the login node."""
    remote = shlex.split(served['tunnel'])[-1]
    node = shlex.split(remote)[3]                  # python3 RELAY PORT NODE:PORT ENDPOINT_FILE
    argv = shlex.split(served['tunnel'])[:-1]
    spec = argv.index('-L') + 1
    port = free_port()
    argv[spec] = '%d:%s' % (port, node)
    proc, lines = open_tunnel(argv + ['-N'])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(('127.0.0.1', port), timeout=2) as sock:
                    sock.sendall(b'GET /health HTTP/1.0\r\n\r\n')
                    assert sock.recv(100) == b''
                break
            except OSError:
                assert proc.poll() is None, lines
                time.sleep(0.2)
        deadline = time.monotonic() + 10
        while not any('administratively prohibited' in line for line in lines) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert any('open failed: administratively prohibited' in line for line in lines), lines
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_printed_tunnel_and_the_openai_client(served):
    assert served['tunnel'].startswith('ssh -o ExitOnForwardFailure=yes -L 30000:127.0.0.1:'), served['tunnel']
    port = free_port()
    argv, relay_port = printed_argv(served, port)
    relay_file = os.path.join(login_home(), WORK, 'glm_relay.py')
    assert shlex.split(argv[-1])[:3] == ['python3', relay_file, str(relay_port)], argv
    # the endpoint file last: each new connection goes where it says then (a server resubmitted elsewhere is followed)
    assert shlex.split(argv[-1])[4] == os.path.join(login_home(), WORK, 'endpoint'), argv
    assert oct(os.stat(relay_file).st_mode & 0o777) == '0o700'
    tunnel, lines = open_tunnel(argv)
    try:
        deadline = time.monotonic() + 20
        while not any('until this ssh session ends' in line for line in lines):
            assert tunnel.poll() is None and time.monotonic() < deadline, lines
            time.sleep(0.1)
        client = openai.OpenAI(base_url='http://127.0.0.1:%d/v1' % port, api_key=served['key'], max_retries=0, timeout=30)
        assert 'glm-5.3-flash' in [m.id for m in client.models.list()]
        reply = client.chat.completions.create(model='glm-5.3-flash', messages=[{'role': 'user', 'content': 'Hello'}],
                                               max_tokens=64)
        assert reply.choices[0].message.content
        # streamed (SSE): chunk by chunk through the relay
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
        assert relays_left(relay_file)
        if OTHER_USER:
            another_user_gets_nothing_through(relay_port, os.path.dirname(relay_file))

        # A second tunnel of the same deployment while the first runs: the relay's port is taken; it says so and the
        # second ssh ends at once (its local port closes), the first one still works.
        second, second_lines = open_tunnel(printed_argv(served, free_port())[0])
        assert second.wait(20) == 75, second_lines
        assert any('is taken' in line and 'glm_relay_port=' in line for line in second_lines), second_lines
        assert 'glm-5.3-flash' in [m.id for m in client.models.list()]
    finally:
        # the operator's Ctrl-C (SIGINT to ssh): the session ends, and with it the relay on the login node
        tunnel.send_signal(2)
        tunnel.wait(10)
    deadline = time.monotonic() + 10
    while relays_left(relay_file) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not relays_left(relay_file), 'a relay is left on the login node after the ssh client exited'


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


def test_status_says_when_the_work_dir_has_no_relay(served):
    """A deployment made by a release before the relay: status prints no line that would fail on the login node
    ("can't open file"), but what to do; with the relay back, the line again."""
    relay_file = os.path.join(login_home(), WORK, 'glm_relay.py')
    os.rename(relay_file, relay_file + '.away')
    try:
        proc = run_playbook('status.yml', VARS, served['tmp'])
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert 'tunnel: no relay in %s' % relay_file in proc.stdout, proc.stdout[-3000:]
        assert 'run glm.serve.deploy once' in proc.stdout and 'glm_relay.py 2' not in proc.stdout, proc.stdout[-3000:]
    finally:
        os.rename(relay_file + '.away', relay_file)
    proc = run_playbook('status.yml', VARS, served['tmp'])
    assert proc.returncode == 0 and 'from your machine: ssh -o ExitOnForwardFailure=yes' in proc.stdout, proc.stdout[-3000:]
