#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: job_log
short_description: Read the end of a Slurm job's output file, secrets masked, and follow it
version_added: 1.0.0
description:
  - Returns the last O(lines) lines of a job's output file on the host, or, with O(offset), the lines written after that
    byte offset during the next O(wait) seconds (to follow a log in steps of that length).
  - The file is the job's C(NAME-JOBID.out) in O(chdir) (C(#SBATCH --output=%x-%j.out), as the glm.serve roles write
    them); without O(job_id), the one with the highest job id. It asks Slurm nothing, so it works for a job that
    has ended, even one Slurm has forgotten, as long as its file is there.
  - Secrets are masked as everywhere in glm.serve (C(--api-key ...), C(api_key=...), C(Bearer ...), the key in
    O(key_file) and the replicas' key of O(chdir) (C(replica-key), which SGLang prints in its start-up line), read on
    the host). No key is ever returned.
author:
  - glm.serve maintainers (@glm-serve)
extends_documentation_fragment:
  - glm.serve.attributes.read_only
options:
  name:
    description: The job name (the C(%x) of its output file name).
    type: str
    required: true
  chdir:
    description: The folder of the output files (the job's working directory).
    type: path
    required: true
  job_id:
    description: The job whose file to read; the newest job of O(name) with a file in O(chdir) when not given.
    type: str
  lines:
    description: How many lines from the end to return (without O(offset)).
    type: int
    default: 50
  offset:
    description:
      - Return the lines written after this byte offset (the RV(offset) of an earlier call) instead of the last
        O(lines). A partial last line is kept for the next call.
    type: int
  wait:
    description:
      - With O(offset), collect the lines written during this many seconds (checking every 0.5 s), then return them
        all; 0 returns at once with what is there.
    type: int
    default: 0
  key_file:
    description: A file on the host whose first line is a secret to mask (the API key).
    type: path
seealso:
  - module: glm.serve.slurm_job_info
'''

EXAMPLES = r'''
- name: The last 50 lines of the newest server job's log
  glm.serve.job_log:
    name: glm-serve
    chdir: /home/u/glm
    key_file: /home/u/glm/api-key
  register: log

- name: Then what it writes in the next 5 seconds
  glm.serve.job_log:
    name: glm-serve
    chdir: /home/u/glm
    job_id: "{{ log.job_id }}"
    offset: "{{ log.offset }}"
    wait: 5
    key_file: /home/u/glm/api-key
'''

RETURN = r'''
path:
  description: The output file read (null when there is none).
  returned: always
  type: str
  sample: /home/u/glm/glm-serve-4124.out
job_id:
  description: The job whose file was read (null when there is none).
  returned: always
  type: str
  sample: "4124"
lines:
  description: The lines, secrets masked.
  returned: always
  type: list
  elements: str
offset:
  description: The byte offset after the last complete line returned, for the next call's O(offset).
  returned: always
  type: int
size:
  description: The size of the file when it was read.
  returned: always
  type: int
'''

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.glm.serve.plugins.module_utils import layout
from ansible_collections.glm.serve.plugins.module_utils import model_probe as mp
from ansible_collections.glm.serve.plugins.module_utils import job_output
from ansible_collections.glm.serve.plugins.module_utils.wait_signals import read_tail

MAX_READ = 1024 * 1024


def newest(chdir, name):
    """(job_id, path) of the highest job id among NAME-JOBID.out in chdir, or (None, None)."""
    pattern = layout.log_name_re(name)
    found = []
    try:
        entries = os.listdir(chdir)
    except OSError:
        return None, None
    for entry in entries:
        match = pattern.match(entry)
        if match:
            found.append((int(match.group(1)), entry))
    if not found:
        return None, None
    job_id, entry = max(found)
    return str(job_id), os.path.join(chdir, entry)


def read_from(path, offset):
    """(complete lines after offset, new offset, size): a partial last line waits for the next call."""
    size = os.path.getsize(path)
    if offset > size:
        offset = 0                     # the file was replaced or truncated: from its start
    with open(path, 'rb') as handle:
        handle.seek(offset)
        data = handle.read(MAX_READ)
    end = data.rfind(b'\n')
    if end < 0:
        return [], offset, size
    text = data[:end + 1].decode('utf-8', 'replace')
    return text.splitlines(), offset + end + 1, size


def secrets_of(key_file, chdir=None):
    """The strings to mask in the lines besides the patterns: the API key of KEY_FILE and the replicas' key of the
    work dir CHDIR, those that read."""
    found = []
    for path in (key_file, layout.Layout(chdir).replica_key_file if chdir else None):
        if not path:
            continue
        try:
            found.append(mp.read_key(path))
        except mp.KeyFileError:
            pass                       # no key to mask beyond the patterns: nothing to leak either
    return tuple(found)


def output_file(module, params):
    """(job_id, path) of the output file asked for: job_id's, which must exist, or the newest; (None, None)."""
    if not params['job_id']:
        return newest(params['chdir'], params['name'])
    job_id = params['job_id']
    path = layout.Layout(params['chdir']).log_file(params['name'], job_id)
    if not os.path.isfile(path):
        module.fail_json(msg='%s does not exist: job %s of %s has no output file in %s' % (
            path, job_id, params['name'], params['chdir']))
    return job_id, path


def follow(path, offset, wait):
    """(the complete lines after OFFSET, new offset, size), read again until WAIT seconds have passed."""
    deadline = time.time() + max(wait, 0)
    lines = []
    while True:
        more, offset, size = read_from(path, offset)
        lines += more
        if time.time() >= deadline:
            return lines, offset, size
        time.sleep(min(0.5, max(deadline - time.time(), 0)))


def main():
    module = AnsibleModule(argument_spec=dict(
        name=dict(type='str', required=True),
        chdir=dict(type='path', required=True),
        job_id=dict(type='str'),
        lines=dict(type='int', default=50),
        offset=dict(type='int'),
        wait=dict(type='int', default=0),
        key_file=dict(type='path', no_log=False),
    ), supports_check_mode=True)
    params = module.params
    secrets = secrets_of(params['key_file'], params['chdir'])
    job_id, path = output_file(module, params)
    result = dict(changed=False, path=path, job_id=job_id, lines=[], offset=params['offset'] or 0, size=0)
    if path is None:
        module.exit_json(**result)
    if params['offset'] is None:
        size = os.path.getsize(path)
        # the offset for a follow: just after the last complete line (a partial one is read again then)
        unused_lines, offset, size = read_from(path, max(0, size - 4096))
        result.update(lines=read_tail(path, count=params['lines'], secrets=secrets, chunk=MAX_READ), offset=offset, size=size)
        module.exit_json(**result)
    lines, offset, size = follow(path, params['offset'], params['wait'])
    result.update(lines=[job_output.redact(line, secrets) for line in lines], offset=offset, size=size)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
