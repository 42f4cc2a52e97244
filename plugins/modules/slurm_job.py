#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: slurm_job
short_description: Submit, adopt, wait for, probe and cancel a Slurm batch job by name
version_added: 1.0.0
description:
  - Submits a batch script with C(sbatch --parsable) unless a live job of the same O(name) already exists for O(user)
    (the name and the user are the idempotency key), optionally after other jobs (O(dependency)).
  - Waits, if asked, through the chain of jobs it depends on until it runs (or completes), and until the server it starts
    answers C(GET /v1/models) with the expected model (O(probe)).
  - Cancels a job by id, or every live job of a name (O(state=absent)).
  - Frugal with slurmctld, which many users share. While waiting it asks Slurm with an exponential backoff and watches, in
    between, the job's output file and the server's port, which cost the controller nothing.
  - Two runs do not submit two jobs. Looking for a live job and submitting are done under an exclusive lock (C(flock) on
    C(.slurm_job-USER-NAME.lock) in O(chdir), made 0600). O(chdir) is where the job's files are, so it is on the
    filesystem that the login nodes and the compute nodes share, and there C(flock) holds across login nodes (NFS,
    Lustre mounted with C(flock), GPFS, WekaFS). When the lock cannot be taken, or with O(duplicate_check=always), the
    module lists the live jobs of that name again after C(sbatch) and, if another one appeared, keeps the oldest and
    cancels its own.
  - The lookup by name asks Slurm as little as it can. It uses, in this order, the listing of an earlier task
    (O(lookup)) when no job of that name was submitted since; the live job of the submit record
    (C(.slurm_job-USER-NAME.json), written after each C(sbatch)), one C(scontrol --local show job) (1 RPC); or
    C(squeue --local -n NAME -u USER) (2 RPCs, as many names as O(lookup_also) adds, for the same cost).
  - Live means C(PENDING), C(CONFIGURING), C(RUNNING), C(SUSPENDED), C(STOPPED), C(RESIZING), C(SIGNALING) or a C(REQUEUE*)
    state. A job that is C(COMPLETING) is ending and does not count. A job C(PENDING) with reason C(DependencyNeverSatisfied)
    will never run, so O(state=present) cancels it and submits a new one.
author:
  - glm.serve maintainers (@glm-serve)
extends_documentation_fragment:
  - glm.serve.slurm
  - glm.serve.slurm.wait
  - glm.serve.slurm.probe
attributes:
  check_mode:
    description: Predicts C(changed); submits, cancels and updates nothing, and does not wait.
    support: full
  diff_mode:
    description: Not supported.
    support: none
  platform:
    description: Runs on the login node of the cluster (a POSIX host with the Slurm client tools).
    support: full
    platforms: posix
options:
  name:
    description:
      - The job name (C(sbatch --job-name)); with O(user), the idempotency key.
      - Required with O(state=present) unless O(job_id) is given; with O(state=absent), every live job of that name is cancelled.
    type: str
  state:
    description:
      - V(present) makes sure a live job of that name exists (submitting O(script) if there is none).
      - V(absent) cancels O(job_id), or every live job of O(name) for O(user).
    type: str
    choices: [present, absent]
    default: present
  script:
    description:
      - Path of the batch script on the host. Required to submit. The module checks it exists first.
    type: path
  script_content:
    description:
      - The batch script's text. The module writes it to O(script) (mode C(0600), atomically) when the file differs, before it
        looks for a live job, and reports V(changed); in check mode it only says so.
      - With O(recreate_on_change), a live job is replaced when the script it runs differs from this text, in check mode too.
      - The file is compared byte for byte, so a run that changes nothing writes nothing. Leave it unset to submit a
        file written otherwise (for example by M(ansible.builtin.template)).
    type: str
  chdir:
    description:
      - Directory C(sbatch) runs in, so the directory where a relative C(--output) such as C(%x-%j.out) lands.
      - Defaults to the directory of O(script).
    type: path
  dependency:
    description:
      - Jobs this job starts after, as C(--dependency) (for example C(afterok:4123:4124,singleton)).
    type: list
    elements: dict
    suboptions:
      type:
        description: The kind of dependency.
        type: str
        required: true
        choices: [afterok, afterany, afternotok, after, singleton]
      job_ids:
        description:
          - Job ids (C(sbatch --parsable) output; a C(ID;cluster) value is reduced to the id). Not used by V(singleton).
        type: list
        elements: str
  kill_on_invalid_dep:
    description:
      - Submit with C(--kill-on-invalid-dep=yes), so that Slurm cancels the job when a job it depends on fails,
        instead of leaving it C(PENDING) (C(DependencyNeverSatisfied)) forever. Only passed with O(dependency).
      - Also, when a wait fails because a job it depends on failed and the job is still C(PENDING) (the site lacks
        C(kill_invalid_depend) and the flag did not apply), the module cancels it and says so.
    type: bool
    default: true
  sbatch_args:
    description:
      - Extra C(sbatch) options, one per element, for example V(--time=08:00:00) or V(--partition=compute-h200).
      - They override the script's C(#SBATCH) lines.
    type: list
    elements: str
    default: []
  umask:
    description:
      - Umask of the C(sbatch) process, as an octal string. The job inherits it, so with the default the job's output
        files are readable by the user only (SGLang logs its API key at startup).
    type: str
    default: '0077'
  recreate:
    description:
      - With O(state=present), cancel a live job of that name and submit a new one.
    type: bool
    default: false
  recreate_if_older_than:
    description:
      - With O(state=present), cancel a live job of that name and submit O(script) when the job was submitted before
        this file on the host was last modified (for example the API key file the job reads when it starts).
      - A job submitted after the change (by a concurrent run, say) is kept. Nothing happens when the file is missing.
    type: path
  recreate_on_change:
    description:
      - With O(state=present) and a live job of that name, compare the batch script Slurm stored for it
        (C(scontrol write batch_script ID -)) with O(script); when they differ, cancel the job and submit O(script).
      - A comparison of contents, not of file times, so a job that a concurrent run submitted from the same script is kept.
      - Options given in O(sbatch_args) are not compared.
      - O(change_strategy) says in which order.
    type: bool
    default: false
  change_strategy:
    description:
      - What O(recreate_on_change) does with a live job whose script differs.
      - V(cancel_first) cancels it, then submits (the job's work stops until the new one has started).
      - V(start_first) submits the new job beside the live ones and leaves them running; they are returned in
        RV(replacing), for the caller to end once the new job serves (O(state=absent) with O(job_id) and O(signal)).
        A later run that finds the new job live (the same script) adopts it and returns the others in RV(replacing)
        again, except the new job's own successors (C(PENDING) on C(after:ITS_ID)).
      - V(fail) fails before anything is cancelled or submitted, naming the live job (for a caller that asks its
        user to accept the interruption first).
    type: str
    choices: [cancel_first, start_first, fail]
    default: cancel_first
  hints:
    description:
      - What to tell the user when the wait fails. Each hint whose O(hints[].match) is found in the failed job's
        C(STATE REASON EXIT_CODE), the failure message or the last lines of its output file is added to the message
        (after C(What to do:)) and returned in RV(hints).
      - The failed job is the job waited for, or the job of the chain it depends on that failed.
      - In O(hints[].hint), C({job_id}), C({name}) and C({log}) are replaced by the failed job's id, name and output file,
        and C({GROUP}) by what the named group GROUP of O(hints[].match) matched.
    type: list
    elements: dict
    default: []
    suboptions:
      match:
        description: A Python regular expression, searched case-insensitively.
        type: str
        required: true
      hint:
        description: The cause and the fix, in words the user can act on.
        type: str
        required: true
      job:
        description: Apply only when the failed job has this name (or id).
        type: str
  bad_nodes:
    description:
      - Avoid nodes that made the job fail. When the wait fails because the job itself ended and the last lines of its
        output match O(bad_nodes.pattern), the node is put on the list O(bad_nodes.file) with the cause, and the job is
        submitted again at once with C(--exclude) of every node on the list, up to O(bad_nodes.retries) times.
      - Every submission excludes the nodes on the list that are younger than O(bad_nodes.ttl), together with an
        C(--exclude) of O(sbatch_args). When that would exclude every node of O(bad_nodes.nodes), the task fails before
        submitting, naming the nodes and their causes.
    type: dict
    suboptions:
      file:
        description: The list, a JSON object of node names to C(cause), C(since) (epoch seconds) and C(job_id), written 0600 (atomically).
        type: path
        required: true
      pattern:
        description:
          - A Python regular expression searched in the failed job's last output lines. Its named group C(node) is the
            node (else the job's node), its named group C(cause) the cause (else the matched text).
        type: str
        required: true
      ttl:
        description: Seconds a node stays on the list.
        type: int
        default: 86400
      retries:
        description: How many times the job is submitted again after such a failure, in one run.
        type: int
        default: 2
      nodes:
        description: The nodes the job can run on (its partition's), so that the module never excludes them all.
        type: list
        elements: str
        default: []
      job_nodes:
        description:
          - How many nodes one job takes (its C(--nodes)). The module neither submits nor retries when fewer of
            O(bad_nodes.nodes) than that are off the list.
        type: int
        default: 1
        version_added: 1.1.0
  duplicate_check:
    description:
      - V(auto) lists the live jobs of O(name) again after C(sbatch) only when the submit lock could not be taken.
      - V(always) does it after every C(sbatch) (2 RPCs more), for login nodes that share O(chdir) over a filesystem
        whose C(flock) is local to each node (NFS mounted with C(local_lock=flock) or C(local_lock=all), Lustre
        mounted with C(localflock)).
    type: str
    choices: [auto, always]
    default: auto
  lookup_also:
    description:
      - More job names (same O(user)) to list in the same C(squeue) call as O(name), at no extra cost to the
        controller. Their live jobs come back in RV(lookup), for a later task's O(lookup).
    type: list
    elements: str
    default: []
  lookup:
    description:
      - The RV(lookup) that an earlier C(slurm_job) task of the play returned. When it lists O(name) for O(user) in
        the same O(chdir), is at most 60 seconds old, and no job of O(name) was submitted under the lock since (the
        submit record is as it was), it stands for this task's lookup by name, so the task asks Slurm nothing before
        C(sbatch). Otherwise it is ignored and the task looks up as usual.
    type: dict
  job_id:
    description:
      - With O(state=absent), the job to cancel (instead of looking it up by name).
      - With O(state=present), adopt this job instead of submitting; report it, wait for it, probe it, set its O(end_time).
    type: str
  signal:
    description:
      - With O(state=absent), send this signal to the batch script of each job that is C(RUNNING)
        (C(scancel --batch --signal=SIGNAL)) instead of cancelling it, so that a script that traps it ends its job
        itself (glm.serve's replicas leave the router and finish their requests on V(USR1)). A C(PENDING) job is
        cancelled. RV(signalled) names the jobs signalled.
    type: str
  wait_slice:
    description:
      - With O(wait), wait at most this many seconds in this call, and less when the deploy moves to another phase
        (RV(phase)); V(0) waits in one piece.
      - A slice that ends before the wait is over returns RV(wait_done=false), a one-line RV(progress) and RV(resume);
        give that RV(resume) to the next call as O(wait_resume), in a loop, to go on. Between slices nothing runs on the
        host, and the next slice's first controller call comes when the last slice's would have, so a wait in slices
        asks slurmctld no more than one in a piece.
      - See the server role's wait (C(loop) with C(loop_control.label) and C(loop_control.break_when)), which prints
        RV(progress) as each slice ends.
    type: int
    default: 0
  wait_resume:
    description:
      - The RV(resume) the last slice returned. The call then only goes on waiting for that job (RV(resume.job_id));
        it writes no script, looks nothing up and submits nothing, except again after a failure on a bad node
        (O(bad_nodes)).
    type: dict
  progress:
    description:
      - What the progress line reads besides the jobs and their output files.
    type: dict
    suboptions:
      model_dir:
        description:
          - The model directory the download job fills; its size against the total the job writes there
            (C(.glm-serve-download.json)) gives the download's GB done, rate and ETA.
        type: path
  end_time:
    description:
      - With O(state=present), the time the running job must end, C(YYYY-MM-DDTHH:MM:SS) in the cluster's time zone,
        set with C(scontrol update JobId=N EndTime=...) when it differs from the job's current end.
      - Only a running job is changed; users may only shorten their jobs.
    type: str
seealso:
  - module: glm.serve.slurm_job_info
'''

EXAMPLES = r'''
- name: Download the weights, a CPU job
  glm.serve.slurm_job:
    name: glm-download
    script: "{{ ansible_facts.env.HOME | default('/home/u') }}/glm/download.sbatch"
  register: download

- name: Serve after the download succeeded, and wait until the model answers
  glm.serve.slurm_job:
    name: glm-serve
    script: /home/u/glm/serve.sbatch
    dependency:
      - type: afterok
        job_ids: ["{{ download.job_id }}"]
    sbatch_args: ["--time=08:00:00", "--partition=compute-h100"]
    wait: true
    wait_timeout: 7200
    probe:
      port: 30000
      key_file: /home/u/glm/api-key
      model: glm-5.3-flash
  register: serve

- name: Show where it answers
  ansible.builtin.debug:
    msg: "{{ serve.endpoint }}/v1 serves {{ serve.models }} ({{ serve.max_model_len }} tokens)"

- name: Stop serving at 18:00
  glm.serve.slurm_job:
    name: glm-serve
    job_id: "{{ serve.job_id }}"
    end_time: "2026-11-30T18:00:00"

- name: Tear down, and wait until the job is gone
  glm.serve.slurm_job:
    name: glm-serve
    state: absent
    wait: true
'''

RETURN = r'''
job_id:
  description: The job's id (the live job found, the one submitted, or the one cancelled). None in check mode when a job would be submitted.
  returned: always
  type: str
  sample: "4124"
cluster:
  description: The cluster of a federated submission (C(sbatch --parsable) printed C(ID;cluster)).
  returned: always
  type: str
  sample: null
name:
  description: The job's name.
  returned: always
  type: str
  sample: glm-serve
user:
  description: The job's user.
  returned: always
  type: str
  sample: glmuser
state:
  description: The job's state last observed (C(PURGED) when Slurm no longer knows the id).
  returned: always
  type: str
  sample: RUNNING
reason:
  description: Slurm's reason for the state (C(None) for a running job).
  returned: always
  type: str
  sample: Dependency
nodes:
  description: The job's node list.
  returned: always
  type: str
  sample: node1
exit_code:
  description: The job's exit code C(code:signal), when Slurm knows it.
  returned: always
  type: str
  sample: "0:0"
output_path:
  description: The job's standard output file, as Slurm reports it.
  returned: always
  type: str
  sample: /home/u/glm/glm-serve-4124.out
submitted:
  description: Whether a job was submitted (in check mode, whether one would be).
  returned: always
  type: bool
cancelled:
  description: Ids of the jobs cancelled (in check mode, that would be).
  returned: always
  type: list
  elements: str
  sample: []
signalled:
  description: Ids of the jobs whose batch script was sent O(signal) instead of being cancelled (in check mode, would be).
  returned: with O(state=absent) and O(signal), when a job was running
  type: list
  elements: str
  sample: ["4123"]
replacing:
  description:
    - With O(change_strategy=start_first), the live jobs of the name that the submitted or adopted job replaces,
      left running; the caller ends them once it serves.
  returned: when there are such jobs
  type: list
  elements: str
  sample: ["4120"]
chain:
  description: The job's dependency parents and the job, each with job_id, name, state and reason, in that order.
  returned: always
  type: list
  elements: dict
  sample: [{job_id: "4123", name: glm-download, state: COMPLETED, reason: None}, {job_id: "4124", name: glm-serve, state: RUNNING, reason: None}]
duration:
  description: Seconds spent waiting.
  returned: always
  type: float
  sample: 42.5
slurm_version:
  description: Version of the Slurm client tools.
  returned: always
  type: str
  sample: 22.05.8
polls:
  description: Number of squeue/scontrol calls made (each reaches slurmctld).
  returned: always
  type: int
  sample: 7
events:
  description: What the wait observed, with the time since it started (the chain's states, the output file, the probe).
  returned: always
  type: list
  elements: str
  sample: ["+0.1s glm-download 4123 RUNNING on node1; glm-serve 4124 PENDING (Dependency)"]
sbatch_cmd:
  description: The C(sbatch) command line run (or that would run in check mode).
  returned: when a job is submitted
  type: list
  elements: str
end_time_changed:
  description: The job's end time before and after O(end_time) changed it.
  returned: when O(end_time) changed the job
  type: dict
endpoint:
  description: The server's base URL C(http://NODE:PORT).
  returned: with O(probe), once the job runs
  type: str
  sample: http://node1:30000
models:
  description: The model ids the server lists.
  returned: with O(probe)
  type: list
  elements: str
  sample: [glm-5.3-flash]
max_model_len:
  description: The context length the server reports for O(probe.model).
  returned: with O(probe)
  type: int
  sample: 202752
hints:
  description: The texts of O(hints) that matched the failure.
  returned: on failure, when a hint matched
  type: list
  elements: str
wait_done:
  description: With O(wait_slice), whether the wait is over (ready, or failed); false when the slice ended first.
  returned: with O(wait_slice) and O(wait)
  type: bool
phase:
  description:
    - Where the deploy stands, with O(wait_slice) - V(queued), V(saving) (the container image), V(downloading),
      V(starting), V(loading), V(capturing), V(warming), V(ready), V(ended) or V(failed).
  returned: with O(wait_slice) and O(wait)
  type: str
  sample: downloading
progress:
  description: The phase in one line, with its figures (the download's GB done of the total, rate and ETA; the
    shards loaded; Slurm's reason and expected start of a queued job).
  returned: with O(wait_slice) and O(wait)
  type: str
  sample: "downloading: 120.4 of 328.0 GB (36%), 310 MB/s, ETA 11 min (job 41 on node2)"
resume:
  description: What the next slice needs to go on (O(wait_resume)); plain data, no secret.
  returned: when a slice ended before the wait was over
  type: dict
  contains:
    job_id:
      description: The job waited for.
      type: str
bad_nodes:
  description: The nodes this run put on the O(bad_nodes.file) list, in order, with the cause and the job that failed there.
  returned: when a job failed for a reason of its node
  type: list
  elements: dict
  sample: [{node: node1, cause: "GPU 3 (00000000:5D:00.0): 1 compute process (pid 4242 python3 70000 MiB)", job_id: "4124"}]
excluded_nodes:
  description: The nodes of the O(bad_nodes.file) list that the last submission excluded.
  returned: when a submission excluded nodes of the list
  type: list
  elements: str
  sample: [node1]
lookup:
  description:
    - The live jobs of O(name) and O(lookup_also) that this task's C(squeue) listed, for a later task's O(lookup).
  returned: when O(lookup_also) was given and the task listed the jobs with C(squeue)
  type: dict
  contains:
    user:
      description: The user whose jobs were listed.
      type: str
    names:
      description: The job names listed.
      type: list
      elements: str
    folder:
      description: The O(chdir) of the task (where the submit records are).
      type: str
    taken_at:
      description: When the listing was made (seconds since the epoch, on the host).
      type: float
    records:
      description: The job id of each name's submit record when the listing was made (null without a record).
      type: dict
    jobs:
      description: The live jobs listed, as C(squeue) rows.
      type: list
      elements: dict
older_than:
  description: The O(recreate_if_older_than) file, when the live job was older than it and was replaced.
  returned: when the live job was replaced for that reason
  type: str
script_written:
  description: True when O(script_content) was written to O(script) (would be, in check mode).
  returned: when O(script_content) differed from the file
  type: bool
script_changed:
  description: True when O(recreate_on_change) found that the live job's stored script differs from O(script).
  returned: when the live job was replaced for that reason
  type: bool
started_now:
  description:
    - The adopted job had been requeued by Slurm (its node failed) and held until a begin time ahead (C(cred_expire) +
      1 s, 121 s by default); its begin time was set to now (C(scontrol update StartTime=now)) so that it starts at
      once on a free node, once its earlier run had been given time to stop on its node (slurmd refuses a second copy
      while a step of it lives there), that is the cluster's C(KillWait) + 5 s after the requeue, which the module
      waited for when it had not passed yet (then asking again whether the job still waits). A job whose begin time
      comes first, or that started meanwhile, is left to Slurm.
  returned: when that happened
  type: dict
  contains:
    job_id:
      description: The job.
      type: str
    was:
      description: The begin time Slurm had set.
      type: str
    restarts:
      description: How many times Slurm had requeued it.
      type: int
    waited:
      description: Seconds the module waited for the earlier run to be stopped before it set the begin time.
      type: int
      version_added: 1.1.0
previous:
  description:
    - How the last job submitted under O(name) (its submit record's) ended, found before a new one was submitted,
      from slurmctld while it remembers the job, else from accounting (C(sacct)).
    - A job that did not complete is also reported in a warning.
  returned: when a new job was submitted and the last one's end was known
  type: dict
  contains:
    job_id:
      description: The last job.
      type: str
    state:
      description: Its final state (TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, CANCELLED, FAILED, COMPLETED...).
      type: str
    why:
      description: "The end in words, e.g. C(TIMEOUT: it reached its time limit (--time 08:00:00) at ... after ...)."
      type: str
    exit_code:
      description: Exit code C(code:signal).
      type: str
    reason:
      description: Slurm's reason.
      type: str
    start_time:
      description: When it started.
      type: str
    end_time:
      description: When it ended.
      type: str
    elapsed:
      description: How long it ran.
      type: str
    time_limit:
      description: Its time limit.
      type: str
    nodes:
      description: Where it ran.
      type: str
    source:
      description: V(slurmctld) or V(accounting).
      type: str
log_tail:
  description: The last lines of the relevant job's output file (secrets masked), when the wait failed.
  returned: on failure
  type: list
  elements: str
failure:
  description:
    - Why the wait failed, in parts, so that a playbook can branch on them; C(msg) is these parts in one message.
  returned: when the wait failed
  type: dict
  contains:
    kind:
      description:
        - V(timeout), V(ended) (a state not waited for), V(dependency) (a job it depends on failed), V(requeued),
          V(purged) (Slurm forgot the job), V(unauthorized) (the server refused the key), V(wrong_model).
      type: str
      sample: dependency
    summary:
      description: What happened, one sentence.
      type: str
      sample: job 4124 (glm-serve) can never start
    reason:
      description: Why, in words.
      type: str
    notes:
      description: Further facts (what the server last answered, what the job waits for).
      type: list
      elements: str
    job_id:
      description: The job whose state and log explain the failure (the job waited for, or the parent that failed).
      type: str
      sample: "4123"
    name:
      description: Its name.
      type: str
      sample: glm-download
    state:
      description: Its state.
      type: str
      sample: FAILED
    slurm_reason:
      description: Slurm's reason for that state.
      type: str
      sample: NonZeroExitCode
    exit_code:
      description: Its exit code C(code:signal).
      type: str
      sample: "1:0"
    log_path:
      description: Its output file.
      type: str
    log_tail:
      description: The last lines of that file (secrets masked).
      type: list
      elements: str
    hints:
      description: The texts of O(hints) that matched.
      type: list
      elements: str
    timed_out:
      description: True when the wait timed out.
      type: bool
    cancelled:
      description: Jobs the wait cancelled because they could never run.
      type: list
      elements: str
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.glm.serve.plugins.module_utils import job_actions
from ansible_collections.glm.serve.plugins.module_utils import slurm_parse as sp
from ansible_collections.glm.serve.plugins.module_utils.job_waiter import WaitFailed
from ansible_collections.glm.serve.plugins.module_utils.slurm_cli import SlurmCli, SlurmError


def argument_spec():
    return dict(
        name=dict(type='str'),
        state=dict(type='str', default='present', choices=['present', 'absent']),
        script=dict(type='path'),
        script_content=dict(type='str'),
        chdir=dict(type='path'),
        dependency=dict(type='list', elements='dict', options=dict(
            type=dict(type='str', required=True, choices=['afterok', 'afterany', 'afternotok', 'after', 'singleton']),
            job_ids=dict(type='list', elements='str'),
        )),
        kill_on_invalid_dep=dict(type='bool', default=True),
        sbatch_args=dict(type='list', elements='str', default=[]),
        umask=dict(type='str', default='0077'),
        recreate=dict(type='bool', default=False),
        recreate_on_change=dict(type='bool', default=False),
        change_strategy=dict(type='str', default='cancel_first', choices=['cancel_first', 'start_first', 'fail']),
        signal=dict(type='str'),
        recreate_if_older_than=dict(type='path'),
        hints=dict(type='list', elements='dict', default=[], options=dict(
            match=dict(type='str', required=True),
            hint=dict(type='str', required=True),
            job=dict(type='str'),
        )),
        duplicate_check=dict(type='str', default='auto', choices=['auto', 'always']),
        bad_nodes=dict(type='dict', options=job_actions.bad_nodes_options()),
        lookup_also=dict(type='list', elements='str', default=[]),
        lookup=dict(type='dict'),
        job_id=dict(type='str'),
        user=dict(type='str'),
        end_time=dict(type='str'),
        retry_timeout=dict(type='int', default=120),
        accounting=dict(type='bool', default=True),
        **wait_spec()
    )


def wait_spec():
    """The options of the wait (O(wait) and what goes with it)."""
    return dict(
        wait=dict(type='bool', default=False),
        wait_condition=dict(type='list', elements='str', default=['RUNNING'], choices=list(sp.WAIT_STATES)),
        wait_timeout=dict(type='int', default=600),
        wait_sleep=dict(type='int', default=60),
        wait_slice=dict(type='int', default=0),
        wait_resume=dict(type='dict'),
        progress=dict(type='dict', options=dict(model_dir=dict(type='path'))),
        probe=dict(type='dict', options=job_actions.probe_options()),
    )


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True,
                           required_one_of=[('name', 'job_id')], required_by={'script_content': 'script'})
    ctx = job_actions.Context(SlurmCli(module), module.params, check_mode=module.check_mode, warn=module.warn, log=module.log)
    action = job_actions.present if module.params['state'] == 'present' else job_actions.absent
    try:
        result = action(ctx)
    except (SlurmError, WaitFailed, job_actions.ActionError) as exc:
        module.fail_json(**job_actions.fail_kwargs(exc))
    module.exit_json(**result)


if __name__ == '__main__':
    main()
