# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The scaffold (playbooks/init.yml, ``ansible-playbook glm.serve.init -e dest=DIR``) run for real, into folders
outside the repository: what it writes, that the folder's own ansible.cfg and inventory work, that a second run
changes nothing and never overwrites a user's edit, and that bad input stops it before it writes anything.

  make scaffold-test
The live round (the folder pointed at the local cluster, ``ansible-playbook deploy.yml -i training`` run as written,
then status and teardown) is tests/tooling/install-test.sh (make install-test), on the collection installed from
its tarball.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOKS = ('deploy', 'status', 'teardown', 'fetch_key', 'logs', 'usage')
FILES = ['ansible.cfg', 'training', 'collections/requirements.yml'] + ['%s.yml' % p for p in PLAYBOOKS]


def ansible_env(home, collections=True):
    """An environment with nothing of the repository's (no ANSIBLE_CONFIG, no collections path) but, when asked,
    the collection found where ansible-galaxy would put it for this user (HOME/.ansible/collections)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith('ANSIBLE_')}
    env.update(HOME=str(home), ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0')
    if collections:
        link = home / '.ansible' / 'collections' / 'ansible_collections' / 'glm' / 'serve'
        if not link.exists():
            link.parent.mkdir(parents=True)
            link.symlink_to(REPO)
    return env


def run(argv, cwd, env, check=True):
    proc = subprocess.run(argv, cwd=str(cwd), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, stdin=subprocess.DEVNULL, check=False)
    if check:
        assert proc.returncode == 0, proc.stdout
    return proc


def init(cwd, env, *extra, check=True):
    return run(['ansible-playbook', 'glm.serve.init'] + list(extra), cwd, env, check=check)


def recap_changed(out):
    line = next(line for line in out.splitlines() if line.startswith('localhost') and 'changed=' in line)
    return int(line.split('changed=')[1].split()[0])


@pytest.fixture
def home(tmp_path):
    path = tmp_path / 'home'
    path.mkdir()
    return path


def test_it_writes_the_folder_and_its_files_parse(home, tmp_path):
    env = ansible_env(home)
    dest = tmp_path / 'ops'
    out = init(tmp_path, env, '-e', 'dest=%s' % dest).stdout
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob('*') if p.is_file()) == sorted(FILES)
    assert 'written: ansible.cfg, training, deploy.yml' in out
    for name in PLAYBOOKS:
        plays = yaml.safe_load((dest / ('%s.yml' % name)).read_text())
        assert plays == [{'name': 'Run glm.serve.%s' % name, 'ansible.builtin.import_playbook': 'glm.serve.%s' % name}]
    reqs = yaml.safe_load((dest / 'collections' / 'requirements.yml').read_text())
    version = yaml.safe_load(open(os.path.join(REPO, 'galaxy.yml')))['version']
    major = int(version.split('.')[0])
    assert reqs == {'collections': [{'name': 'glm.serve', 'version': '>=%s,<%d.0.0' % (version, major + 1)}]}
    for path in FILES:
        assert oct((dest / path).stat().st_mode & 0o777) == '0o644'


def test_the_folder_runs_with_its_own_ansible_cfg_and_inventory(home, tmp_path):
    """From the folder, with the collection in its ./collections (as requirements.yml installs it) and nowhere
    else: ansible.cfg is the folder's (its inventory and collections path are in force), and every playbook, run
    without -i, resolves glm.serve's and targets the folder's login node."""
    dest = tmp_path / 'ops'
    init(tmp_path, ansible_env(home), '-e', 'dest=%s' % dest, '-e', 'init_host=login1',
         '-e', 'init_python=/usr/bin/python3')
    env = ansible_env(tmp_path / 'bare-home', collections=False)
    (tmp_path / 'bare-home').mkdir()
    link = dest / 'collections' / 'ansible_collections' / 'glm' / 'serve'
    link.parent.mkdir(parents=True)
    link.symlink_to(REPO)
    config = run(['ansible-config', 'dump', '--only-changed'], dest, env).stdout
    assert 'COLLECTIONS_PATHS(%s/ansible.cfg)' % dest in config, config
    assert 'DEFAULT_HOST_LIST(%s/ansible.cfg) = [%s]' % (dest, repr(str(dest / 'training'))) in config, config
    inventory = json.loads(run(['ansible-inventory', '--list'], dest, env).stdout)
    assert inventory['training']['hosts'] == ['login1']
    assert inventory['_meta']['hostvars']['login1'] == {'ansible_python_interpreter': '/usr/bin/python3'}
    # the SSH config example names the alias and the gateway's login name form (the guide's platform notes: "The SSH
    # login name is <cluster-id>.<username>"), as comments that leave the inventory as it was
    text = (dest / 'training').read_text()
    assert '#   Host login1\n' in text and '#     User <cluster-id>.<username>\n' in text, text
    for name in PLAYBOOKS:
        proc = run(['ansible-playbook', '%s.yml' % name, '--list-hosts', '--list-tasks'], dest, env)
        assert 'glm.serve' in proc.stdout, proc.stdout
        assert 'login1' in proc.stdout, proc.stdout


def test_a_second_run_changes_nothing_and_keeps_the_users_edits(home, tmp_path):
    env = ansible_env(home)
    dest = tmp_path / 'ops'
    init(tmp_path, env, '-e', 'dest=%s' % dest)
    original = (dest / 'training').read_text()
    edited = original.replace('[training]\ntraining\n', '[training]\nmy-login ansible_port=2200\n')
    assert edited != original
    (dest / 'training').write_text(edited)
    (dest / 'deploy.yml').write_text('# mine\n')
    before = {p: (dest / p).read_bytes() for p in FILES}
    out = init(tmp_path, env, '-e', 'dest=%s' % dest).stdout
    assert recap_changed(out) == 0, out
    assert 'kept as they were (never overwritten): ansible.cfg, training, deploy.yml' in out
    assert 'written:' not in out
    assert {p: (dest / p).read_bytes() for p in FILES} == before


def test_a_missing_file_is_written_again_and_only_that_one(home, tmp_path):
    env = ansible_env(home)
    dest = tmp_path / 'ops'
    init(tmp_path, env, '-e', 'dest=%s' % dest)
    (dest / 'status.yml').unlink()
    (dest / 'training').write_text('[training]\nmine\n')
    out = init(tmp_path, env, '-e', 'dest=%s' % dest).stdout
    assert "written: status.yml" in out
    assert (dest / 'status.yml').exists()
    assert (dest / 'training').read_text() == '[training]\nmine\n'


def test_a_relative_dest_is_taken_from_the_current_directory(home, tmp_path):
    env = ansible_env(home)
    work = tmp_path / 'work'
    work.mkdir()
    init(work, env, '-e', 'dest=ops')
    assert (work / 'ops' / 'deploy.yml').is_file()


def test_check_mode_writes_nothing(home, tmp_path):
    env = ansible_env(home)
    dest = tmp_path / 'ops'
    init(tmp_path, env, '-e', 'dest=%s' % dest, '--check')
    assert not dest.exists()


def test_without_dest_it_stops_and_says_how(home, tmp_path):
    env = ansible_env(home)
    proc = init(tmp_path, env, check=False)
    assert proc.returncode != 0
    assert 'dest is not set: name the folder to write, e.g. ansible-playbook glm.serve.init -e dest=~/glm-ops' in proc.stdout
    assert sorted(os.listdir(str(tmp_path))) == ['home']


def test_bad_settings_are_all_named_before_anything_is_written(home, tmp_path):
    env = ansible_env(home)
    dest = tmp_path / 'ops'
    proc = init(tmp_path, env, '-e', 'dest=%s' % dest, '-e', '{"init_host": "a host"}', '-e', 'init_python=python3',
                check=False)
    assert proc.returncode != 0
    # the message as Ansible's default callback shows it (JSON: its quotes escaped)
    assert 'init_host=\\"a host\\" is not valid: set the SSH host alias' in proc.stdout
    assert 'init_python=\\"python3\\" is not valid: set an absolute path' in proc.stdout
    assert not dest.exists()


def test_a_dest_that_is_a_file_is_refused(home, tmp_path):
    env = ansible_env(home)
    dest = tmp_path / 'ops'
    dest.write_text('mine\n')
    proc = init(tmp_path, env, '-e', 'dest=%s' % dest, check=False)
    assert proc.returncode != 0
    assert 'exists and is not a folder' in proc.stdout
    assert dest.read_text() == 'mine\n'


def test_the_collection_is_needed_only_where_ansible_finds_it(tmp_path):
    """Not installed anywhere Ansible looks: the user gets Ansible's own message naming the playbook."""
    bare = tmp_path / 'bare'
    bare.mkdir()
    proc = init(tmp_path, ansible_env(bare, collections=False), '-e', 'dest=ops', check=False)
    assert proc.returncode != 0
    assert 'glm.serve.init' in proc.stdout
    assert not (tmp_path / 'ops').exists()
    shutil.rmtree(str(bare))


def test_a_folder_of_the_users_keeps_its_mode(home, tmp_path):
    """A private folder (0700) stays private, and a run into it changes nothing but the files it writes."""
    env = ansible_env(home)
    dest = tmp_path / 'ops'
    dest.mkdir(mode=0o700)
    dest.chmod(0o700)
    init(tmp_path, env, '-e', 'dest=%s' % dest)
    assert oct(dest.stat().st_mode & 0o777) == '0o700'
    assert oct((dest / 'collections').stat().st_mode & 0o777) == '0o755'
    (dest / 'collections').chmod(0o700)
    out = init(tmp_path, env, '-e', 'dest=%s' % dest).stdout
    assert recap_changed(out) == 0, out
    assert oct((dest / 'collections').stat().st_mode & 0o777) == '0o700'


def test_settings_that_would_inject_inventory_lines_are_refused(home, tmp_path):
    env = ansible_env(home)
    dest = tmp_path / 'ops'
    for bad in ({'init_python': '/usr/bin/python3\n[all:vars]\nx=1'}, {'init_host': '-oProxyCommand=x'},
                {'init_host': 'login\nevil'}):
        proc = init(tmp_path, env, '-e', 'dest=%s' % dest, '-e', json.dumps(bad), check=False)
        assert proc.returncode != 0, (bad, proc.stdout)
        assert 'is not valid' in proc.stdout, (bad, proc.stdout)
        assert not dest.exists()
