#!/usr/bin/env bash
# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# The path a user takes, on the local cluster: the collection installed with ansible-galaxy, never this folder, run
# from a folder of the user's outside the repository, with a home of its own (nothing of this tree's ansible.cfg,
# .collections link or ANSIBLE_* variables). Three rounds, each deploy (download and server from nothing), deploy
# again (nothing changed), status, teardown (no job left):
#   tarball   ansible-galaxy collection install build/glm-serve-X.Y.Z.tar.gz -p ./collections; an ansible.cfg and an
#             inventory of the user's; ansible-playbook glm.serve.deploy -i inventory (the FQCN playbooks)
#   git       ansible-galaxy collection install git+file://REPO,HEAD (what is committed) the same way
#   scaffold  ansible-galaxy collection install TARBALL (into ~/.ansible/collections), ansible-playbook glm.serve.init
#             -e dest=ops, `training` edited to point at the local cluster, then in ops: ansible-playbook deploy.yml
#             -i training, status.yml, teardown.yml as written; init again changes nothing and keeps the edit
# Usage: tests/tooling/install-test.sh   (make install-test; needs make build's tarball, or builds one, and the local
# cluster of GLM_CLUSTER_RELEASE running). Prints a table, exits 1 when a step failed. Logs: tests/output/install/.
# shellcheck disable=SC2317,SC2030,SC2031  # functions called through step "$@"; cwd set per call on purpose
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
bin=$repo/.venv/bin
logs=$repo/tests/output/install
rm -rf "$logs"
mkdir -p "$logs"

# shellcheck source=tests/tooling/local-cluster-lib.sh
. tests/tooling/local-cluster-lib.sh
need_cluster install-test

work=$(mktemp -d /tmp/glm-install-test.XXXXXX)
# whatever happens: no job of a round left on the cluster, no work dir left in the login home
cleanup() {
  in_cluster scancel -n install-tarball-dl,install-tarball-serve,install-git-dl,install-git-serve,install-scaffold-dl,install-scaffold-serve \
    > /dev/null 2>&1 || true
  rm -rf "${login_home:?}"/glm-install-tarball "${login_home:?}"/glm-install-git "${login_home:?}"/glm-install-scaffold "$work"
}
trap cleanup EXIT
find_tarball install-test "$bin/ansible-galaxy" "$work/build" "$logs/build.log"

rows=()
failed=0
# user CMD...: in the user's world: cwd $cwd, HOME $home, no ANSIBLE_* of ours, the toolchain's ansible on PATH
cwd=
home=
user() {
  (cd "$cwd" && env -i PATH="$bin:/usr/local/bin:/usr/bin:/bin" HOME="$home" LANG=C.UTF-8 ANSIBLE_NOCOLOR=1 "$@" < /dev/null)
}
step() {  # round label command...
  local round=$1 label=$2 log="$logs/$1-$2.log" start=$SECONDS rc=0
  shift 2
  "$@" > "$log" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ]; then
    rows+=("$(printf '%-9s %-10s %-5s %4ss' "$round" "$label" pass $((SECONDS - start)))")
  else
    rows+=("$(printf '%-9s %-10s %-5s %4ss  see %s' "$round" "$label" FAIL $((SECONDS - start)) "$log")")
    failed=1
  fi
  return "$rc"
}
fail_row() { rows+=("$(printf '%-9s %-10s %-5s       %s' "$1" "$2" FAIL "$3")"); failed=1; }

# the local cluster's login node as a user writes it in an inventory; $1: the host's name
host_line() {
  printf "%s ansible_host=%s ansible_port=%s ansible_user=glmuser ansible_ssh_private_key_file=%s ansible_ssh_common_args='-o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes'\n" \
    "$1" "$ssh_host" "$ssh_port" "$ssh_key" "$known_hosts"
}
# settings for the stand-ins (tiny checkpoint, a server ready in seconds), and this round's own work dir and jobs
round_vars() {
  cat << EOF2
download_min_free_gb=1
server_wait_timeout=300
server_wait_sleep=5
server_time=00:30:00
glm_work_dir=~/glm-install-$1
glm_download_job_name=install-$1-dl
glm_serve_job_name=install-$1-serve
EOF2
}
standin_env='{"server_env": {"GLM_STANDIN_SGLANG_LOAD": "2", "GLM_STANDIN_SGLANG_WARMUP": "1"}}'

# the four steps of a round: $1 round, $2.. the command that runs a playbook given its name (deploy, status, teardown)
lifecycle() {
  local round=$1 left key
  shift
  if step "$round" deploy "$@" deploy; then
    step "$round" redeploy "$@" deploy || true
    # nothing changed: nothing submitted either (a submission is a change)
    if grep -qE ' changed=[1-9]' "$logs/$round-redeploy.log"; then fail_row "$round" redeploy "a second deploy changed something"; fi
    step "$round" status "$@" status || true
    grep -q 'answers (HTTP 200 with the key' "$logs/$round-status.log" ||
      fail_row "$round" status "status does not say the server answers with the key"
  fi
  # torn down even after a failed deploy: nothing of the round stays on the cluster
  step "$round" teardown "$@" teardown || true
  if ! left=$(in_cluster squeue -h -n "install-$round-dl,install-$round-serve" -o %i 2>&1); then
    fail_row "$round" teardown "squeue failed: $left"
  elif [ -n "$left" ]; then
    fail_row "$round" teardown "jobs left after the teardown: $left"
  fi
  # the key: never in what the user saw (every log of the round)
  key=$(cat "$login_home/glm-install-$round/api-key" 2> /dev/null || true)
  if [ -z "$key" ]; then
    fail_row "$round" key "no key in $login_home/glm-install-$round/api-key"
  elif grep -qF "$key" "$logs/$round"-*.log; then
    fail_row "$round" key "the API key is in the output: $(grep -lF "$key" "$logs/$round"-*.log | tr '\n' ' ')"
  fi
  in_cluster scancel -n "install-$round-dl,install-$round-serve" > /dev/null 2>&1 || true
  rm -rf "${login_home:?}/glm-install-$round"
}

# the collection the user's ansible finds: one glm.serve, at the version of the tarball, under $1
check_installed() {
  local where=$1 out
  out=$(user ansible-galaxy collection list glm.serve 2>&1) || true
  printf '%s\n' "$out"
  grep -q "^# $where/ansible_collections" <<< "$out" && grep -qE "^glm\.serve +$version\b" <<< "$out" &&
    [ "$(grep -c '^glm\.serve ' <<< "$out")" = 1 ]
}

# --- tarball
cwd=$work/tarball home=$work/tarball-home
mkdir -p "$cwd" "$home"
printf '[defaults]\ncollections_path = ./collections\ninventory = inventory\n' > "$cwd/ansible.cfg"
{ echo '[training]'; host_line login; echo; echo '[training:vars]'; echo 'ansible_python_interpreter=/usr/bin/python3'
  round_vars tarball; } > "$cwd/inventory"
pb_fqcn() { user ansible-playbook "glm.serve.$1" -i inventory -e "$standin_env"; }
if step tarball install user ansible-galaxy collection install "$tarball" -p ./collections &&
   step tarball installed check_installed "$cwd/collections"; then
  lifecycle tarball pb_fqcn
fi

# --- git (what is committed on HEAD)
cwd=$work/git home=$work/git-home
mkdir -p "$cwd" "$home"
cp "$work/tarball/ansible.cfg" "$cwd/ansible.cfg"
{ echo '[training]'; host_line login; echo; echo '[training:vars]'; echo 'ansible_python_interpreter=/usr/bin/python3'
  round_vars git; } > "$cwd/inventory"
if step git install user ansible-galaxy collection install "git+file://$repo,HEAD" -p ./collections &&
   step git installed check_installed "$cwd/collections"; then
  lifecycle git pb_fqcn
fi

# --- scaffold: the collection in the user's default collections path, a folder from glm.serve.init
cwd=$work/scaffold home=$work/scaffold-home
mkdir -p "$cwd" "$home"
pb_line() { (cwd=$cwd/ops; user ansible-playbook "$1.yml" -i training -e "$standin_env"); }
edit_training() {  # what a user does: the login node's address, and settings for this (tiny, fast) cluster
  python3 - "$cwd/ops/training" "$(host_line training)" "$(round_vars scaffold)" << 'EOF2'
import sys
path, host, settings = sys.argv[1:]
text = open(path).read()
assert '[training]\ntraining\n' in text, text
text = text.replace('[training]\ntraining\n', '[training]\n' + host + '\n') + settings + '\n'
open(path, 'w').write(text)
EOF2
}
init_again() {  # changes nothing, keeps the edit
  local before after
  before=$(cat "$cwd/ops/training")
  user ansible-playbook glm.serve.init -e dest=ops || return 1
  after=$(cat "$cwd/ops/training")
  [ "$before" = "$after" ] || { echo "init changed the edited training file"; return 1; }
}
if step scaffold install user ansible-galaxy collection install "$tarball" &&
   step scaffold installed check_installed "$home/.ansible/collections" &&
   step scaffold init user ansible-playbook glm.serve.init -e dest=ops &&
   step scaffold edit edit_training; then
  lifecycle scaffold pb_line
  step scaffold init-again init_again || true
  grep -qE 'localhost +: ok=[0-9]+ +changed=0 +unreachable=0 +failed=0 ' "$logs/scaffold-init-again.log" ||
    fail_row scaffold init-again "the second init changed something"
fi

echo
echo "install test on the local $release_name cluster (glm.serve $version as users install it; logs in $logs):"
printf '%-9s %-10s %-5s %5s\n' round step result time
printf '%s\n' "${rows[@]}"
exit "$failed"
