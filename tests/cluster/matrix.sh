#!/usr/bin/env bash
# make test-matrix: for each Debian release of GLM_MATRIX_RELEASES (default "trixie sid"), the local cluster in
# that release's root (cluster.sh with GLM_CLUSTER_RELEASE): install, start, smoke, the live slurm_job tests
# (tests/integration/test_slurm_job_live.py, over SSH into the root), sacct/scontrol/squeue fixtures, stop.
# MinJobAge is GLM_CLUSTER_MIN_JOB_AGE (default here 10 s). Prints a release x stage table; exits 1 if a stage
# failed. Logs: tests/output/matrix/RELEASE-STAGE.log.
# Captured fixtures go to tests/output/matrix/fixtures/RELEASE/ (GLM_MATRIX_FIXTURES=tree: into
# tests/unit/plugins/module_utils/fixtures/ as well). The host cluster (bookworm) is not touched.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
REPO=$PWD
CLUSTER=$REPO/tests/cluster/cluster.sh
OUT=$REPO/tests/output/matrix
FIXTURES=$REPO/tests/unit/plugins/module_utils/fixtures
read -r -a RELEASES <<<"${GLM_MATRIX_RELEASES:-trixie sid}"
STAGES=(install start smoke slurm_job fixtures stop)
PYTEST=${PYTEST:-$REPO/.venv/bin/pytest}
# MinJobAge of the roots' slurmctld: short, so that the live test of the sacct fallback (a job slurmctld has forgotten)
# runs instead of skipping
export GLM_CLUSTER_MIN_JOB_AGE=${GLM_CLUSTER_MIN_JOB_AGE:-10}
mkdir -p "$OUT"
declare -A RESULT TIME

# stage RELEASE NAME CMD...: run, log, record ok/FAIL and seconds
stage() {
  local rel=$1 name=$2 t0=$SECONDS rc
  shift 2
  printf 'matrix: %s %s ...\n' "$rel" "$name" >&2
  "$@" >"$OUT/$rel-$name.log" 2>&1 </dev/null
  rc=$?
  TIME[$rel.$name]=$((SECONDS - t0))
  if [ "$rc" -eq 0 ]; then RESULT[$rel.$name]=ok; else RESULT[$rel.$name]=FAIL; fi
  printf 'matrix: %s %s %s (%s s)\n' "$rel" "$name" "${RESULT[$rel.$name]}" "${TIME[$rel.$name]}" >&2
  return "$rc"
}

# shellcheck disable=SC2317  # called through stage
capture() {
  local rel=$1 home dir
  home=$("$CLUSTER" env | sed -n 's/^export GLM_CLUSTER_LOGIN_HOME=//p')
  [ -n "$home" ] || return 1
  dir=$home/capture-$rel
  rm -rf "$dir"
  "$CLUSTER" exec runuser -u glmuser -- mkdir -p "$dir" || return 1
  install -m 0644 "$FIXTURES/capture-release.sh" "$home/capture-release.sh"
  "$CLUSTER" exec runuser -u glmuser -- bash "$home/capture-release.sh" "$dir" "$rel" || return 1
  rm -rf "$OUT/fixtures/$rel"
  mkdir -p "$OUT/fixtures/$rel"
  cp "$dir"/*.txt "$OUT/fixtures/$rel/"
  mv "$OUT/fixtures/$rel/sacct-commands.txt" "$OUT/fixtures/$rel/sacct-$rel-commands.txt"
  for s in completed failed cancelled timeout; do
    grep -q "|$(tr '[:lower:]' '[:upper:]' <<<"$s")" "$OUT/fixtures/$rel/sacct-$rel-$s.txt" || {
      echo "sacct-$rel-$s.txt has no ${s^^} row"
      return 1
    }
  done
  if [ "${GLM_MATRIX_FIXTURES:-}" = tree ]; then
    cp "$OUT/fixtures/$rel"/*.txt "$FIXTURES/"
  fi
}

for rel in "${RELEASES[@]}"; do
  export GLM_CLUSTER_RELEASE=$rel
  # a fresh start, with this run's configuration (MinJobAge), and a start time measured from down
  "$CLUSTER" stop >/dev/null 2>&1
  if stage "$rel" install "$CLUSTER" install && stage "$rel" start "$CLUSTER" start; then
    stage "$rel" smoke "$CLUSTER" smoke
    stage "$rel" slurm_job "$PYTEST" -p no:cacheprovider -v tests/integration/test_slurm_job_live.py
    stage "$rel" fixtures capture "$rel"
  fi
  stage "$rel" stop "$CLUSTER" stop
  grep -h '^cluster: root .* installed in' "$OUT/$rel-install.log" >&2 || true
done
unset GLM_CLUSTER_RELEASE

rc=0
printf '\n%-8s' release
for s in "${STAGES[@]}"; do printf ' %-10s' "$s"; done
printf ' %s\n' slurm
for rel in "${RELEASES[@]}"; do
  printf '%-8s' "$rel"
  for s in "${STAGES[@]}"; do
    v=${RESULT[$rel.$s]:-skip}
    [ "$v" = ok ] || rc=1
    printf ' %-10s' "$v${TIME[$rel.$s]:+ ${TIME[$rel.$s]}s}"
  done
  printf ' %s\n' "$(cat "/var/lib/glm-roots/$rel/.glm-slurm-version" 2>/dev/null || echo '?')"
done
exit "$rc"
