#!/usr/bin/env bash
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# The AWX recipe of docs/getting-started.md (Install), run by the engine AWX and Automation Platform use,
# ansible-runner, on the local cluster.
# A private data dir shaped like the one AWX writes for a job:
#   project/                    the project: a folder from ansible-playbook glm.serve.init, as a user commits it,
#                               with collections/requirements.yml naming the collection (here: its tarball)
#   requirements_collections/   what AWX's project sync installs from that file (ansible-galaxy collection install
#                               -r project/collections/requirements.yml -p ...), given to the job as
#                               ANSIBLE_COLLECTIONS_PATH (env/envvars)
#   inventory/hosts             the inventory (AWX writes its own there)
#   env/ssh_key                 the machine credential (ansible-runner loads it into an ssh-agent, as AWX does)
#   env/extravars               the job template's extra variables
# then `ansible-runner run DIR -p PLAYBOOK` for deploy.yml, status.yml, teardown.yml, and teardown.yml again (the
# scheduled one, with nothing to stop). Each must end `successful` (artifacts/ID/status, rc 0) with its events
# recorded, and nothing runner keeps (stdout, job events, env) may hold the API key.
# Usage: tests/tooling/runner-test.sh   (make runner-test; needs .venv-runner, make build's tarball or builds one, and
# the local cluster of GLM_CLUSTER_RELEASE running). Prints a table; exit 1 when a step failed. Logs in tests/output/runner/.
# shellcheck disable=SC2317  # functions called through step "$@"
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
venv=$repo/.venv-runner
logs=$repo/tests/output/runner
rm -rf "$logs"
mkdir -p "$logs"
[ -x "$venv/bin/ansible-runner" ] || { echo "runner-test: no $venv: run make runner-test" >&2; exit 2; }

# shellcheck source=tests/tooling/local-cluster-lib.sh
. tests/tooling/local-cluster-lib.sh
need_cluster runner-test

work=$(mktemp -d /tmp/glm-runner-test.XXXXXX)
# whatever happens: no job of the test left on the cluster, no work dir left in the login home
cleanup() {
  in_cluster scancel -n runner-dl,runner-serve > /dev/null 2>&1 || true
  rm -rf "${login_home:?}/glm-runner" "$work"
}
trap cleanup EXIT
find_tarball runner-test "$venv/bin/ansible-galaxy" "$work/build" "$logs/build.log"

rows=()
failed=0
step() {  # label command...
  local label=$1 log="$logs/$1.log" start=$SECONDS rc=0
  shift
  "$@" > "$log" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ]; then
    rows+=("$(printf '%-16s %-5s %4ss' "$label" pass $((SECONDS - start)))")
  else
    rows+=("$(printf '%-16s %-5s %4ss  see %s' "$label" FAIL $((SECONDS - start)) "$log")")
    failed=1
  fi
  return "$rc"
}
fail_row() { rows+=("$(printf '%-16s %-5s        %s' "$1" FAIL "$2")"); failed=1; }

# everything as a job runs under AWX: a clean environment, a home of its own, ansible from the runner venv
home=$work/home
mkdir -p "$home"
# (from outside the repository: an ansible.cfg in the current directory would be read)
clean() { (cd "$work" && env -i PATH="$venv/bin:/usr/local/bin:/usr/bin:/bin" HOME="$home" LANG=C.UTF-8 "$@" < /dev/null); }

pdd=$work/job
project=$pdd/project
make_pdd() {
  mkdir -p "$pdd/env" "$pdd/inventory"
  # the project: what glm.serve.init writes (from the collection installed for this user, as a user makes it)
  clean "$venv/bin/ansible-galaxy" collection install "$tarball" -p "$work/user-collections" || return 1
  clean env ANSIBLE_COLLECTIONS_PATH="$work/user-collections" "$venv/bin/ansible-playbook" glm.serve.init \
    -e dest="$project" || return 1
  printf -- '---\ncollections:\n  - name: %s\n    type: file\n' "$tarball" > "$project/collections/requirements.yml" || return 1
  # AWX's project sync
  clean "$venv/bin/ansible-galaxy" collection install -r "$project/collections/requirements.yml" \
    -p "$pdd/requirements_collections" || return 1
  [ -f "$pdd/requirements_collections/ansible_collections/glm/serve/MANIFEST.json" ] || return 1
  printf -- '---\nANSIBLE_COLLECTIONS_PATH: %s\nANSIBLE_NOCOLOR: "1"\n' "$pdd/requirements_collections" > "$pdd/env/envvars" ||
    return 1
  # the inventory AWX hands the job, and the machine credential
  { echo '[training]'
    printf "login ansible_host=%s ansible_port=%s ansible_user=glmuser ansible_python_interpreter=/usr/bin/python3 ansible_ssh_common_args='-o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes'\n" \
      "$ssh_host" "$ssh_port" "$known_hosts"; } > "$pdd/inventory/hosts" || return 1
  install -m 0600 "$ssh_key" "$pdd/env/ssh_key" || return 1
  cat > "$pdd/env/extravars" << 'EOF2'
---
download_min_free_gb: 1
server_wait_timeout: 300
server_wait_sleep: 5
server_time: "00:30:00"
glm_work_dir: ~/glm-runner
glm_download_job_name: runner-dl
glm_serve_job_name: runner-serve
server_env: {GLM_STANDIN_SGLANG_LOAD: "2", GLM_STANDIN_SGLANG_WARMUP: "1"}
EOF2
  [ -s "$pdd/env/extravars" ] || return 1
  find "$pdd" -maxdepth 2 | sort
}

# run PLAYBOOK IDENT: ansible-runner run, then its verdict from the artifacts it keeps
run() {
  local playbook=$1 ident=$2 art
  clean "$venv/bin/ansible-runner" run "$pdd" -p "$playbook" --ident "$ident" || true
  art=$pdd/artifacts/$ident
  echo "status: $(cat "$art/status" 2> /dev/null) rc: $(cat "$art/rc" 2> /dev/null) events: $(find "$art/job_events" -name '*.json' | wc -l)"
  [ "$(cat "$art/status")" = successful ] && [ "$(cat "$art/rc")" = 0 ] &&
    [ "$(find "$art/job_events" -name '*.json' | wc -l)" -gt 0 ]
}

if step prepare make_pdd; then
  step deploy run deploy.yml deploy || true
  # the progress lines reach the job's output (what AWX shows while it waits)
  grep -q 'ready: http://' "$pdd/artifacts/deploy/stdout" 2> /dev/null || fail_row deploy "no 'ready: http://' progress line in the job's stdout"
  step status run status.yml status || true
  grep -q 'answers (HTTP 200 with the key' "$pdd/artifacts/status/stdout" 2> /dev/null ||
    fail_row status "status does not say the server answers with the key"
  step teardown run teardown.yml teardown || true
  if ! left=$(in_cluster squeue -h -n runner-dl,runner-serve -o %i 2>&1); then
    fail_row teardown "squeue failed: $left"
  elif [ -n "$left" ]; then
    fail_row teardown "jobs left after the teardown: $left"
  fi
  step teardown-again run teardown.yml teardown-again || true
  # the login node's recap line: nothing changed, nothing failed (localhost's, of the host check, always reads changed=0)
  grep -qE '^login +: ok=[0-9]+ +changed=0 +unreachable=0 +failed=0 ' "$pdd/artifacts/teardown-again/stdout" 2> /dev/null ||
    fail_row teardown-again "a teardown with nothing to stop changed something, or failed"
  # the key: never in what runner keeps of a job (stdout, events, the command and env it records)
  key=$(cat "$login_home/glm-runner/api-key" 2> /dev/null || true)
  files=$(find "$pdd/artifacts" -type f 2> /dev/null | wc -l)
  rc=0
  grep -rqF "$key" "$pdd/artifacts" 2> /dev/null || rc=$?
  if [ -z "$key" ]; then
    fail_row key "no key in $login_home/glm-runner/api-key"
  elif [ "$files" -lt 10 ]; then
    fail_row key "only $files artifact files: nothing to look for the key in"
  elif [ "$rc" -eq 0 ]; then
    fail_row key "the API key is in ansible-runner's artifacts: $(grep -rlF "$key" "$pdd/artifacts" | head -n 3 | tr '\n' ' ')"
  elif [ "$rc" -ne 1 ]; then
    fail_row key "grep failed (rc $rc) reading the artifacts"
  else
    rows+=("$(printf '%-16s %-5s        %s' key-not-kept pass "($(find "$pdd/artifacts" -type f | wc -l) artifact files read)")")
  fi
  cp -r "$pdd/artifacts" "$logs/" 2> /dev/null || true
  rm -rf "${login_home:?}/glm-runner"
fi

echo
echo "ansible-runner $("$venv/bin/ansible-runner" --version) on the local $release_name cluster (an AWX-shaped private data dir; logs in $logs):"
printf '%-16s %-5s %5s\n' step result time
printf '%s\n' "${rows[@]}"
exit "$failed"
