#!/usr/bin/env bash
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# One deploy, status and teardown round per claimed ansible-core minor on the local cluster: the controller runs
# the ansible-playbook of that minor's first cell in tests/tooling/ansible-matrix.txt (ansible-core of that release
# on that Python, its venv from tests/tooling/ansible-matrix.sh, made by it when missing), against the cluster's
# login node (its own Python). Prints a table: release x Python x step, pass or fail, seconds.
#
# Usage: tests/tooling/ansible-e2e.sh [--ci]
#   --ci    only the lines marked "ci" (make test-ansible-ci)
# Environment: ANSIBLE_MATRIX_CACHE (default .venv-ansible), as ansible-matrix.sh.
# Needs the local cluster running (make cluster) and the tree linked as glm.serve (make setup). Exit 1 when a step failed.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD

ci=0
case "${1-}" in
  --ci) ci=1 ;;
  "") ;;
  *) echo "ansible-e2e: unknown argument $1" >&2; exit 2 ;;
esac
cache=${ANSIBLE_MATRIX_CACHE:-$repo/.venv-ansible}
mkdir -p "$cache/logs"
cache=$(cd "$cache" && pwd)
# the cluster of GLM_CLUSTER_RELEASE (bookworm: the host's; trixie/sid: the one in that Debian root): its inventory and
# login home (as the host sees it) from cluster.sh env, its Slurm commands through cluster.sh exec
release_name=${GLM_CLUSTER_RELEASE:-bookworm}
cluster_env=$("$repo/tests/tooling/cluster/cluster.sh" env 2> /dev/null || true)
login_home=$(sed -n 's/^export GLM_CLUSTER_LOGIN_HOME=//p' <<< "$cluster_env")
inventory=$(sed -n 's/^export GLM_CLUSTER_INVENTORY=//p' <<< "$cluster_env")
in_cluster() { "$repo/tests/tooling/cluster/cluster.sh" exec "$@"; }
if [ -z "$login_home" ] || [ ! -d "$login_home" ] || [ ! -f "$inventory" ]; then
  echo "ansible-e2e: no login home of the $release_name cluster: run make cluster" >&2
  exit 2
fi

rows=()
failed=0
step() {  # cell label log command...
  local cell=$1 label=$2 log=$3 start=$SECONDS rc=0
  shift 3
  "$@" > "$log" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ]; then
    rows+=("$(printf '%-12s %-6s %-9s %-5s %5ss' "${cell%/*}" "${cell#*/}" "$label" pass $((SECONDS - start)))")
  else
    rows+=("$(printf '%-12s %-6s %-9s %-5s %5ss  see %s' "${cell%/*}" "${cell#*/}" "$label" FAIL $((SECONDS - start)) "$log")")
    failed=1
  fi
  return "$rc"
}

venv=
vars=
# shellcheck disable=SC2317  # called through step "$@"
pb() {  # playbook: with the ansible-playbook of $venv, the variables of $vars
  env PATH="$venv/bin:$PATH" ANSIBLE_CONFIG="$repo/ansible.cfg" ANSIBLE_COLLECTIONS_PATH="$repo/.collections" \
    ANSIBLE_NOCOLOR=1 "$venv/bin/ansible-playbook" -i "$inventory" "playbooks/$1" -e "@$vars" < /dev/null
}

round() {  # release python
  local release=$1 py=$2 tag
  venv=$cache/$release-py$py
  if [ ! -x "$venv/bin/ansible-playbook" ]; then
    tests/tooling/ansible-matrix.sh --only "$release/$py" > "$cache/logs/e2e-$release-py$py-matrix.log" 2>&1 || true
  fi
  if [ ! -x "$venv/bin/ansible-playbook" ]; then
    rows+=("$(printf '%-12s %-6s %-9s %-5s' "$release" "$py" all skipped) (no venv: Python $py missing? see $cache/logs)")
    return 0
  fi
  # the status playbook parses SGLang's metrics with the Prometheus client's parser (filter glm.serve.sglang_metrics)
  "$venv/bin/python" -c 'import prometheus_client' 2> /dev/null ||
    "$venv/bin/python" -m pip install -q --disable-pip-version-check prometheus-client > /dev/null
  tag=e2e-${release//./}-py${py//./}
  rm -rf "${login_home:?}/glm-$tag"
  vars=$cache/logs/$tag-vars.json
  printf '{"glm_work_dir": "~/glm-%s", "glm_download_job_name": "%s-dl", "glm_serve_job_name": "%s-serve",
"server_env": {"GLM_STANDIN_SGLANG_LOAD": "2", "GLM_STANDIN_SGLANG_WARMUP": "1"}}\n' "$tag" "$tag" "$tag" > "$vars"
  step "$release/$py" deploy "$cache/logs/$tag-deploy.log" pb deploy.yml || true
  step "$release/$py" redeploy "$cache/logs/$tag-redeploy.log" pb deploy.yml || true     # idempotent: nothing submitted
  if [ -f "$cache/logs/$tag-redeploy.log" ] && grep -qE ' changed=[1-9]' "$cache/logs/$tag-redeploy.log"; then
    rows+=("$(printf '%-12s %-6s %-9s %-5s' "$release" "$py" redeploy FAIL) (a second deploy changed something)")
    failed=1
  fi
  step "$release/$py" status "$cache/logs/$tag-status.log" pb status.yml || true
  step "$release/$py" teardown "$cache/logs/$tag-teardown.log" pb teardown.yml || true
  if in_cluster squeue -h -n "$tag-dl,$tag-serve" -o %i 2> /dev/null | grep -q .; then
    rows+=("$(printf '%-12s %-6s %-9s %-5s' "$release" "$py" teardown FAIL) (jobs left after the teardown)")
    failed=1
  fi
  rm -rf "${login_home:?}/glm-$tag"
}

while read -r release pythons; do
  case "$release" in ''|'#'*) continue ;; esac
  # shellcheck disable=SC2086  # split on purpose: the Pythons, then maybe "ci"
  set -- $pythons
  if [ "$ci" = 1 ] && [ "${!#}" != ci ]; then continue; fi
  round "$release" "$1"
done < tests/tooling/ansible-matrix.txt

echo
echo "ansible-core end to end on the local $release_name cluster (deploy, deploy again, status, teardown):"
printf '%-12s %-6s %-9s %-5s %6s\n' ansible-core python step result time
printf '%s\n' "${rows[@]}"
exit "$failed"
