# SPDX-FileCopyrightText: glm.serve contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# shellcheck shell=bash disable=SC2034,SC2154  # sets and reads the sourcing script's variables
# Sourced by tests/tooling/install-test.sh and runner-test.sh (after `cd` to the repository, with $repo set): the
# local cluster of GLM_CLUSTER_RELEASE as `cluster.sh env` describes it, read once, and the collection tarball.
#   need_cluster NAME         release_name, login_home, ssh_host, ssh_port, ssh_key, known_hosts; exit 2 (naming
#                             NAME) when that cluster is not there
#   in_cluster CMD...         CMD where the cluster's Slurm commands work (inside the root for trixie/sid)
#   find_tarball NAME GALAXY BUILD_DIR LOG
#                             tarball, version: build/'s tarball, or one built into BUILD_DIR with GALAXY
#                             (ansible-galaxy) when there is none; exit 2 when it is not galaxy.yml's version

need_cluster() {
  local env
  release_name=${GLM_CLUSTER_RELEASE:-bookworm}
  env=$("$repo/tests/tooling/cluster/cluster.sh" env 2> /dev/null || true)
  login_home=$(sed -n 's/^export GLM_CLUSTER_LOGIN_HOME=//p' <<< "$env")
  ssh_host=$(sed -n 's/^export GLM_CLUSTER_SSH_HOST=//p' <<< "$env")
  ssh_port=$(sed -n 's/^export GLM_CLUSTER_SSH_PORT=//p' <<< "$env")
  ssh_key=$(sed -n 's/^export GLM_CLUSTER_SSH_KEY=//p' <<< "$env")
  known_hosts=$(sed -n 's/^export GLM_CLUSTER_KNOWN_HOSTS=//p' <<< "$env")
  if [ -z "$login_home" ] || [ ! -d "$login_home" ] || [ ! -f "$ssh_key" ]; then
    echo "$1: no local $release_name cluster: run make cluster" >&2
    exit 2
  fi
}

in_cluster() { "$repo/tests/tooling/cluster/cluster.sh" exec "$@"; }

find_tarball() {
  local name=$1 galaxy=$2 build_dir=$3 log=$4
  tarball=$(find "$repo/build" -maxdepth 1 -name 'glm-serve-*.tar.gz' 2> /dev/null | head -n 1 || true)
  if [ -z "$tarball" ]; then
    "$galaxy" collection build --output-path "$build_dir" "$repo" > "$log" 2>&1
    tarball=$(find "$build_dir" -maxdepth 1 -name 'glm-serve-*.tar.gz' | head -n 1)
  fi
  version=$(basename "$tarball" .tar.gz)
  version=${version#glm-serve-}
  if [ "$version" != "$(sed -n 's/^version: *//p' "$repo/galaxy.yml")" ]; then
    echo "$name: $tarball is not galaxy.yml's version: run make build" >&2
    exit 2
  fi
}
