#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: team_keys
short_description: One API key per team, and the registry of their SHA-256 hashes and limits the gateway checks
version_added: 1.1.0
description:
  - Keeps one key file per team in O(keys_dir) (C(KEYS_DIR/TEAM), the folder 0700, the files 0600) and the registry
    the gateway checks keys against (O(registry), 0600) - each team's key as its SHA-256 hash, with its limits. The
    service key (O(service_key_file), made by the role C(glm.serve.api_key))
    is the team V(default), with the limits of a V(default) entry of O(teams), none without one. Runs on the login
    node, as the user.
  - A listed team without a key file gets a new random key (O(key_bytes) random bytes as hex, one line), written in a
    temporary file in O(keys_dir) and linked into place, so it is never half written and never replaces a key
    another run made at the same time (that one is kept). A team in O(rotate) gets a new key in place of its old one.
    A key file with another mode gets 0600.
  - A key file in O(keys_dir) of a team no longer listed is removed (the team is revoked) - only a regular file
    whose name is a team name and whose content is one line of hex, as this module writes them; anything else in
    O(keys_dir) (other names, symbolic links, folders, other content) is left alone.
  - "The registry: C({\"version\": 1, \"teams\": {TEAM: {\"sha256\": HEX, \"rpm\": N, \"tpm\": N, \"max_parallel\": N}}})
    (keys sorted, C(null) for no limit), written (temporary file, then renamed into place) only when its content
    changes. Keys are read as the first line of their file, stripped. No key and no hash is ever returned."
  - With O(replica_key_file) - the key between the front door and the replicas (the gateway's and the replicas'),
    which no client holds (no team's, not in the registry), made when missing as a team's key is; with
    O(replica_key_rotate), replaced by a new one.
  - Idempotent - a second run with the same options changes nothing (a team in O(rotate) gets a new key each run).
author:
  - glm.serve maintainers (@glm-serve)
attributes:
  check_mode:
    description: Says what would change (C(changed), each team's RV(teams[].created) and RV(teams[].rotated),
      RV(revoked), RV(registry_changed), RV(replica_key)); writes, removes and changes the mode of nothing.
    support: full
  diff_mode:
    description: Not supported.
    support: none
  platform:
    description: Runs on the login node of the cluster.
    support: full
    platforms: posix
options:
  service_key_file:
    description:
      - The service key (C(glm_api_key_file)), a non-empty file whose first line is the key; the role
        C(glm.serve.api_key) makes it. It is the team V(default) in the
        registry. Read only.
      - It must not be in O(keys_dir).
    type: path
    required: true
  keys_dir:
    description:
      - The folder of the teams' key files, one per team, named as the team. Made (0700) when missing; its mode is
        set to 0700.
      - A folder for the team keys only - not the folder of O(service_key_file) or of O(registry).
    type: path
    required: true
  registry:
    description: The registry file the gateway reads (JSON, 0600). Its folder is made (0700) when missing.
    type: path
    required: true
  teams:
    description: The teams that have a key. A key file in O(keys_dir) of a team not listed is removed.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description:
          - The team's name, its key file's name - lowercase letters, digits, C(_) and C(-), starting with a letter or a
            digit, at most 63 characters (C(^[a-z0-9][a-z0-9_-]{0,62}$)). Unique.
          - V(default) is the service key's team - its entry sets that key's limits; no key file is made for it.
        type: str
        required: true
      rpm:
        description: The team's requests per minute; none for no limit.
        type: int
      tpm:
        description: The team's tokens per minute; none for no limit.
        type: int
      max_parallel:
        description: The team's requests at once; none for no limit.
        type: int
  rotate:
    description:
      - Teams (names in O(teams)) whose key is replaced by a new one in this run; the old key stops working once the
        gateway reads the registry. Changes on every run that lists them.
      - The service key (V(default)) is rotated by the role C(glm.serve.api_key)
        (C(api_key_rotate)), not here.
    type: list
    elements: str
    default: []
  key_bytes:
    description: Random bytes of a new key (C(secrets.token_hex)); the key is twice as many hex characters. 16 to 256.
    type: int
    default: 24
  replica_key_file:
    description:
      - The replicas' key file (C(glm_layout.files.replica_key)) - the key the front door sends the gateway, which
        passes it to the replicas, whose SGLang asks for it; held by no client. Made (0600) when missing; none when
        not given.
      - Not in O(keys_dir), not O(service_key_file).
    type: path
  replica_key_rotate:
    description:
      - Replace the replicas' key with a new one in this run (the replicas and the router must then start again with
        it). Changes on every run that sets it. Needs O(replica_key_file).
    type: bool
    default: false
notes:
  - The gateway reads the registry; when RV(registry_changed) is true, a running gateway that does not read it again
    by itself must be restarted for new, rotated or revoked keys to take effect.
seealso:
  - module: glm.serve.deployment_info
'''

EXAMPLES = r'''
- name: A key per team, the registry for the gateway
  glm.serve.team_keys:
    service_key_file: /home/u/glm/api-key
    keys_dir: /home/u/glm/team-keys
    registry: /home/u/glm/gateway/teams.json
    teams:
      - name: search
        rpm: 600
        tpm: 2000000
        max_parallel: 16
      - name: research
  register: team_keys

- name: A new key for the team research (its old key stops working)
  glm.serve.team_keys:
    service_key_file: /home/u/glm/api-key
    keys_dir: /home/u/glm/team-keys
    registry: /home/u/glm/gateway/teams.json
    teams:
      - name: search
        rpm: 600
      - name: research
    rotate:
      - research
'''

RETURN = r'''
teams:
  description: The teams in the registry, V(default) (the service key) first, then O(teams) in their order. No key, no hash.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The team's name.
      type: str
      sample: search
    path:
      description: Its key file (O(service_key_file) for V(default)).
      type: str
      sample: /home/u/glm/team-keys/search
    created:
      description: Whether this run made the key (the team had none).
      type: bool
    rotated:
      description: Whether this run replaced the team's key with a new one (O(rotate)).
      type: bool
    rpm:
      description: Requests per minute, None for no limit.
      type: int
    tpm:
      description: Tokens per minute, None for no limit.
      type: int
    max_parallel:
      description: Requests at once, None for no limit.
      type: int
revoked:
  description: The teams whose key file this run removed (or would remove, in check mode), sorted.
  returned: always
  type: list
  elements: str
  sample: [old-team]
registry:
  description: The registry file (O(registry)).
  returned: always
  type: str
  sample: /home/u/glm/gateway/teams.json
registry_changed:
  description: Whether the registry's content changed (or would, in check mode) - the gateway must read it again.
  returned: always
  type: bool
replica_key:
  description: The replicas' key file (O(replica_key_file)), whether this run made it and whether it replaced its key
    (O(replica_key_rotate)); None without O(replica_key_file). No key, no hash.
  returned: always
  type: dict
  contains:
    path:
      description: The file.
      type: str
      sample: /home/u/glm/replica-key
    created:
      description: Whether this run made it (there was none).
      type: bool
    rotated:
      description: Whether this run replaced its key (O(replica_key_rotate)).
      type: bool
'''

import errno
import hashlib
import json
import os
import re
import secrets
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule

TEAM_NAME = re.compile(r'^[a-z0-9][a-z0-9_-]{0,62}$')
DEFAULT_TEAM = 'default'
LIMITS = ('rpm', 'tpm', 'max_parallel')
KEY_BYTES_MIN = 16
KEY_BYTES_MAX = 256
# A key file as this module writes it: hex, a newline (at most 2 * KEY_BYTES_MAX + 1 bytes).
KEY_FILE_TEXT = re.compile(r'\A[0-9a-f]+\n?\Z')
KEY_FILE_MAX = 2 * KEY_BYTES_MAX + 1


class Refused(Exception):
    """The options or the files on the host do not allow the run; the message says what and how to fix it."""


def argument_spec():
    return dict(
        service_key_file=dict(type='path', required=True, no_log=False),
        keys_dir=dict(type='path', required=True, no_log=False),
        registry=dict(type='path', required=True),
        teams=dict(type='list', elements='dict', default=[], options=dict(
            name=dict(type='str', required=True),
            rpm=dict(type='int'),
            tpm=dict(type='int'),
            max_parallel=dict(type='int'),
        )),
        rotate=dict(type='list', elements='str', default=[]),
        key_bytes=dict(type='int', default=24, no_log=False),
        replica_key_file=dict(type='path', no_log=False),
        replica_key_rotate=dict(type='bool', default=False, no_log=False),
    )


def same_dir(a, b):
    return os.path.realpath(a) == os.path.realpath(b)


def validate(params):
    """Raise Refused for the first problem in the options (nothing is changed before)."""
    names = []
    for team in params['teams']:
        name = team['name']
        if not TEAM_NAME.match(name):
            raise Refused('teams: the name %r is not a team name; use lowercase letters, digits, _ and -, starting with '
                          'a letter or a digit, at most 63 characters (^[a-z0-9][a-z0-9_-]{0,62}$)' % (name,))
        if name in names:
            raise Refused('teams: the team %r is listed twice; list each team once' % (name,))
        names.append(name)
        for limit in LIMITS:
            if team[limit] is not None and team[limit] < 1:
                raise Refused('teams: %s of the team %r is %d; give a positive number, or leave it out for no limit'
                              % (limit, name, team[limit]))
    for name in params['rotate']:
        if name == DEFAULT_TEAM:
            raise Refused("rotate: 'default' is the service key; rotate it with the role glm.serve.api_key "
                          "(api_key_rotate=true), then run this module again")
        if name not in names:
            raise Refused('rotate: the team %r is not in teams; add it to teams or take it out of rotate' % (name,))
    if not KEY_BYTES_MIN <= params['key_bytes'] <= KEY_BYTES_MAX:
        raise Refused('key_bytes is %d; give %d to %d (random bytes of a new key)'
                      % (params['key_bytes'], KEY_BYTES_MIN, KEY_BYTES_MAX))
    validate_files(params)


def validate_files(params):
    """Raise Refused for the first problem in the options' files and folders."""
    keys_dir = params['keys_dir']
    if os.path.lexists(keys_dir) and not os.path.isdir(keys_dir):
        raise Refused('keys_dir=%s exists but is not a folder; remove it (it is then made) or point keys_dir at '
                      'the folder of the team keys' % keys_dir)
    replica = params['replica_key_file']
    if params['replica_key_rotate'] and not replica:
        raise Refused('replica_key_rotate is true but no replica_key_file is given; give the replicas\' key file')
    if replica and os.path.realpath(replica) == os.path.realpath(params['service_key_file']):
        raise Refused('replica_key_file=%s is service_key_file: the replicas\' key is one no client holds; give it a '
                      'file of its own' % replica)
    for option in ('service_key_file', 'registry') + (('replica_key_file',) if replica else ()):
        if same_dir(os.path.dirname(params[option]), keys_dir):
            raise Refused('keys_dir=%s is the folder of %s=%s; give the team keys a folder of their own (files in '
                          'keys_dir named as no listed team are removed)' % (keys_dir, option, params[option]))
    registry = params['registry']
    if os.path.lexists(registry) and not stat.S_ISREG(os.lstat(registry).st_mode):
        raise Refused('registry=%s exists but is not a regular file; remove it (it is then written) or point registry '
                      'at another path' % registry)


def read_service_key(path):
    """The service key (first line, stripped); Refused unless it is a non-empty file."""
    fix = 'run the deploy, role glm.serve.api_key, to make it'
    if not os.path.exists(path):
        raise Refused('service_key_file=%s does not exist; %s (or point service_key_file at the key file)' % (path, fix))
    if not os.path.isfile(path):
        raise Refused('service_key_file=%s is not a file; point service_key_file at the key file, or remove it and %s'
                      % (path, fix))
    try:
        with open(path, 'rb') as f:
            key = first_line(f.read())
    except (IOError, OSError) as exc:
        raise Refused('service_key_file=%s cannot be read (%s); make it readable by this user' % (path, exc.strerror))
    if not key:
        raise Refused('service_key_file=%s is empty; remove it and %s' % (path, fix))
    return key


def first_line(data):
    lines = data.decode('utf-8', 'surrogateescape').splitlines()
    return lines[0].strip() if lines else ''


def sha256(key):
    return hashlib.sha256(key.encode('utf-8', 'surrogateescape')).hexdigest()


def open_key(path):
    """(key, mode) of a team's key file, or None when there is none; Refused when it is not a regular file (a
    symbolic link is never followed) or has no key."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, 'O_NOFOLLOW', 0) | getattr(os, 'O_NONBLOCK', 0))
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        if exc.errno == errno.ELOOP:
            raise Refused('%s is a symbolic link, not a key file; remove it (a new key is then made)' % path)
        raise Refused('%s cannot be read (%s); make it readable by this user or remove it' % (path, exc.strerror))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused('%s is not a regular file; remove it (a new key is then made)' % path)
        data = b''
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    return first_line(data), stat.S_IMODE(st.st_mode)


def write_temp(folder, prefix, text):
    """A new file in folder (0600, via mkstemp) holding text, flushed to disk; its path."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=prefix)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode('utf-8'))
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    return tmp


def ensure_dir(path, check_mode):
    """Make path (0700) or set its mode; whether that changed something."""
    if not os.path.isdir(path):
        if not check_mode:
            os.makedirs(path, 0o700)
            os.chmod(path, 0o700)
        return True
    if stat.S_IMODE(os.stat(path).st_mode) != 0o700:
        if not check_mode:
            os.chmod(path, 0o700)
        return True
    return False


class TeamKeys:
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.check_mode = module.check_mode
        self.changed = False

    def secret(self, key):
        """Mask the key in anything the module returns, should it ever get there (not a short one, which would mask
        ordinary text)."""
        if key and len(key) >= 16:
            self.module.no_log_values.add(key)
        return key

    def new_key(self):
        return self.secret(secrets.token_hex(self.params['key_bytes']))

    def look(self, path, rotate):
        """open_key(path), Refused for a key file without a key (unless rotated)."""
        found = open_key(path)
        if found is not None:
            self.secret(found[0])
            if not found[0] and not rotate:
                raise Refused('%s has no key (its first line is empty); remove it (a new key is then made) or list '
                              'its team in rotate' % path)
        return found

    def team_key(self, path, found, rotate):
        """(key, created, rotated) of one team whose key file is found (look()): the key file kept, made or replaced,
        its mode 0600. key is None in check mode for a key that would be made."""
        if found is not None:
            key, mode = found
            if not rotate:
                if mode != 0o600:
                    self.changed = True
                    if not self.check_mode:
                        os.chmod(path, 0o600)
                return key, False, False
        self.changed = True
        if self.check_mode:
            return None, found is None, found is not None
        key = self.new_key()
        tmp = write_temp(os.path.dirname(path), '.team-key.', key + '\n')
        try:
            if found is not None:
                os.replace(tmp, path)
                return key, False, True
            try:
                os.link(tmp, path)
            except OSError:
                # EEXIST: another run made the key since it was looked for (a link never replaces a file): keep that
                # one. Another error (a file system without hard links): replace, unless a key is there by now.
                again = open_key(path)
                if again is not None and again[0]:
                    if again[1] != 0o600:
                        os.chmod(path, 0o600)
                    return self.secret(again[0]), False, False
                os.replace(tmp, path)
            return key, True, False
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)

    def replica_key(self, found):
        """RV(replica_key) of the replicas' key file, FOUND as look() found it: kept, made or (rotated) replaced."""
        path = self.params['replica_key_file']
        created, rotated = self.team_key(path, found, self.params['replica_key_rotate'])[1:]
        return dict(path=path, created=created, rotated=rotated)

    @staticmethod
    def refuse_shared_keys(service_key, found, rotate, replica=None):
        """Refused when two teams (the service key's, default, among them) hold the same key: the gateway would refuse
        the whole registry (it cannot tell them apart), every key with it; or when the replicas' key (REPLICA, as
        found, unless rotated) is a team's: a client would hold it."""
        owners = {}
        if service_key:
            owners.setdefault(sha256(service_key), []).append(DEFAULT_TEAM)
        if replica is not None and replica[0]:
            owners.setdefault(sha256(replica[0]), []).append('the replicas\' key (replica_key_file)')
        for name in sorted(found):
            if found[name] is not None and found[name][0] and name not in rotate:
                owners.setdefault(sha256(found[name][0]), []).append(name)
        shared = [names for names in owners.values() if len(names) > 1]
        if shared:
            raise Refused('teams %s hold the same key (a key file copied?): give each its own - list one in rotate for '
                          'a new key (glm_api_keys_rotate), or remove its key file; %s is the service key\'s team'
                          % ('; '.join(' and '.join(names) for names in shared), DEFAULT_TEAM))

    def revoke(self, listed):
        """Remove the key files of teams not listed (regular files named as a team, one line of hex); their names."""
        keys_dir = self.params['keys_dir']
        if not os.path.isdir(keys_dir):
            return []
        revoked = []
        for name in sorted(os.listdir(keys_dir)):
            if name in listed or not TEAM_NAME.match(name):
                continue
            path = os.path.join(keys_dir, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or not self.looks_like_key(path, st):
                continue
            revoked.append(name)
            self.changed = True
            if not self.check_mode:
                try:
                    os.unlink(path)  # never follows a symbolic link (and a regular file was checked)
                except OSError as exc:
                    if exc.errno != errno.ENOENT:
                        raise
        return revoked

    @staticmethod
    def looks_like_key(path, st):
        if st.st_size == 0 or st.st_size > KEY_FILE_MAX:
            return False
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, 'O_NOFOLLOW', 0) | getattr(os, 'O_NONBLOCK', 0))
        except OSError:
            return False
        try:
            data = os.read(fd, KEY_FILE_MAX + 1)
        finally:
            os.close(fd)
        return bool(KEY_FILE_TEXT.match(data.decode('latin-1')))

    def write_registry(self, hashes, limits):
        """Write the registry when its content differs (None hash: a key check mode would make); whether it did."""
        path = self.params['registry']
        old = None
        if os.path.exists(path):
            with open(path, 'rb') as f:
                old = f.read().decode('utf-8', 'replace')
            if stat.S_IMODE(os.lstat(path).st_mode) != 0o600:
                self.changed = True
                if not self.check_mode:
                    os.chmod(path, 0o600)
        teams = {}
        for name, digest in hashes.items():
            teams[name] = dict(sha256=digest, **limits[name])
        text = json.dumps(dict(version=1, teams=teams), indent=1, sort_keys=True) + '\n'
        if None not in hashes.values() and text == old:
            return False
        self.changed = True
        if not self.check_mode:
            folder = os.path.dirname(path) or '.'
            if not os.path.isdir(folder):
                ensure_dir(folder, False)
            tmp = write_temp(folder, '.%s.' % os.path.basename(path), text)
            try:
                os.replace(tmp, path)
            finally:
                if os.path.lexists(tmp):
                    os.unlink(tmp)
        return True

    def run(self):
        params = self.params
        validate(params)
        if self.check_mode and not os.path.lexists(params['service_key_file']):
            service_key = None          # check mode of a first deploy: the api_key role would make it first
        else:
            service_key = self.secret(read_service_key(params['service_key_file']))
        keys_dir = params['keys_dir']
        rotate = set(params['rotate'])
        # every team's key file looked at before anything changes (one that cannot be kept stops the run here)
        found = dict((team['name'], self.look(os.path.join(keys_dir, team['name']), team['name'] in rotate))
                     for team in params['teams'] if team['name'] != DEFAULT_TEAM)
        replica_path = params['replica_key_file']
        replica = self.look(replica_path, params['replica_key_rotate']) if replica_path else None
        self.refuse_shared_keys(service_key, found, rotate, None if params['replica_key_rotate'] else replica)
        if ensure_dir(keys_dir, self.check_mode):
            self.changed = True
        hashes = {DEFAULT_TEAM: sha256(service_key) if service_key else None}
        # the service key's team: its limits from a default entry of teams (none without one), its key not made here
        listed = dict((team['name'], team) for team in params['teams'])
        limits = {DEFAULT_TEAM: dict((limit, listed.get(DEFAULT_TEAM, {}).get(limit)) for limit in LIMITS)}
        teams = [dict(name=DEFAULT_TEAM, path=params['service_key_file'], created=False, rotated=False,
                      **limits[DEFAULT_TEAM])]
        for team in params['teams']:
            name = team['name']
            if name == DEFAULT_TEAM:
                continue
            path = os.path.join(keys_dir, name)
            key, created, rotated = self.team_key(path, found[name], name in rotate)
            hashes[name] = None if key is None else sha256(key)
            limits[name] = dict((limit, team[limit]) for limit in LIMITS)
            teams.append(dict(name=name, path=path, created=created, rotated=rotated, **limits[name]))
        # the registry first: a team left out is refused by the gateway before its file goes (should the write fail,
        # its key file is still there and the next run tries again)
        registry_changed = self.write_registry(hashes, limits)
        revoked = self.revoke(set(hashes))
        replica_key = self.replica_key(replica) if replica_path else None
        return dict(changed=self.changed, teams=teams, revoked=revoked, registry=params['registry'],
                    registry_changed=registry_changed, replica_key=replica_key)


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    try:
        result = TeamKeys(module).run()
    except Refused as exc:
        module.fail_json(msg=str(exc))
    except (IOError, OSError) as exc:
        module.fail_json(msg='team_keys: %s%s' % (exc.strerror or exc, ' (%s)' % exc.filename if exc.filename else ''))
    module.exit_json(**result)


if __name__ == '__main__':
    main()
