# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    """Options shared by glm.serve's Slurm modules: who and how to talk to slurmctld, and how to wait."""

    # Standard documentation: the Slurm connection options. Every module that extends it is in the action group
    # glm.serve.slurm (meta/runtime.yml; tests/unit/meta/test_action_group.py holds the two lists equal).
    DOCUMENTATION = r'''
attributes:
  action_group:
    description: Use C(group/glm.serve.slurm) in C(module_defaults) to set O(user), O(retry_timeout) and O(accounting)
      once for every glm.serve module that talks to Slurm.
    support: full
    membership:
      - glm.serve.slurm
options:
  user:
    description:
      - The Slurm user whose jobs are looked up (C(squeue -u)).
      - Defaults to the user the module runs as (the remote user).
    type: str
  retry_timeout:
    description:
      - How long (seconds) to retry Slurm commands outside a wait when the controller is unreachable or busy
        (C(Unable to contact slurm controller), C(Socket timed out)...).
      - Retries back off 1, 2, 4 ... 30 s. C(sbatch) is never repeated blindly; before a new attempt the module
        looks for a job of that name that the lost attempt may have created.
    type: int
    default: 120
  accounting:
    description:
      - Use Slurm's accounting (C(sacct), which asks slurmdbd, not slurmctld) for jobs slurmctld no longer remembers
        (C(MinJobAge) after they ended), for their final state, exit code, reason, start, end and elapsed time.
      - On a site without accounting, or when C(sacct) fails, the module does without it, as with V(false).
    type: bool
    default: true
notes:
  - Needs the Slurm client tools (C(squeue), C(scontrol), C(sbatch), C(scancel)) on the host, configured for the
    cluster. Works with Slurm 22.05 and later; C(squeue --only-job-state) is used from 23.11.5 on. C(sacct) is
    optional.
  - Never relies on C(sacct) (clusters without slurmdbd work as well, with less history) nor on C(squeue --json)
    filtering.
requirements:
  - Slurm client commands on the host
'''

    WAIT = r'''
options:
  wait:
    description:
      - Wait until the job reaches one of O(wait_condition) (with O(state=present)), or is gone (with O(state=absent)).
      - The wait asks slurmctld with an exponential backoff (1, 2, 4 ... O(wait_sleep) seconds) and watches, in between,
        what costs the controller nothing, the job's output file on the shared file system (it appears when the job
        starts; error lines make the module ask Slurm at once) and, with a probe, the server's HTTP port.
    type: bool
    default: false
  wait_condition:
    description:
      - Job states that end the wait successfully, for example V(RUNNING) or V(COMPLETED).
      - A failure state (V(FAILED), V(CANCELLED), V(TIMEOUT), V(NODE_FAIL), V(OUT_OF_MEMORY), V(BOOT_FAIL), V(DEADLINE),
        V(PREEMPTED)) fails the task at once, naming state, reason, exit code and the last lines of the job's output file,
        unless it is listed here.
      - A job that COMPLETED while the condition does not include V(COMPLETED) fails the task ("the job ended before reaching RUNNING").
      - A job that can never start because a job it depends on failed (reason C(DependencyNeverSatisfied)) fails the task at once,
        naming that job and the end of its output.
    type: list
    elements: str
    default: [RUNNING]
    choices: [PENDING, CONFIGURING, RUNNING, COMPLETING, COMPLETED, SUSPENDED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL,
              OUT_OF_MEMORY, BOOT_FAIL, DEADLINE, PREEMPTED]
  wait_timeout:
    description:
      - How many seconds to wait. On timeout the task fails with the last observed state of the job and of the jobs it
        depends on (and says so when the job waits for a free node).
    type: int
    default: 600
  wait_sleep:
    description:
      - Cap (seconds) of the exponential backoff between controller calls while waiting.
      - Larger values spare the controller on long waits; state changes the output file reveals are seen at once anyway.
    type: int
    default: 60
'''

    # The server probe: slurm_job waits for it, slurm_job_info reports it.
    PROBE = r'''
options:
  probe:
    description:
      - Ask the server a job runs, C(GET http://NODE:PORT/PATH) with the API key, on the job's first node (C(https://) with
        O(probe.tls_cert)).
      - With M(glm.serve.slurm_job) and its C(wait) option, the wait ends when it answers HTTP 200 and lists O(probe.model); the port is
        polled every second once the job runs, which costs the controller nothing. HTTP 401 fails at once (the server runs
        with another key). Connection refused or timeouts mean the server is still starting.
      - With M(glm.serve.slurm_job_info), each RUNNING job is asked once and the answer is returned in C(jobs[].probe);
        the key file is read only when a job runs.
    type: dict
    suboptions:
      port:
        description: TCP port of the server.
        type: int
        required: true
      path:
        description: Path of the model list.
        type: str
        default: /v1/models
      key_file:
        description:
          - File on the host holding the API key (first line). The key is read by the module on the host, sent only in the
            C(Authorization) header, and never returned or logged (it is also masked in the output lines the module returns).
        type: path
        required: true
      model:
        description: The model id expected in C(data[].id).
        type: str
        required: true
      timeout:
        description: Timeout of each HTTP request, in seconds.
        type: int
        default: 5
      tls_cert:
        description:
          - The server's TLS certificate (PEM, the first one in the file), a file on the host. The probe then speaks HTTPS
            and accepts exactly this certificate (pinned - its bytes are compared after the handshake, before the request
            and its key are sent), whoever signed it and whatever host names it lists. A TLS failure (another
            certificate, no TLS) reads as a server still starting, with the reason in the wait's progress.
        type: path
      endpoint_file:
        description:
          - The endpoint file the job writes once it serves (the router's, C(glm_endpoint_file)). While it names the
            job (its C(GLM_ROUTER_JOB) line), the port of its C(GLM_BASE_URL) is asked instead of O(probe.port) (a router
            successor on its predecessor's node moves its ports); while it names another job, the job has not taken
            the endpoint yet and counts as starting. A file that names no job leaves O(probe.port).
        type: path
'''
