# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""roles/router/files/glm_router.py's parts that need no router (tests/standins/test_router_launcher.py runs the
whole launcher with the real gateway): its options, the exit status it gives for the router's, the port."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import signal
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', '..', 'roles', 'router', 'files'))
import glm_ports  # noqa: E402  pylint: disable=wrong-import-position
import glm_router  # noqa: E402  pylint: disable=wrong-import-position

OURS = ['--key-file', '/k', '--replicas-dir', '/r', '--endpoint-file', '/e']


def test_parse_options_splits_ours_from_the_routers():
    opts, router_argv = glm_router.parse_options(OURS + ['--model', 'm', '--', '--port', '31000', '--policy', 'random'])
    assert (opts.key_file, opts.replicas_dir, opts.endpoint_file, opts.model) == ('/k', '/r', '/e', 'm')
    assert (opts.workers_file, opts.sync_interval, opts.drain_timeout, opts.advertise) == (None, 5.0, 120.0, None)
    assert router_argv == ['--port', '31000', '--policy', 'random']
    assert glm_router.parse_options(OURS)[1] == []


@pytest.mark.parametrize('flag', [['--api-key', 'sk-1'], ['--api-key=sk-1']])
def test_parse_options_refuses_a_key_on_the_command_line(flag, capsys):
    with pytest.raises(SystemExit) as exit_:
        glm_router.parse_options(OURS + ['--'] + flag)
    assert exit_.value.code == 2
    assert 'give the key in --key-file, not --api-key' in capsys.readouterr().err


@pytest.mark.parametrize('argv, port', [([], 30000), (['--port', '31000'], 31000), (['--port=32000'], 32000)])
def test_args_port(argv, port):
    assert glm_router.args_port(['--host', '0.0.0.0'] + argv) == port


@pytest.mark.parametrize('argv, moved', [
    (['--port', '30000', '--prometheus-port', '29000'], ['--port', '30010', '--prometheus-port', '29010']),
    (['--port=30000', '--policy', 'random'], ['--port=30010', '--policy', 'random']),
    (['--host', '0.0.0.0'], ['--host', '0.0.0.0']),
])
def test_shift_ports_moves_the_router_and_metrics_ports(argv, moved):
    assert glm_router.shift_ports(argv, 10) == moved


def test_port_taken_while_something_listens(tmp_path):
    import socket
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    sock.close()
    assert not glm_ports.port_taken('127.0.0.1', port)        # nothing there: a successor takes router_port
    sock = socket.socket()
    sock.bind(('127.0.0.1', port))
    sock.listen(1)
    assert glm_ports.port_taken('127.0.0.1', port)            # its predecessor listens there: it moves its ports
    sock.close()


@pytest.mark.parametrize('text, ended', [
    (None, False), ('', True), ('2020-01-01T00:00', True), ('2020-01-01T00:00:30', True),
    ('2999-01-01T00:00', False), ('soon', True),
])
def test_the_service_end_of_the_teardown_ends_the_router(tmp_path, text, ended):
    path = tmp_path / 'service-end'
    if text is not None:
        path.write_text(text + '\n')
    opts, _argv = glm_router.parse_options(['--key-file', '/k', '--replicas-dir', str(tmp_path), '--endpoint-file',
                                            str(tmp_path / 'endpoint'), '--service-end', str(path)])
    assert glm_router.Turn(opts, '41', 1, '').service_ended() is ended


def test_the_endpoint_file_names_the_router_job_that_serves_it(tmp_path):
    path = tmp_path / 'endpoint'
    glm_router.write_endpoint(str(path), 'http://node3:30000', 'm', job_id='41', started=1700000000)
    assert glm_router.endpoint_vars(str(path)) == {'GLM_BASE_URL': 'http://node3:30000/v1', 'GLM_MODEL': 'm',
                                                   'GLM_ROUTER_JOB': '41', 'GLM_ROUTER_STARTED': '1700000000'}
    assert oct(os.stat(str(path)).st_mode & 0o777) == '0o600'
    opts, _argv = glm_router.parse_options(['--key-file', '/k', '--replicas-dir', str(tmp_path), '--endpoint-file', str(path),
                                            '--workers-file', str(tmp_path / 'w.json')])
    turn = glm_router.Turn(opts, '41', 1, '')
    turn.owner = True
    assert turn.taken_by() is None and turn.own_files() == (str(tmp_path / 'w.json'), str(path))
    glm_router.write_endpoint(str(path), 'http://node3:30010', 'm', job_id='42', started=1700000100)
    assert turn.taken_by() == '42' and turn.own_files() == ()    # the successor's files now: not removed
    assert glm_router.endpoint_vars(str(tmp_path / 'none')) == {}
    glm_router.write_endpoint(str(path), 'http://node3:30000', 'm')     # no job (outside Slurm): no line
    assert 'GLM_ROUTER_JOB' not in path.read_text()


def test_router_exited_gives_the_jobs_status_and_removes_the_workers_file(tmp_path, capsys):
    workers = tmp_path / 'router-workers.json'
    workers.write_text(u'{}')
    assert glm_router.router_exited(0, (str(workers),)) == 0
    assert not workers.exists()
    assert glm_router.router_exited(3 << 8, ()) == 3                     # exit(3)
    assert glm_router.router_exited(signal.SIGTERM, ()) == 0             # our scancel, passed on
    # killed by another signal (the OOM killer): the status router.sbatch's loop starts the launcher again for
    assert glm_router.router_exited(signal.SIGKILL, ()) == glm_router.CHILD_KILLED == 75
    assert 'the router exited (0)' in capsys.readouterr().out


@pytest.mark.parametrize('status,kept', [(0, False), (signal.SIGTERM, False), (3 << 8, False), (signal.SIGKILL, True)])
def test_a_router_that_ends_removes_the_endpoint_file_it_serves(tmp_path, capsys, status, kept):
    """The endpoint file goes with the router that serves it (a teardown's scancel, its time limit without a
    successor, a gateway that failed): clients and the relay find no endpoint instead of a NODE:PORT another user may
    bind next. Not when the launcher starts again in its job (a signal not of the job's end): it reads its ports from
    the file."""
    workers, endpoint = tmp_path / 'w.json', tmp_path / 'endpoint'
    workers.write_text(u'{}')
    glm_router.write_endpoint(str(endpoint), 'http://node3:30000', 'm', job_id='41', started=1)
    opts, _argv = glm_router.parse_options(['--key-file', '/k', '--replicas-dir', str(tmp_path), '--endpoint-file',
                                            str(endpoint), '--workers-file', str(workers)])
    turn = glm_router.Turn(opts, '41', 1, '')
    assert turn.own_files() == ()                                       # not serving it yet: nothing of its own
    turn.owner = True
    glm_router.router_exited(status, turn.own_files())
    assert not workers.exists() and endpoint.exists() == kept
    assert ('the endpoint file %s removed' % endpoint in capsys.readouterr().out) != kept


def test_a_failed_sync_round_is_logged_and_the_job_goes_on(capsys):
    class Broken:
        def step(self):
            raise OSError('disk hiccup')
    glm_router.sync_round(Broken())
    assert 'keeping the replicas in step failed this round (OSError: disk hiccup); trying again' in capsys.readouterr().out


def test_the_autoscaler_is_made_from_its_settings_file_and_off_without_one(tmp_path, capsys):
    assert glm_router.make_scaler(glm_router.parse_options(OURS)[0]) is None                    # no --scale-config
    path = tmp_path / 'scale.json'
    settings = {'least': 1, 'most': 2, 'target': 3, 'up_after': 10, 'down_after': 20, 'cooldown': 10,
                'coming_timeout': 3600, 'script': '/w/serve.sbatch', 'sbatch_args': ['--mem=10G'], 'bad_nodes_file': '',
                'bad_node_ttl': 86400, 'umask': '0077', 'log': '/w/scale.log', 'service_end': '/w/service-end',
                'replicas': [['s', 'glm.serve:s:replica:1'], ['s-2', 'glm.serve:s:replica:2']]}
    path.write_text(json.dumps(settings))
    opts = glm_router.parse_options(OURS + ['--scale-config', str(path), '--', '--port', '31000'])[0]
    scaler = glm_router.make_scaler(opts)
    assert scaler.plan == [('s', 'glm.serve:s:replica:1'), ('s-2', 'glm.serve:s:replica:2')]
    assert (scaler.policy.least, scaler.policy.most, scaler.policy.target) == (1, 2, 3.0)
    assert scaler.slurm.work_dir == '/w' and scaler.cfg.key_file == '/k'
    assert 'autoscaling: 1 to 2 replicas, 3 requests per replica' in capsys.readouterr().out
    # a replica missing from the plan: said, and the router serves on without it
    path.write_text(json.dumps(dict(settings, replicas=settings['replicas'][:1])))
    assert glm_router.make_scaler(opts) is None and 'autoscaling is off' in capsys.readouterr().out


def test_a_failed_scale_round_is_logged_and_the_job_goes_on(capsys):
    class Broken:
        def refresh(self):
            pass

        def round(self, now, sync, busy, waiting=0, active=False, load=None):
            raise OSError('sbatch hung')
    glm_router.scale_round(Broken(), None)
    assert 'autoscaling failed this round (OSError: sbatch hung); trying again' in capsys.readouterr().out


def test_with_the_front_door_a_scale_round_takes_its_load():
    """The door (a hold with ``load``) gives the round its load; the hold of LiteLLM's proxy (no ``load``) none."""
    rounds = []

    class Scaler:
        cfg = type('Cfg', (), {'hold': 0})()

        def refresh(self):
            pass

        def round(self, now, sync, busy, waiting=0, active=False, load=None):
            rounds.append(load)

    class Hold:
        bound = 30

        def take_demand(self):
            return 0

        def take_traffic(self):
            return False

    class Door(Hold):
        def load(self):
            return 7
    glm_router.scale_round(Scaler(), None, Door())
    glm_router.scale_round(Scaler(), None, Hold())
    assert rounds == [7, None]


def listening():
    """A socket listening on a free port of 127.0.0.1, and that port."""
    import socket
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    sock.listen(1)
    return sock, sock.getsockname()[1]


def test_wait_for_ports_returns_at_once_when_they_are_free():
    sock, port = listening()
    sock.close()
    slept = []
    glm_ports.wait_for_ports('127.0.0.1', [port, None], glm_router.log, timeout=5, sleep=slept.append)
    assert slept == []


def test_wait_for_ports_waits_for_a_gateway_that_still_holds_the_port(capsys):
    sock, port = listening()
    slept = []

    def sleep(seconds):          # the old gateway finishes its requests and goes on the third look
        slept.append(seconds)
        if len(slept) == 3:
            sock.close()
    glm_ports.wait_for_ports('127.0.0.1', [port], glm_router.log, timeout=30, sleep=sleep)
    assert slept == [0.5, 0.5, 0.5]
    assert capsys.readouterr().out.count('port %d of 127.0.0.1 is in use; waiting up to 30 s' % port) == 1


def test_a_loopback_port_is_below_the_ephemeral_range_and_free(monkeypatch):
    """The gateway's loopback port is one the node's outgoing connections never take (the kernel hands those out
    from ip_local_port_range): a handover on the test bed failed on a port picked by bind(0) and taken by a connect()
    before the gateway bound it."""
    low, _high = glm_ports.ephemeral_range()
    ports = {glm_ports.loopback_port() for _n in range(20)}
    assert all(max(glm_ports.LOWEST, low - glm_ports.BELOW_EPHEMERAL) <= p < low for p in ports) and len(ports) > 1
    sock, port = listening()                            # taken: never chosen
    picks = iter([port, port, port + 1 if port + 1 < 65536 else port - 1])
    monkeypatch.setattr(glm_ports, 'bind_error', lambda host, p: 98 if p == port else None)
    assert glm_ports.loopback_port(rand=type('R', (), {'randrange': staticmethod(lambda a, b: next(picks))}),
                                   ranges=(40000, 60999)) != port
    sock.close()
    assert 1024 <= glm_ports.loopback_port(ranges=(10050, 60999)) < 65536    # no room below: the kernel's choice


def squatter():
    """Another process (another user's, on the node) listening on a port of 127.0.0.1: (its Popen, the port). Not a
    socket of this process, which a forked gateway would inherit and so seem to hold."""
    import subprocess
    proc = subprocess.Popen([sys.executable, '-c', 'import socket, sys, time\ns = socket.socket()\n'
                             's.bind(("127.0.0.1", 0))\ns.listen(1)\nprint(s.getsockname()[1], flush=True)\ntime.sleep(60)'],
                            stdout=subprocess.PIPE, text=True)
    return proc, int(proc.stdout.readline())


def serve_on(args):
    """A gateway stand-in for fork_gateway: listens on args.port (127.0.0.1) until killed; exits 1 when it cannot."""
    import socket
    import time
    sock = socket.socket()
    sock.bind(('127.0.0.1', args.port))
    sock.listen(8)
    time.sleep(60)


def test_a_gateway_whose_loopback_port_was_taken_first_starts_again_on_another(monkeypatch, capsys):
    """Another process binds the chosen port before the gateway does: that gateway exits, and the launcher starts
    another on another port (the handover on the test bed ended its job instead)."""
    squat, taken = squatter()
    ports, choose = iter([taken]), glm_ports.loopback_port
    monkeypatch.setattr(glm_ports, 'loopback_port', lambda: next(ports, None) or choose())   # then as it chooses
    args = type('Args', (), {'port': None})()
    child = glm_router.gateway_on_loopback(serve_on, args, [])
    try:
        assert args.port != taken and glm_ports.listens(child, args.port, 20) == 'listening'
        assert 'exited before it listened on 127.0.0.1:%d' % taken in capsys.readouterr().out
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        squat.kill()
        squat.wait()


def test_a_gateway_that_cannot_start_is_left_to_the_main_loop_after_its_last_try(monkeypatch):
    """Every try exits (every port chosen is taken): the last child is returned unreaped, for the main loop's
    status, after LOOPBACK_TRIES forks."""
    squat, taken = squatter()
    chosen = []
    monkeypatch.setattr(glm_ports, 'loopback_port', lambda: chosen.append(taken) or taken)
    args = type('Args', (), {'port': None})()
    child = glm_router.gateway_on_loopback(serve_on, args, [])
    _pid, status = os.waitpid(child, 0)
    squat.kill()
    squat.wait()
    assert os.waitstatus_to_exitcode(status) == 1 and len(chosen) == glm_router.LOOPBACK_TRIES


def test_wait_for_ports_names_the_port_held_past_the_bound():
    sock, port = listening()
    try:
        with pytest.raises(SystemExit) as exit_:
            glm_ports.wait_for_ports('127.0.0.1', [port], glm_router.log, timeout=0, sleep=lambda s: None)
    finally:
        sock.close()
    assert 'port %d of 127.0.0.1 is in use after 0 s' % port in str(exit_.value)
    assert 'ss -ltnp' in str(exit_.value) and 'router_port' in str(exit_.value)


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason="prctl(PR_SET_PDEATHSIG) is Linux's")
def test_a_child_of_the_launcher_dies_with_it_even_by_sigkill(tmp_path):
    """die_with_parent: the launcher (here a Python process that forks as start_router does) killed with SIGKILL, its
    child (the gateway) gets SIGTERM and ends instead of holding the router's port as an orphan."""
    import subprocess
    import time
    script = ('import os, signal, sys, time\nsys.path.insert(0, %r)\nimport glm_router\n'
              'parent, prctl = os.getpid(), glm_router.c_prctl()\n'
              'signal.signal(signal.SIGTERM, lambda *a: None)\n'   # the launcher's own handler: not the child's
              'child = os.fork()\n'
              'if child == 0:\n    glm_router.die_with_parent(parent, prctl)\n    time.sleep(60)\n    os._exit(0)\n'
              'print(child, flush=True)\ntime.sleep(60)\n' % os.path.dirname(glm_router.__file__))
    launcher = subprocess.Popen([sys.executable, '-c', script], stdout=subprocess.PIPE, universal_newlines=True)
    child = int(launcher.stdout.readline())
    try:
        os.kill(child, 0)                              # alive while its launcher is
        launcher.kill()
        launcher.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(child, 0)
            except OSError:
                break
            with open('/proc/%d/stat' % child, encoding='utf-8') as handle:
                if handle.read().split(') ')[1].startswith('Z'):  # ended, not reaped yet (init reaps it)
                    break
            time.sleep(0.05)
        else:
            raise AssertionError('the child outlived its SIGKILLed launcher by 10 s')
    finally:
        try:
            os.kill(child, signal.SIGKILL)
        except OSError:
            pass


class Recorder(object):
    def __init__(self):
        self.lines = []

    def record(self, _now, line):
        self.lines.append(line)


def test_a_launcher_started_again_says_so_in_the_scale_log(capsys):
    turn = glm_router.Turn.__new__(glm_router.Turn)
    turn.job_id, turn.scaler = '42', Recorder()
    glm_router.said_restart(turn, {'GLM_ROUTER_KILLED': '9', 'GLM_ROUTER_RESTARTS': '1'})
    assert turn.scaler.lines == ['restart: the controller started again in router job 42 (restart 1), the launcher '
                                 'before it killed by signal 9; the replicas are taken from their address files']
    turn.scaler = None
    glm_router.said_restart(turn, {'GLM_ROUTER_KILLED': '9', 'GLM_ROUTER_RESTARTS': '2'})
    assert 'restart: the controller started again in router job 42 (restart 2)' in capsys.readouterr().out
    glm_router.said_restart(turn, {'GLM_ROUTER_RESTARTS': '0'})       # the first start: nothing said
    assert capsys.readouterr().out == ''


def test_a_launcher_started_again_keeps_the_ports_it_had(tmp_path):
    """successor_ports after a kill (GLM_ROUTER_KILLED): the endpoint file names this job on router_port + offset:
    the same moved ports; on router_port, or not this job's: the router's own (the port taken is its own gateway's,
    finishing its requests, not a predecessor's)."""
    endpoint = tmp_path / 'endpoint'
    opts = glm_router.parse_options(OURS[:4] + ['--endpoint-file', str(endpoint), '--port-offset', '10'])[0]
    argv = ['--host', '0.0.0.0', '--port', '30000', '--prometheus-port', '29000']
    killed = {'GLM_ROUTER_KILLED': '9', 'SLURM_JOB_ID': '42'}
    endpoint.write_text('GLM_BASE_URL=http://node3:30010/v1\nGLM_ROUTER_JOB=42\n')
    assert glm_router.successor_ports(opts, list(argv), killed) == ['--host', '0.0.0.0', '--port', '30010', '--prometheus-port', '29010']
    endpoint.write_text('GLM_BASE_URL=http://node3:30000/v1\nGLM_ROUTER_JOB=42\n')
    assert glm_router.successor_ports(opts, list(argv), killed) == argv
    endpoint.write_text('GLM_BASE_URL=http://node3:30010/v1\nGLM_ROUTER_JOB=41\n')
    assert glm_router.successor_ports(opts, list(argv), killed) == argv


def test_the_front_door_passes_nothing_until_the_gateways_port_is_held_by_its_gateway_alone(tmp_path, capsys):
    """The gateway's loopback port listened on by another process (another user of the node who bound it first):
    the door stays closed (it passes nothing there) and the log says why, once; held by the gateway: open."""
    import subprocess
    import glm_front  # pylint: disable=import-error,import-outside-toplevel
    sock, port = listening()
    other = subprocess.Popen(['sleep', '30'])
    try:
        sync = glm_router.Sync('http://127.0.0.1:%d' % port, 'k', str(tmp_path), gateway_pid=other.pid)
        door = glm_front.FrontDoor('127.0.0.1', 0, ('127.0.0.1', port), print, None, None, 'k', 'm')
        for _round in range(2):                           # the launcher's gateway is not what listens there
            glm_router.gateway_first(sync, sync.base, None, False, door)
        assert door.gateway_ours() is False
        assert capsys.readouterr().out.count('is held by a process that is not this job') == 1
        sync.gateway_pid = os.getpid()                    # this process holds the socket: it is the gateway's
        glm_router.gateway_first(sync, sync.base, None, False, door)
        door._ours = (-1.0, False)  # pylint: disable=protected-access
        assert door.gateway_ours() is True
    finally:
        other.kill()
        other.wait()
        sock.close()


def test_nothing_listening_on_the_gateways_port_opens_nothing():
    import glm_front  # pylint: disable=import-error,import-outside-toplevel
    sock, port = listening()
    sock.close()
    assert glm_ports.listening_sockets(port) == set()
    assert glm_ports.held_by(os.getpid(), set()) is False


def test_the_front_door_options_take_their_bounds():
    opts, _router = glm_router.parse_options(OURS + ['--proxy', 'glm', '--gateway-keys', '/g', '--usage-file', '/u',
                                                     '--max-body-mb', '8', '--head-timeout', '5'])
    assert (opts.proxy, opts.max_body_mb, opts.head_timeout, opts.max_connections) == ('glm', 8, 5.0, 4096)
    with pytest.raises(SystemExit):
        glm_router.parse_options(OURS + ['--proxy', 'glm'])
