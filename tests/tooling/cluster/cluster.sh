#!/usr/bin/env bash
# A real Slurm cluster on localhost for testing glm.serve: munged, slurmctld, four slurmd
# (node1, node2: 16 CPUs, 256 GiB, 8 fake GPUs each, partitions compute-h100 and compute-h200; node3: 8 CPUs,
# 32 GiB, no GPU, partition cpu, for the router; node4, a GPU node as node1, only in partition gpu-all with node1 and
# node2, for the tests that need a third), a Pyxis stand-in SPANK plugin, and a
# login user reached by real SSH. Run as root. See tests/tooling/cluster/README.md. The stand-ins it installs (the
# doubles: hf, SGLang, nvidia-smi, the Pyxis SPANK plugin) are tests/doubles/.
#
#   cluster.sh install|start|stop|status|restart-controller [SECONDS]|restart-node NODE [SECONDS]|restart-login [SECONDS]
#              |smoke|env|exec CMD...
#
# GLM_CLUSTER_RELEASE=bookworm (default): the host's own Debian packages, on the host.
# GLM_CLUSTER_RELEASE=trixie|sid: the same cluster, plus slurmdbd with MariaDB, in a Debian root made by
# debootstrap under /var/lib/glm-roots/RELEASE, run in its own mount, PID, UTS, IPC and network namespaces;
# its login node is reached from the host over a veth pair (see "Roots" in README.md).
set -euo pipefail

GLM_CLUSTER_DIR=${GLM_CLUSTER_DIR:-/var/lib/glm-cluster}
D=$GLM_CLUSTER_DIR
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# the doubles (tests/doubles): the stand-ins copied into the cluster, the Pyxis plugin's source; a root's copy of this
# script's folder holds them in doubles/ (sync_files)
if [ -d "$HERE/doubles" ]; then DOUBLES=$HERE/doubles; else DOUBLES=$(cd "$HERE/../.." && pwd)/doubles; fi
RELEASE=${GLM_CLUSTER_RELEASE:-bookworm}
# set (by the host side of this script) when this script runs inside a root
IN_ROOT=${GLM_CLUSTER_IN_ROOT:-}
# slurmdbd + MariaDB, on every release (GLM_CLUSTER_ACCOUNTING=0: a site without accounting, as before)
ACCOUNTING=${GLM_CLUSTER_ACCOUNTING-1}
[ "$ACCOUNTING" != 0 ] || ACCOUNTING=
MIN_JOB_AGE=${GLM_CLUSTER_MIN_JOB_AGE:-300}
LOGIN_USER=glmuser
# Another user of the cluster, with a shell on the same login node (the platform's gateway lets every cluster user in):
# the tests attack the login user's deployment as this one (issue 37). The same key; no Slurm account needed.
OTHER_USER=glmother
LOGIN_HOME=${GLM_CLUSTER_LOGIN_HOME:-/home/$LOGIN_USER}
SSH_PORT=${GLM_CLUSTER_SSH_PORT:-2222}
SSH_LISTEN=${GLM_CLUSTER_SSH_LISTEN:-127.0.0.1}
# another address the login node is reached at (a root's veth address), for known_hosts
SSH_ADDR=${GLM_CLUSTER_SSH_ADDR:-}
CTLD_PORT=${GLM_CLUSTER_CTLD_PORT:-6817}
DBD_PORT=$((CTLD_PORT - 1))
NODES=(node1 node2 node3 node4)
GPU_NODES=(node1 node2 node4)
# the partitions most tests use (compute-h100, compute-h200): two GPU nodes. node4, a third, is only in gpu-all (with
# the other two), for the tests whose jobs need a node free beside two replicas: a rolling change's new job, the
# successors of two replicas. So every other test sees the cluster it always saw.
H100_NODES=(node1 node2)
declare -A NODE_IP=([node1]=127.0.0.11 [node2]=127.0.0.12 [node3]=127.0.0.13 [node4]=127.0.0.14)
declare -A NODE_PORT=([node1]=$((CTLD_PORT + 1)) [node2]=$((CTLD_PORT + 2)) [node3]=$((CTLD_PORT + 3)) [node4]=$((CTLD_PORT + 4)))
# what a node has: the GPU nodes as an H100 node of the guide, node3 a small CPU node (the router's partition)
declare -A NODE_HW=([node1]="CPUs=16 RealMemory=262144 Gres=gpu:8" [node2]="CPUs=16 RealMemory=262144 Gres=gpu:8"
  [node3]="CPUs=8 RealMemory=32768" [node4]="CPUs=16 RealMemory=262144 Gres=gpu:8")
# python3-venv: the router role makes its venv on the login node (python3 -m venv)
PACKAGES=(slurmctld slurmd slurm-client munge libslurm-dev openssh-server openssh-client gcc libc6-dev python3 python3-venv
  squashfs-tools)
# a login node has curl (the server role's smoke test asks the API with it)
if [ -n "$IN_ROOT" ]; then PACKAGES+=(procps iproute2 less curl); fi
if [ -n "$ACCOUNTING" ]; then PACKAGES+=(slurmdbd mariadb-server mariadb-client); fi
CONF=$D/etc/slurm.conf
MUNGE_SOCKET=$D/run/munge/munge.socket.2
SSH_KEY=$D/ssh/id_ed25519
KNOWN_HOSTS=$D/ssh/known_hosts
HOSTS_TAG="# glm-cluster"
START_TIMEOUT=${GLM_CLUSTER_START_TIMEOUT:-30}

export SLURM_CONF=$CONF

log() { printf 'cluster: %s\n' "$*" >&2; }
die() { printf 'cluster: error: %s\n' "$*" >&2; exit 1; }

need_root() { [ "$(id -u)" -eq 0 ] || die "run as root"; }

# process alive and not a zombie (pid 1 of a container may reap late)
alive() {
  local st
  kill -0 "$1" 2>/dev/null || return 1
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ "$st" != Z ] && [ "$st" != X ]
}

# pid from a pid file if that process is alive and is the daemon the file is for, else nothing (rc 1). The daemon:
# its program name follows from the file's name (slurmd-node2.pid: slurmd, started with -N node2), and its command
# line names $D (every daemon here gets a path in $D, but slurmdbd, which takes none). A stale pid file whose pid now
# belongs to another process is neither reported as running nor signalled: after a reboot, and in a root whose
# namespaces were killed, where the new namespace hands out the same small pids again (CI once found slurmd-node2.pid
# naming the new munged, took node2's slurmd for running and never started it), and a pid of another cluster's daemon.
live_pid() {
  local f=$1 pid cmd comm want base
  [ -s "$f" ] || return 1
  pid=$(<"$f")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  alive "$pid" || return 1
  cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
  base=${f##*/}
  base=${base%.pid}
  case $base in
    slurmd-*)
      [ "$comm" = slurmd ] && [[ "$cmd " == *" -N ${base#slurmd-} "* ]] || return 1 ;;
    *) want=$base ;;
  esac
  [ -z "${want:-}" ] || [ "$comm" = "$want" ] || return 1
  [[ $cmd == *"$D/"* ]] || [ "$base" = slurmdbd ] || return 1
  # and of this cluster: the host's and every root's daemons have the same names and folder ($D is
  # /var/lib/glm-cluster in each), and the host sees a root's processes; a root's run in its own pid namespace
  [ "$(readlink "/proc/$pid/ns/pid" 2>/dev/null)" = "$(readlink /proc/self/ns/pid)" ] || return 1
  printf '%s\n' "$pid"
}

# stop_pidfile NAME FILE: SIGTERM, wait up to 15 s, then SIGKILL
stop_pidfile() {
  local name=$1 f=$2 pid i
  if ! pid=$(live_pid "$f"); then
    rm -f "$f"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 300; i++)); do
    alive "$pid" || break
    sleep 0.05
  done
  if alive "$pid"; then
    log "$name ($pid) did not stop in 15 s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.2
  fi
  rm -f "$f"
  log "stopped $name ($pid)"
}

slurm_version() { squeue --version 2>/dev/null | awk '{print $2}'; }

ssh_login() {
  ssh -i "$SSH_KEY" -o UserKnownHostsFile="$KNOWN_HOSTS" -o StrictHostKeyChecking=yes \
    -o BatchMode=yes -o IdentitiesOnly=yes -o ConnectTimeout=5 -p "$SSH_PORT" \
    "$LOGIN_USER@127.0.0.1" "$@"
}

# ---------------------------------------------------------------- install

install_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  log "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # keep the packages' init scripts from starting daemons with the default config
  local policy=/usr/sbin/policy-rc.d made_policy=
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 0755 "$policy"
    made_policy=1
  fi
  local rc=0
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } || rc=$?
  if [ -n "$made_policy" ]; then rm -f "$policy"; fi
  [ "$rc" -eq 0 ] || die "apt-get failed ($rc)"
  # On a machine run by systemd, the packages enable their own munge/slurmctld/slurmd units, which would start
  # at the next boot on /etc/slurm/slurm.conf (our link) and hold the ports. This cluster is started by hand.
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
    systemctl mask --now munge.service slurmctld.service slurmd.service >/dev/null 2>&1 ||
      log "could not mask the packages' munge/slurmctld/slurmd units; stop them before 'start'"
  fi
}

make_dirs() {
  install -d -m 0755 "$D" "$D/etc" "$D/log" "$D/state" "$D/state/ctld" "$D/run" "$D/run/munge" \
    "$D/lib" "$D/dev" "$D/munge" "$D/ssh" "$D/control" "$D/standins" "$D/run/pyxis-stash"
  local n
  for n in "${NODES[@]}"; do install -d -m 0755 "$D/state/slurmd-$n"; done
  chmod 0700 "$D/munge"
}

make_munge_key() {
  [ -s "$D/munge/munge.key" ] && return 0
  (umask 077 && dd if=/dev/urandom of="$D/munge/munge.key" bs=1024 count=1 status=none)
  chmod 0400 "$D/munge/munge.key"
}

make_gpus() {
  local i
  for i in 0 1 2 3 4 5 6 7; do
    [ -c "$D/dev/nvidia$i" ] || { rm -f "$D/dev/nvidia$i"; mknod -m 0666 "$D/dev/nvidia$i" c 1 3; }
  done
}

# write FILE from stdin only when the content differs (keeps mtimes stable)
write_if_changed() {
  local f=$1 tmp
  tmp=$(mktemp "$f.XXXXXX")
  cat >"$tmp"
  if [ -f "$f" ] && cmp -s "$tmp" "$f"; then
    rm -f "$tmp"
  else
    chmod 0644 "$tmp"
    mv -f "$tmp" "$f"
  fi
}

write_slurm_conf() {
  local n
  {
    cat <<EOF
# Written by tests/tooling/cluster/cluster.sh (glm.serve local test cluster). Do not edit by hand.
ClusterName=glm
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$D/state/ctld
SlurmdSpoolDir=$D/state/slurmd-%n
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd-%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
$(accounting_conf)
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,bf_interval=5$(preempt_signal_conf scheduler)
PriorityType=priority/basic
SlurmdParameters=config_overrides
ReturnToService=2
GresTypes=gpu
PlugStackConfig=$D/etc/plugstack.conf
TaskProlog=$D/etc/task_prolog.sh
KillWait=5
# Preemption as a site with a preemptible partition sets it (slurm.conf(5); src/plugins/preempt/partition_prio): a job
# of a higher PriorityTier takes the nodes of gpu-burst's jobs, which get GraceTime s and the job's own --signal
# (send_user_signal: B:USR1, the replicas' drain; else SIGTERM to the steps only), then are requeued. Slurm 22.05
# spells it SchedulerParameters=preempt_send_user_signal (PreemptParameters came in 23.02: its sacctmgr refuses the key).
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
$(preempt_signal_conf)
MinJobAge=$MIN_JOB_AGE
InactiveLimit=0
MailProg=/bin/true
EOF
    for n in "${NODES[@]}"; do
      echo "NodeName=$n NodeAddr=$n NodeHostname=$n Port=${NODE_PORT[$n]} ${NODE_HW[$n]} State=UNKNOWN"
    done
    echo "PartitionName=compute-h100 Nodes=$(IFS=,; echo "${H100_NODES[*]}") Default=YES MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF"
    echo "PartitionName=compute-h200 Nodes=$(IFS=,; echo "${H100_NODES[*]}") Default=NO MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF"
    echo "PartitionName=gpu-all Nodes=$(IFS=,; echo "${GPU_NODES[*]}") Default=NO MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF"
    echo "PartitionName=cpu Nodes=node3 Default=NO MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF"
    echo "PartitionName=gpu-burst Nodes=$(IFS=,; echo "${H100_NODES[*]}") Default=NO MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=60"
  } | write_if_changed "$CONF"
  # What a compute node has and a login node has not (nvidia-smi): on the PATH of every task, batch scripts too.
  # slurmstepd reads "export NAME=value" lines that the TaskProlog prints.
  # shellcheck disable=SC2016  # $PATH is expanded by the TaskProlog, not here
  printf '#!/bin/sh\n# TaskProlog of the glm.serve local test cluster (written by tests/tooling/cluster/cluster.sh).\necho "export PATH=%s/standins/node-bin:$PATH"\n' "$D" |
    write_if_changed "$D/etc/task_prolog.sh"
  chmod 0755 "$D/etc/task_prolog.sh"

  printf 'NodeName=%s Name=gpu File=%s/dev/nvidia[0-7]\n' "$(IFS=,; echo "${GPU_NODES[*]}")" "$D" |
    write_if_changed "$D/etc/gres.conf"
  # The Pyxis stand-in's site defaults, as a site's enroot.conf sets them: the home directory is not mounted
  # (ENROOT_MOUNT_HOME, off in enroot's shipped config); the container's own filesystem is writable
  # (ENROOT_ROOTFS_WRITABLE=yes), so a write to a path not mounted succeeds and is lost with the container, the case
  # that loses a download silently. GLM_PYXIS_ROOTFS_WRITABLE=0 gives enroot's shipped default (writes there fail).
  # The stand-in hides the user-writable trees (/home, /tmp, ...); a root's login home is elsewhere
  # (/var/lib/glm-roots/RELEASE/home/glmuser): hide its folder too.
  local hide=
  case $LOGIN_HOME in
    /home/*) ;;
    *) hide=" hide=/home:/root:/tmp:/var/tmp:/dev/shm:/mnt:/srv:/media:/scratch:/data:${LOGIN_HOME%/*}" ;;
  esac
  printf 'required %s/lib/pyxis_standin.so standins=%s/standins control=%s/control stash=%s/run/pyxis-stash mount_home=%s rootfs_writable=%s%s\n' \
    "$D" "$D" "$D" "$D" "${GLM_PYXIS_MOUNT_HOME:-0}" "${GLM_PYXIS_ROOTFS_WRITABLE:-1}" "$hide" |
    write_if_changed "$D/etc/plugstack.conf"
  # slurmd 24.11 and later initialise a cgroup plugin even with proctrack/linuxproc, and a root has no cgroup
  # mount: "disabled" exists from 24.05 (22.05 on the host needs no cgroup.conf)
  if [ -n "$IN_ROOT" ]; then echo 'CgroupPlugin=disabled' | write_if_changed "$D/etc/cgroup.conf"; fi
  write_slurmdbd_conf
}

# preempt_signal_conf [scheduler]: the preemption sends the job's own --signal (PreemptParameters=send_user_signal
# from Slurm 23.02; before, SchedulerParameters' preempt_send_user_signal): the line, or with "scheduler" the
# SchedulerParameters option to append
preempt_signal_conf() {
  local major
  major=$(slurm_version | cut -d. -f1)
  if [ "${major:-0}" -ge 23 ]; then
    [ -n "${1:-}" ] || echo 'PreemptParameters=send_user_signal'
  else
    if [ -n "${1:-}" ]; then echo ',preempt_send_user_signal'; else echo '# PreemptParameters: SchedulerParameters above'; fi
  fi
}

accounting_conf() {
  if [ -n "$ACCOUNTING" ]; then
    printf 'AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\nAccountingStoragePort=%s\n' "$DBD_PORT"
  else
    echo 'AccountingStorageType=accounting_storage/none'
  fi
}

# slurmdbd.conf (mode 0600: it holds the database password) next to slurm.conf, where slurmdbd looks for it
write_slurmdbd_conf() {
  [ -n "$ACCOUNTING" ] || return 0
  write_if_changed "$D/etc/slurmdbd.conf" <<EOF
# Written by tests/tooling/cluster/cluster.sh (glm.serve local test cluster). Do not edit by hand.
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$D/run/slurmdbd.pid
LogFile=$D/log/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=glm
StorageLoc=slurm_acct_db
EOF
  chmod 0600 "$D/etc/slurmdbd.conf"
}

# /etc/slurm/slurm.conf -> our config, unless a foreign file is there
link_etc_conf() {
  local target=/etc/slurm/slurm.conf
  install -d -m 0755 /etc/slurm
  if [ -L "$target" ]; then
    local cur
    cur=$(readlink "$target")
    [ "$cur" = "$CONF" ] && return 0
    # ours: a link to an earlier cluster dir's config (written by this script, or gone)
    if [[ $cur == */glm-cluster*/etc/slurm.conf ]] || head -n 1 "$cur" 2>/dev/null | grep -qF 'cluster.sh (glm.serve local test cluster)'; then
      ln -sfn "$CONF" "$target"
    else
      log "warning: $target links to $cur (not ours): left alone; use SLURM_CONF=$CONF"
    fi
  elif [ -e "$target" ]; then
    log "warning: $target exists (not ours): left alone; use SLURM_CONF=$CONF"
  else
    ln -s "$CONF" "$target"
  fi
}

build_plugin() {
  local src=$DOUBLES/pyxis/pyxis_standin.c so=$D/lib/pyxis_standin.so tmp
  [ -f "$src" ] || die "missing $src"
  if [ -f "$so" ] && [ "$so" -nt "$src" ]; then return 0; fi
  log "building $so"
  tmp=$(mktemp "$D/lib/.pyxis_standin.XXXXXX")
  if ! gcc -shared -fPIC -O2 -Wall -Wextra -Wno-format-truncation -o "$tmp" "$src"; then
    rm -f "$tmp"
    die "could not build the SPANK plugin"
  fi
  chmod 0755 "$tmp"
  mv -f "$tmp" "$so"
}

setup_hosts() {
  local n me
  # SlurmctldHost=localhost: a bare root (debootstrap, some containers) may have no /etc/hosts
  if ! getent hosts localhost >/dev/null; then
    printf '127.0.0.1 localhost %s\n' "$HOSTS_TAG" >>/etc/hosts
  fi
  # slurmctld calls srun back at this machine's name: with Slurm 24.11 an unresolvable name
  # costs 10 s per step (and stuck COMPLETING jobs). Debian's installer maps it to 127.0.1.1.
  me=$(uname -n)
  for n in "$me" "${me%%.*}"; do
    if ! getent hosts "$n" >/dev/null; then
      printf '127.0.1.1 %s %s\n' "$n" "$HOSTS_TAG" >>/etc/hosts
    fi
  done
  for n in "${NODES[@]}"; do
    if ! grep -Eq "^[[:space:]]*${NODE_IP[$n]//./\\.}[[:space:]]+([^#]*[[:space:]])?$n([[:space:]]|$)" /etc/hosts; then
      if grep -Eq "^[^#]*[[:space:]]$n([[:space:]]|$)" /etc/hosts; then
        log "warning: /etc/hosts already names $n with another address; not adding ${NODE_IP[$n]}"
      else
        printf '%s %s %s\n' "${NODE_IP[$n]}" "$n" "$HOSTS_TAG" >>/etc/hosts
      fi
    fi
    [ "$(getent hosts "$n" | awk '{print $1; exit}')" = "${NODE_IP[$n]}" ] ||
      log "warning: $n resolves to '$(getent hosts "$n" | awk '{print $1; exit}')', not ${NODE_IP[$n]}"
  done
}

setup_user() {
  local user
  if ! id "$LOGIN_USER" >/dev/null 2>&1; then
    useradd -m -d "$LOGIN_HOME" -s /bin/bash "$LOGIN_USER"
  fi
  if ! id "$OTHER_USER" >/dev/null 2>&1; then
    useradd -m -s /bin/bash "$OTHER_USER"
  fi
  # sshd without PAM refuses accounts whose password field starts with "!" (locked)
  for user in "$LOGIN_USER" "$OTHER_USER"; do
    if getent shadow "$user" | cut -d: -f2 | grep -q '^!'; then
      usermod -p '*' "$user"
    fi
  done
}

# the login node's sshd_config (start rewrites it and reloads a running sshd when it changed)
write_sshd_config() {
  local sftp=/usr/lib/openssh/sftp-server
  [ -x "$sftp" ] || sftp=internal-sftp
  write_if_changed "$D/ssh/sshd_config" <<EOF
# Written by tests/tooling/cluster/cluster.sh: the glm test cluster's login node.
Port $SSH_PORT
ListenAddress $SSH_LISTEN
HostKey $D/ssh/ssh_host_ed25519_key
PidFile $D/run/sshd.pid
AuthorizedKeysFile .ssh/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
AllowUsers $LOGIN_USER $OTHER_USER
UsePAM no
X11Forwarding no
PrintMotd no
PrintLastLog no
Subsystem sftp $sftp
# The platform's SSH gateway, as the guide's platform notes say it (../shared/reference/serve-glm-sglang-seed.md, its
# first lines): "The gateway supports shells, commands, SFTP (including modern scp), and forwarding to loopback ports
# on the login node. Legacy scp and rsync need their programs on the login node. Remote forwarding and non-loopback
# destinations are refused." The same here: -L only to localhost:* or 127.0.0.1:* of this login node (sshd_config(5)
# of OpenSSH 9.2p1, PermitOpen: '*' for any port, "no pattern matching or address lookups are performed on supplied
# names"), so -L to a node (node1, 127.0.0.11-13) fails: "channel N: open failed: administratively prohibited";
# no -R, no socket forwarding, no tun devices. glm.serve reaches a server through roles/glm/files/glm_relay.py.
AllowTcpForwarding local
PermitOpen localhost:* 127.0.0.1:*
GatewayPorts no
AllowStreamLocalForwarding no
PermitTunnel no
EOF
}

# SIGHUP: sshd re-executes itself with the new configuration (checked first with sshd -t); sessions already open keep
# theirs. A config sshd refuses stops start, with sshd's message.
reload_sshd() {
  local pid
  pid=$(live_pid "$D/run/sshd.pid") || return 0
  /usr/sbin/sshd -t -f "$D/ssh/sshd_config" || die "sshd refuses $D/ssh/sshd_config"
  kill -HUP "$pid"
  log "sshd configuration changed: reloaded (pid $pid)"
}

setup_ssh() {
  install -d -m 0755 "$D/ssh"
  [ -s "$D/ssh/ssh_host_ed25519_key" ] ||
    ssh-keygen -q -t ed25519 -N '' -C glm-cluster-host -f "$D/ssh/ssh_host_ed25519_key"
  [ -s "$SSH_KEY" ] || ssh-keygen -q -t ed25519 -N '' -C glm-cluster-operator -f "$SSH_KEY"
  chmod 0600 "$SSH_KEY" "$D/ssh/ssh_host_ed25519_key"
  chown root:root "$SSH_KEY"
  {
    printf '[127.0.0.1]:%s %s\n' "$SSH_PORT" "$(cut -d' ' -f1,2 "$D/ssh/ssh_host_ed25519_key.pub")"
    printf '[localhost]:%s %s\n' "$SSH_PORT" "$(cut -d' ' -f1,2 "$D/ssh/ssh_host_ed25519_key.pub")"
    if [ -n "$SSH_ADDR" ]; then
      printf '[%s]:%s %s\n' "$SSH_ADDR" "$SSH_PORT" "$(cut -d' ' -f1,2 "$D/ssh/ssh_host_ed25519_key.pub")"
    fi
  } | write_if_changed "$KNOWN_HOSTS"

  local sshd_before
  sshd_before=$(md5sum <"$D/ssh/sshd_config" 2>/dev/null || true)
  write_sshd_config
  # a running sshd (an install over a cluster that is up) takes the new configuration now, not at its next start
  [ "$sshd_before" = "$(md5sum <"$D/ssh/sshd_config")" ] || reload_sshd
  write_if_changed "$D/ssh/ssh_config" <<EOF
# ssh -F $D/ssh/ssh_config glm-login
Host glm-login
  HostName 127.0.0.1
  Port $SSH_PORT
  User $LOGIN_USER
  IdentityFile $SSH_KEY
  IdentitiesOnly yes
  UserKnownHostsFile $KNOWN_HOSTS
  StrictHostKeyChecking yes
  BatchMode yes
EOF

  local ak pub user home
  pub=$(cat "$SSH_KEY.pub")
  for user in "$LOGIN_USER" "$OTHER_USER"; do
    home=$(getent passwd "$user" | cut -d: -f6)
    [ "$user" != "$LOGIN_USER" ] || home=$LOGIN_HOME
    ak=$home/.ssh/authorized_keys
    install -d -m 0700 -o "$user" -g "$user" "$home/.ssh"
    touch "$ak"
    grep -qxF "$pub" "$ak" || printf '%s\n' "$pub" >>"$ak"
    chown "$user:$user" "$ak"
    chmod 0600 "$ak"
  done
}

cmd_install() {
  need_root
  install_packages
  make_dirs
  make_munge_key
  make_gpus
  write_slurm_conf
  link_etc_conf
  build_plugin
  setup_hosts
  setup_user
  setup_ssh
  [ -z "$ACCOUNTING" ] || init_mariadb
  if [ -n "$IN_ROOT" ]; then slurm_version >/.glm-slurm-version; fi
  log "installed (Slurm $(slurm_version)) in $D"
}

installed() {
  [ -f "$CONF" ] && [ -f "$D/lib/pyxis_standin.so" ] && [ -s "$SSH_KEY" ] && id "$LOGIN_USER" >/dev/null 2>&1 &&
    id "$OTHER_USER" >/dev/null 2>&1 && [ -s "$(getent passwd "$OTHER_USER" | cut -d: -f6)/.ssh/authorized_keys" ] &&
    command -v slurmctld >/dev/null && command -v munged >/dev/null &&
    { [ -z "$ACCOUNTING" ] || { command -v slurmdbd >/dev/null && [ -d "$D/mysql/mysql" ]; }; }
}

# ---------------------------------------------------------------- start / stop

copy_standins() {
  local src=$DOUBLES new=$D/standins.new old=$D/standins.old
  install -d -m 0755 "$D/control"
  if [ ! -d "$src" ]; then
    log "no $src: keeping $D/standins as it is"
    install -d -m 0755 "$D/standins"
    return 0
  fi
  rm -rf "$new" "$old"
  cp -R "$src" "$new"
  # the Pyxis plugin's source: built into lib/ (build_plugin), nothing a job runs
  rm -rf "$new/pyxis"
  find "$new" -name __pycache__ -type d -prune -exec rm -rf {} +
  chown -R root:root "$new"
  chmod -R u+rwX,go+rX,go-w "$new"
  if [ -d "$D/standins" ]; then mv "$D/standins" "$old"; fi
  mv "$new" "$D/standins"
  rm -rf "$old"
}

# sacct and sacctmgr (22.05 to 26.05) reach slurmdbd through munge's default socket, whatever AuthInfo says: point
# that at ours, unless a munged of the machine's own is there (then leave it, and say sacct may fail)
DEFAULT_MUNGE_SOCKET=/run/munge/munge.socket.2
link_default_munge_socket() {
  if [ -S "$DEFAULT_MUNGE_SOCKET" ] && [ ! -L "$DEFAULT_MUNGE_SOCKET" ]; then
    log "warning: $DEFAULT_MUNGE_SOCKET belongs to another munged: sacct and sacctmgr may not reach this cluster's slurmdbd"
    return 0
  fi
  install -d -m 0755 "$(dirname "$DEFAULT_MUNGE_SOCKET")"
  ln -sfn "$MUNGE_SOCKET" "$DEFAULT_MUNGE_SOCKET"
}

start_munged() {
  if live_pid "$D/run/munged.pid" >/dev/null; then return 0; fi
  install -d -m 0755 "$D/run/munge"
  munged --force --socket="$MUNGE_SOCKET" --key-file="$D/munge/munge.key" \
    --pid-file="$D/run/munged.pid" --seed-file="$D/munge/munged.seed" --log-file="$D/log/munged.log"
  local i
  for ((i = 0; i < 50; i++)); do
    if [ -S "$MUNGE_SOCKET" ]; then
      return 0
    fi
    sleep 0.1
  done
  die "munged did not create $MUNGE_SOCKET (see $D/log/munged.log)"
}

# ---- accounting: MariaDB (Debian's server, own datadir, socket only) and slurmdbd

# MariaDB's own run folder, socket and TCP port (127.0.0.1 only): never the distribution's default socket or port,
# so that a MariaDB/MySQL the machine already runs is neither used nor disturbed. slurmdbd talks TCP to it.
DB_RUN=$D/run/mariadb
DB_SOCKET=$DB_RUN/mariadb.sock
DB_PORT=${GLM_CLUSTER_DB_PORT:-$((CTLD_PORT - 4))}
MARIADB_PID=$DB_RUN/mariadbd.pid

db() { mariadb --socket="$DB_SOCKET" "$@"; }

init_mariadb() {
  [ -d "$D/mysql/mysql" ] && return 0
  log "initialising MariaDB in $D/mysql"
  install -d -m 0750 -o mysql -g mysql "$D/mysql"
  mariadb-install-db --user=mysql --datadir="$D/mysql" --skip-test-db >"$D/log/mariadb-install.log" 2>&1 ||
    die "mariadb-install-db failed (see $D/log/mariadb-install.log)"
}

start_mariadb() {
  if live_pid "$MARIADB_PID" >/dev/null; then return 0; fi
  install -d -m 0755 -o mysql -g mysql "$DB_RUN"
  rm -f "$DB_SOCKET"
  # mariadbd stays in the foreground: detach it; it writes its own pid file
  setsid mariadbd --user=mysql --datadir="$D/mysql" --socket="$DB_SOCKET" --pid-file="$MARIADB_PID" \
    --bind-address=127.0.0.1 --port="$DB_PORT" --log-error="$D/mysql/mariadb.err" </dev/null >/dev/null 2>&1 &
  local i
  for ((i = 0; i < 300; i++)); do
    if [ -S "$DB_SOCKET" ] && db -e 'select 1' >/dev/null 2>&1; then break; fi
    sleep 0.1
  done
  db -e 'select 1' >/dev/null 2>&1 || die "MariaDB did not start (see $D/mysql/mariadb.err)"
  # slurmdbd comes over TCP from 127.0.0.1: the account for that host too
  db -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'glm';
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'glm';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" || die "could not create the slurm database user"
}

start_slurmdbd() {
  if live_pid "$D/run/slurmdbd.pid" >/dev/null; then return 0; fi
  rm -f "$D/run/slurmdbd.pid"
  write_slurmdbd_conf
  slurmdbd || die "slurmdbd failed to start (see $D/log/slurmdbd.log)"
  local deadline=$((SECONDS + 30))
  while ((SECONDS < deadline)); do
    sacctmgr -n list cluster >/dev/null 2>&1 && return 0
    sleep 0.3
  done
  die "slurmdbd does not answer (see $D/log/slurmdbd.log)"
}

CTLD_STARTED_MS=

now_ms() { date +%s%3N; }

start_slurmctld() {
  if live_pid "$D/run/slurmctld.pid" >/dev/null; then return 0; fi
  rm -f "$D/run/slurmctld.pid"
  CTLD_STARTED_MS=$(now_ms)
  slurmctld -f "$CONF" || die "slurmctld failed to start (see $D/log/slurmctld.log)"
}

start_slurmd() {
  local n=$1
  if live_pid "$D/run/slurmd-$n.pid" >/dev/null; then return 0; fi
  install -d -m 0755 "$D/state/slurmd-$n"
  slurmd -f "$CONF" -N "$n" || die "slurmd $n failed to start (see $D/log/slurmd-$n.log)"
}

start_sshd() {
  if live_pid "$D/run/sshd.pid" >/dev/null; then return 0; fi
  install -d -m 0755 /run/sshd
  /usr/sbin/sshd -f "$D/ssh/sshd_config" -E "$D/log/sshd.log" || die "sshd failed to start (see $D/log/sshd.log)"
}

# every node registered with this slurmctld (SlurmdStartTime set) and is usable: IDLE, MIXED,
# ALLOCATED or COMPLETING, without DRAIN/NOT_RESPONDING/... flags. sinfo alone is not enough:
# after a controller restart it shows the saved state before the nodes answer (about 4 s).
nodes_ready() {
  local out n line state
  out=$(scontrol -o show node 2>/dev/null) || return 1
  for n in "${NODES[@]}"; do
    line=$(grep -E "^NodeName=$n " <<<"$out") || return 1
    [[ $line =~ SlurmdStartTime=None ]] && return 1
    state=$(grep -oE ' State=[^ ]+' <<<"$line") || return 1
    state=${state# State=}
    state=${state//+PLANNED/}   # the backfill scheduler plans a pending job on the node: still up
    case $state in
      IDLE | MIXED | ALLOCATED | COMPLETING | IDLE+COMPLETING | MIXED+COMPLETING | ALLOCATED+COMPLETING) ;;
      *) return 1 ;;
    esac
  done
}

wait_ready() {
  local deadline=$((SECONDS + START_TIMEOUT))
  until nodes_ready; do
    if ((SECONDS >= deadline)); then
      sinfo -N 2>&1 | sed 's/^/  /' >&2 || true
      # what CI shows of it: each daemon's state and the last lines of each slurmd's log
      cmd_status 2>&1 | sed 's/^/  /' >&2 || true
      for n in "${NODES[@]}"; do
        log "last lines of $D/log/slurmd-$n.log:"
        tail -n 5 "$D/log/slurmd-$n.log" 2>&1 | sed 's/^/  /' >&2 || true
      done
      die "nodes not ready after ${START_TIMEOUT} s (see $D/log/)"
    fi
    sleep 0.2
  done
  # slurmctld's first scheduling pass comes about 3 s after it starts: a job submitted
  # before waits for it. Let start return once jobs start at once.
  if [ -n "$CTLD_STARTED_MS" ]; then
    local left=$((CTLD_STARTED_MS + 3200 - $(now_ms)))
    if ((left > 0)); then sleep "$(printf '%d.%03d' $((left / 1000)) $((left % 1000)))"; fi
  fi
}

all_running() {
  local n
  live_pid "$D/run/munged.pid" >/dev/null || return 1
  if [ -n "$ACCOUNTING" ]; then
    live_pid "$MARIADB_PID" >/dev/null || return 1
    live_pid "$D/run/slurmdbd.pid" >/dev/null || return 1
  fi
  live_pid "$D/run/slurmctld.pid" >/dev/null || return 1
  for n in "${NODES[@]}"; do live_pid "$D/run/slurmd-$n.pid" >/dev/null || return 1; done
  live_pid "$D/run/sshd.pid" >/dev/null || return 1
}

# ctld_knows_nodes: true unless a running slurmctld lists fewer nodes than NODES (it started with an older slurm.conf)
ctld_knows_nodes() {
  local known n
  live_pid "$D/run/slurmctld.pid" >/dev/null || return 0
  known=" $(sinfo -h -N -o %N 2>/dev/null | sort -u | tr '\n' ' ') "
  for n in "${NODES[@]}"; do [[ $known == *" $n "* ]] || return 1; done
}

cmd_start() {
  need_root
  installed || die "not installed: run '$0 install' first"
  local t0=$SECONDS n
  copy_standins
  build_plugin # slurmstepd loads it for every step: a rebuilt plugin takes effect at once
  local sshd_before
  sshd_before=$(md5sum <"$D/ssh/sshd_config" 2>/dev/null || true)
  write_sshd_config
  [ "$sshd_before" = "$(md5sum <"$D/ssh/sshd_config")" ] || reload_sshd
  if all_running && nodes_ready; then
    local before
    before=$(cat "$CONF" "$D/etc/task_prolog.sh" 2>/dev/null | md5sum || true)
    write_slurm_conf
    if [ "$before" != "$(cat "$CONF" "$D/etc/task_prolog.sh" 2>/dev/null | md5sum || true)" ]; then
      scontrol reconfigure && log "configuration changed: reconfigured"
    fi
    log "already up"
    return 0
  fi
  # A cold start (no slurmd alive: the machine, or this root, went down without `stop`, which cancels every job):
  # slurmctld reloads the jobs of before from its state files and lists them RUNNING on nodes whose processes are
  # gone, holding those nodes from the next test run (seen: a CI run whose replica waited behind a download job of a
  # test run that a session's end had cut off). Cancelled once the cluster is up.
  # (slurmctld down too: a slurmd that crashed alone leaves its jobs' slurmstepd running, and they are live)
  local cold=1
  if live_pid "$D/run/slurmctld.pid" >/dev/null; then cold=; fi
  for n in "${NODES[@]}"; do if live_pid "$D/run/slurmd-$n.pid" >/dev/null; then cold=; fi; done
  local conf_before
  conf_before=$(md5sum <"$CONF" 2>/dev/null || true)
  write_slurm_conf
  if [ -z "$cold" ] && { [ "$conf_before" != "$(md5sum <"$CONF")" ] || ! ctld_knows_nodes; }; then
    # a node or partition added while some daemons ran (a cluster of an earlier checkout, node4 missing): slurmctld
    # (22.05: reconfigure adds no node) and the running slurmd read the node list only when they start. Their jobs'
    # slurmstepd live on and are taken back when they start again.
    log "configuration changed while Slurm ran (nodes or partitions): restarting slurmctld and the slurmd"
    for n in "${NODES[@]}"; do stop_pidfile "slurmd $n" "$D/run/slurmd-$n.pid"; done
    stop_pidfile slurmctld "$D/run/slurmctld.pid"
  fi
  make_gpus
  start_munged
  if [ -n "$ACCOUNTING" ]; then
    link_default_munge_socket
    start_mariadb
    start_slurmdbd
  fi
  start_slurmctld
  for n in "${NODES[@]}"; do start_slurmd "$n"; done
  start_sshd
  wait_ready
  if [ -n "$cold" ]; then cancel_all_jobs "left from before the cluster went down"; fi
  log "up in $((SECONDS - t0)) s"
  sinfo
}

# cancel_all_jobs [WHY]: every user's jobs, waited for until squeue lists none (20 s at most)
cancel_all_jobs() {
  local ids i
  ids=$(squeue -h -o %i 2>/dev/null) || return 0
  [ -n "$ids" ] || return 0
  log "cancelling jobs${1:+ $1}: $(echo "$ids" | tr '\n' ' ')"
  # shellcheck disable=SC2086
  scancel $ids 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    [ -z "$(squeue -h -o %i 2>/dev/null)" ] && return 0
    sleep 0.2
  done
  log "warning: jobs still listed after 20 s"
}

cmd_stop() {
  need_root
  local n
  if live_pid "$D/run/slurmctld.pid" >/dev/null; then cancel_all_jobs; fi
  for n in "${NODES[@]}"; do stop_pidfile "slurmd $n" "$D/run/slurmd-$n.pid"; done
  stop_pidfile slurmctld "$D/run/slurmctld.pid"
  if [ -n "$ACCOUNTING" ]; then
    stop_pidfile slurmdbd "$D/run/slurmdbd.pid"
    stop_pidfile mariadb "$MARIADB_PID"
  fi
  stop_pidfile sshd "$D/run/sshd.pid"
  stop_pidfile munged "$D/run/munged.pid"
}

# restart-controller [SECONDS]: slurmctld stays down SECONDS (default 0) before it starts again
cmd_restart_controller() {
  need_root
  local down=${1:-0}
  [[ $down =~ ^[0-9]+([.][0-9]+)?$ ]] || die "restart-controller: SECONDS must be a number"
  stop_pidfile slurmctld "$D/run/slurmctld.pid"
  sleep "$down"
  start_munged
  start_slurmctld
  wait_ready
  log "slurmctld restarted"
}

# The platform's own faults (the seed guide's platform notes: adding or removing a login account restarts the login
# nodes, the controller and accounting, then the compute nodes one at a time, ending their jobs).

# same_ns PID: the process is of this cluster's pid namespace (the host sees the processes of every root)
same_ns() { [ "$(readlink "/proc/$1/ns/pid" 2>/dev/null)" = "$(readlink /proc/self/ns/pid)" ]; }

# descendants PID...: those pids and every process below them (by parent pid), one per line
descendants() {
  local -A kids=()
  local pid ppid queue=("$@") seen=" "
  while read -r pid ppid; do kids[$ppid]+="$pid "; done < <(ps -e -o pid=,ppid=)
  while [ ${#queue[@]} -gt 0 ]; do
    pid=${queue[0]}
    queue=("${queue[@]:1}")
    [[ $seen == *" $pid "* ]] && continue
    seen+="$pid "
    printf '%s\n' "$pid"
    # shellcheck disable=SC2206  # pids: words
    [ -z "${kids[$pid]:-}" ] || queue+=(${kids[$pid]})
  done
}

# power_cut PID...: SIGSTOP the processes and all below them first (nothing forks or reacts meanwhile), then SIGKILL
# them, as a machine that loses its power: no signal handler runs, no exit is reported to anyone
power_cut() {
  local pids
  [ $# -gt 0 ] || return 0
  pids=$(descendants "$@")
  # shellcheck disable=SC2086
  kill -STOP $pids 2>/dev/null || true
  pids=$(descendants "$@") # what forked before the stop
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null || true
}

# restart-node NODE [SECONDS]: the compute node restarts, as a SUNK node's pod does: its slurmd and every process of
# its jobs (each slurmstepd of the node, with all below it, and any process that left that tree but runs with
# SLURMD_NODENAME=NODE) die at once with SIGKILL; SECONDS later (default 10) slurmd starts again, with no job. What
# happens to the jobs is Slurm's: slurmctld finds them missing when the node registers (requeued when they may be,
# else NODE_FAIL), as on a real cluster.
cmd_restart_node() {
  need_root
  local node=${1-} down=${2:-10} n ok='' pids=() pid cmd job sock
  for n in "${NODES[@]}"; do [ "$n" = "$node" ] && ok=1; done
  [ -n "$ok" ] || die "restart-node: NODE must be one of ${NODES[*]} (got '${node}')"
  [[ $down =~ ^[0-9]+([.][0-9]+)?$ ]] || die "restart-node: SECONDS must be a number"
  # the node's steps: its spool folder holds a socket NODE_JOBID.STEPID per live step
  local -A steps=()
  for sock in "$D/state/slurmd-$node/${node}"_*; do
    [ -S "$sock" ] || continue
    job=${sock##*/"${node}"_}
    steps[${job%%.*}]=1
  done
  if pid=$(live_pid "$D/run/slurmd-$node.pid"); then pids+=("$pid"); fi
  for pid in $(pgrep -x slurmstepd || true); do
    same_ns "$pid" || continue
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || continue
    # "slurmstepd: [JOBID.batch]", "[JOBID.0]", "[JOBID.extern]"
    job=${cmd#*[}
    job=${job%%.*}
    [ -n "${steps[$job]:-}" ] && pids+=("$pid")
  done
  while read -r pid; do
    if same_ns "$pid"; then pids+=("$pid"); fi
  done < <(grep -lsz "^SLURMD_NODENAME=$node\$" /proc/[0-9]*/environ | cut -d/ -f3)
  log "restart-node $node: power cut (slurmd, ${#steps[@]} job(s): ${!steps[*]}), back in $down s"
  power_cut "${pids[@]}"
  rm -f "$D/run/slurmd-$node.pid"
  sleep "$down"
  start_slurmd "$node"
  log "restart-node $node: slurmd started"
}

# restart-login [SECONDS]: the login node restarts: sshd and every SSH session die at once (SIGKILL), with every
# process of the login user that is not part of a Slurm job (the ansible modules an SSH session runs, relays, load
# generators, nohup'd or not); SECONDS later (default 10) sshd starts again. Slurm and the jobs go on.
cmd_restart_login() {
  need_root
  local down=${1:-10} pids=() pid jobs
  [[ $down =~ ^[0-9]+([.][0-9]+)?$ ]] || die "restart-login: SECONDS must be a number"
  if pid=$(live_pid "$D/run/sshd.pid"); then pids+=("$pid"); fi
  # the jobs' processes run as the login user too: keep each slurmstepd's tree
  # shellcheck disable=SC2046  # pids: words
  jobs=" $(descendants $(pgrep -x slurmstepd || true) | tr '\n' ' ') "
  for pid in $(pgrep -u "$LOGIN_USER" || true); do
    same_ns "$pid" || continue
    [[ $jobs == *" $pid "* ]] || pids+=("$pid")
  done
  log "restart-login: sshd and ${#pids[@]} process(es) of the login node killed, back in $down s"
  power_cut "${pids[@]}"
  rm -f "$D/run/sshd.pid"
  sleep "$down"
  start_sshd
  log "restart-login: sshd started"
}

cmd_status() {
  local ok=0 n name f pid
  local names=(munged)
  [ -z "$ACCOUNTING" ] || names+=(mariadb slurmdbd)
  for name in "${names[@]}" slurmctld "${NODES[@]}" sshd; do
    case $name in
      node*) f=$D/run/slurmd-$name.pid ;;
      mariadb) f=$MARIADB_PID ;;
      *) f=$D/run/$name.pid ;;
    esac
    if pid=$(live_pid "$f"); then
      printf '%-10s running  pid %s\n' "${name/#node/slurmd-node}" "$pid"
    else
      printf '%-10s stopped\n' "${name/#node/slurmd-node}"
      ok=1
    fi
  done
  if live_pid "$D/run/slurmctld.pid" >/dev/null; then
    sinfo || ok=1
    nodes_ready || ok=1
  fi
  return "$ok"
}

cmd_env() {
  cat <<EOF
export GLM_CLUSTER_RELEASE=$RELEASE
export GLM_CLUSTER_ROOT=
export GLM_CLUSTER_DIR=$D
export GLM_CLUSTER_LOGIN_HOME=$LOGIN_HOME
export GLM_CLUSTER_LOGIN_UID=$(id -u "$LOGIN_USER" 2>/dev/null)
export GLM_CLUSTER_LOGIN_GID=$(id -g "$LOGIN_USER" 2>/dev/null)
export GLM_CLUSTER_SSH_ALIAS=glm-login
export GLM_CLUSTER_INVENTORY=$(cd "$HERE/../../.." && pwd)/inventory/local
export SLURM_CONF=$CONF
export GLM_CLUSTER_USER=$LOGIN_USER
export GLM_CLUSTER_OTHER_USER=$OTHER_USER
export GLM_CLUSTER_SSH_HOST=127.0.0.1
export GLM_CLUSTER_SSH_PORT=$SSH_PORT
export GLM_CLUSTER_SSH_KEY=$SSH_KEY
export GLM_CLUSTER_KNOWN_HOSTS=$KNOWN_HOSTS
export GLM_CLUSTER_SSH_CONFIG=$D/ssh/ssh_config
export GLM_STANDIN_CONTROL=$D/control
# ssh -F \$GLM_CLUSTER_SSH_CONFIG glm-login
EOF
}

# ---------------------------------------------------------------- smoke

# the remote commands are single-quoted on purpose: they expand on the login side
# shellcheck disable=SC2016
cmd_smoke() {
  need_root
  all_running || die "cluster not running: '$0 start'"
  local rc=0 out id state i
  echo "== ssh: squeue as $LOGIN_USER, no SLURM_CONF"
  ssh_login 'echo "PATH=$PATH SLURM_CONF=${SLURM_CONF-unset} python3=$(command -v python3)"; squeue' || rc=1

  echo "== srun --container-image=docker://x --container-save=\$HOME/a.sqsh true (a real squashfs)"
  if ssh_login 'rm -f ~/a.sqsh && srun --container-image=docker://x --container-save=$HOME/a.sqsh true && ls -l ~/a.sqsh && unsquashfs -s ~/a.sqsh | head -n 3'; then
    echo "ok"
  else
    echo "FAILED"
    rc=1
  fi

  echo "== srun --container-image=\$HOME/missing.sqsh true (must fail)"
  if ssh_login 'srun --container-image=$HOME/missing.sqsh true'; then
    echo "FAILED: a missing squashfs was accepted"
    rc=1
  else
    echo "ok (failed as expected)"
  fi

  echo "== the home directory: not in the container unless mounted; a write there vanishes"
  if ssh_login 'rm -rf ~/.glm-smoke-w && srun --container-image=$HOME/a.sqsh bash -c "test ! -e ~/a.sqsh && mkdir -p ~/.glm-smoke-w && touch ~/.glm-smoke-w/f" &&
      test ! -e ~/.glm-smoke-w/f && srun --container-image=$HOME/a.sqsh --container-mounts=$HOME bash -c "test -f ~/a.sqsh" &&
      srun --container-image=$HOME/a.sqsh --container-mount-home bash -c "test -f ~/a.sqsh"'; then
    echo ok
  else
    echo "FAILED: the home directory should be seen only when mounted, and a write to it otherwise lost"
    rc=1
  fi

  echo "== container PATH: stand-ins only inside container steps"
  # shellcheck disable=SC2016
  out=$(ssh_login 'srun --container-image=$HOME/a.sqsh bash -c "echo \$PATH"; srun bash -c "echo \$PATH"') || rc=1
  echo "$out"
  if [ "$(grep -c "$D/standins/bin" <<<"$out")" != 1 ]; then
    echo "FAILED: stand-in folder should be on PATH of the container step only"
    rc=1
  fi
  if [ -x "$D/standins/bin/hf" ]; then
    echo "== srun --container-image=\$HOME/a.sqsh hf --help (hf not on the login PATH)"
    if ssh_login '! command -v hf >/dev/null && srun --container-image=$HOME/a.sqsh hf --help | head -n 3'; then
      echo ok
    else
      echo FAILED
      rc=1
    fi
  fi

  echo "== sbatch --gres=gpu:8 --exclusive --mem=0 --wrap 'echo \$CUDA_VISIBLE_DEVICES'"
  id=$(ssh_login "mkdir -p ~/.glm-smoke && cd ~/.glm-smoke && sbatch --parsable --job-name=glm-smoke --output=smoke-%j.out --gres=gpu:8 --exclusive --mem=0 --wrap 'echo \$CUDA_VISIBLE_DEVICES'") || rc=1
  id=${id%%;*}
  state=
  for ((i = 0; i < 150; i++)); do
    state=$(squeue -h -t all -j "$id" -o %T 2>/dev/null || true)
    case $state in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) break ;; esac
    sleep 0.2
  done
  out=$(ssh_login "cat ~/.glm-smoke/smoke-$id.out" 2>/dev/null || true)
  echo "job $id $state: CUDA_VISIBLE_DEVICES=$out"
  if [ "$state" = COMPLETED ] && [ "$out" = "0,1,2,3,4,5,6,7" ]; then echo ok; else
    echo FAILED
    rc=1
  fi
  if [ -n "$ACCOUNTING" ] && [ -n "$id" ]; then
    echo "== sacct -X -j $id (the login user, from slurmdbd)"
    for ((i = 0; i < 50; i++)); do
      state=$(ssh_login "sacct -n -X -P -j $id -o State" 2>&1 || true)
      [ "$state" = COMPLETED ] && break
      sleep 0.2
    done
    echo "$state"
    if [ "$state" = COMPLETED ]; then echo ok; else
      echo FAILED
      rc=1
    fi
  fi
  if [ "$rc" -eq 0 ]; then echo "SMOKE OK"; else echo "SMOKE FAILED"; fi
  return "$rc"
}

# ---------------------------------------------------------------- roots (trixie, sid)
# The host side: a Debian root under $ROOTS_DIR/$RELEASE (debootstrap, then this script's own install run
# inside it), and a namespace holder: unshare --mount --pid --net --uts --ipc, whose PID 1 is chrooted into the
# root and only reaps. Everything of the root runs in those namespaces (nsenter), so its slurmctld, slurmd, munged,
# MariaDB and sshd have their own ports, sockets and /run. Inside, the root is also mounted at its own host path
# ($ROOT), so that a host path under the root (the login home, the key, the control folder) names the same file on
# both sides. The login node is reached from the host over a veth pair: 10.77.N.1 (host) - 10.77.N.2 (root).

ROOTS_DIR=${GLM_ROOTS_DIR:-/var/lib/glm-roots}
ROOTS_CACHE=${GLM_ROOTS_CACHE:-/var/cache/glm-roots}
ROOTS_RUN=/run/glm-roots
ROOT=$ROOTS_DIR/$RELEASE
# the cluster's folder inside the root, and the same folder seen from the host
ROOT_D=/var/lib/glm-cluster
HOST_D=$ROOT$ROOT_D
case $RELEASE in
  bookworm) ROOT_NET=0 ;;
  trixie) ROOT_NET=1 ;;
  sid) ROOT_NET=2 ;;
  *) die "GLM_CLUSTER_RELEASE=$RELEASE: expected bookworm, trixie or sid" ;;
esac
ROOT_HOST_IP=10.77.$ROOT_NET.1
ROOT_IP=10.77.$ROOT_NET.2
ROOT_VETH=glmroot$ROOT_NET
ROOT_SSH_ALIAS=glm-login-$RELEASE
ROOT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# the apt mirror the host uses (deb822 or one-line sources)
host_mirror() {
  local m
  m=$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -n 1)
  [ -n "$m" ] || m=$(grep -hE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk '{print $2}' | grep -v security | head -n 1)
  [ -n "$m" ] || die "no Debian mirror found in /etc/apt"
  printf '%s\n' "$m"
}

# host pid of the root's PID 1 (the holder's child), if it runs
root_ns_pid() {
  local upid pid
  [ -s "$ROOTS_RUN/$RELEASE.pid" ] || return 1
  upid=$(<"$ROOTS_RUN/$RELEASE.pid")
  [[ $upid =~ ^[0-9]+$ ]] && alive "$upid" || return 1
  [[ $(tr '\0' ' ' <"/proc/$upid/cmdline" 2>/dev/null) == unshare* ]] || return 1
  pid=$(awk '{print $1}' "/proc/$upid/task/$upid/children" 2>/dev/null)
  [ -n "$pid" ] && alive "$pid" || return 1
  # PID 1 of this root: its name (exec -a) and the root it sees
  [[ $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) == "glm-root-$RELEASE "* ]] || return 1
  [ -e "/proc/$pid/root/.glm-debootstrap-done" ] || return 1
  printf '%s\n' "$pid"
}

start_ns() {
  root_ns_pid >/dev/null && return 0
  install -d -m 0755 "$ROOTS_RUN" "$ROOTS_CACHE/$RELEASE/apt"
  install -d -m 0755 "$ROOT$ROOT" "$ROOT/.glm-oldroot"
  ip link del "$ROOT_VETH" 2>/dev/null || true
  # PID 1 of the root: mounts, then pivot_root into the root and reap (bash reaps any child it gets). pivot_root,
  # not chroot: in a chroot the kernel refuses new user namespaces (EPERM), which the Pyxis stand-in makes per task.
  # shellcheck disable=SC2016  # expanded by the holder's shell
  setsid unshare --mount --uts --ipc --pid --net --fork --kill-child --propagation private -- /bin/bash -c '
    set -e
    R=$1 C=$2
    hostname "glm-$3"
    mount --bind "$R" "$R"
    mount -t proc proc "$R/proc"
    mount --rbind /dev "$R/dev"
    mount -t sysfs sysfs "$R/sys"
    mount -t tmpfs -o mode=0755 tmpfs "$R/run"
    mount --bind "$R" "$R$R"
    mount --bind "$C" "$R/var/cache/apt/archives"
    cd "$R"
    pivot_root . .glm-oldroot
    umount -l /.glm-oldroot
    exec -a "glm-root-$3" /bin/bash -c "trap \"exit 0\" TERM; while :; do sleep 3600 & wait \$!; done"
  ' glm-root "$ROOT" "$ROOTS_CACHE/$RELEASE/apt" "$RELEASE" </dev/null >/dev/null 2>&1 &
  echo $! >"$ROOTS_RUN/$RELEASE.pid"
  disown
  local i pid=
  for ((i = 0; i < 100; i++)); do
    pid=$(root_ns_pid) && break
    sleep 0.05
  done
  [ -n "$pid" ] || die "the namespaces of $ROOT did not come up"
  ip link add "$ROOT_VETH" type veth peer name "${ROOT_VETH}p" netns "$pid"
  ip addr add "$ROOT_HOST_IP/24" dev "$ROOT_VETH"
  ip link set "$ROOT_VETH" up
  nsenter -t "$pid" -n sh -c "ip link set lo up && ip link set ${ROOT_VETH}p name eth0 &&
    ip addr add $ROOT_IP/24 dev eth0 && ip link set eth0 up"
  cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
  # new namespaces: no daemon of the root runs, every pid file it left names nothing (or another process)
  rm -f "$HOST_D"/run/*.pid "$HOST_D"/run/mariadb/*.pid
  log "namespaces of $ROOT up (PID 1 = host pid $pid; login node $ROOT_IP)"
}

stop_ns() {
  local upid
  [ -s "$ROOTS_RUN/$RELEASE.pid" ] || return 0
  upid=$(<"$ROOTS_RUN/$RELEASE.pid")
  if root_ns_pid >/dev/null; then
    kill -KILL "$upid" 2>/dev/null || true # --kill-child: the root's PID 1 and so every process of the root go
    local i
    for ((i = 0; i < 100; i++)); do alive "$upid" || break; sleep 0.05; done
    log "namespaces of $ROOT stopped"
  fi
  rm -f "$ROOTS_RUN/$RELEASE.pid"
  ip link del "$ROOT_VETH" 2>/dev/null || true
}

# in_root [-h] CMD...: run CMD in the root (all its namespaces; -h: the host's network, for apt)
in_root() {
  local net=-n pid
  if [ "${1-}" = -h ]; then net=; shift; fi
  pid=$(root_ns_pid) || die "root $RELEASE not running"
  # shellcheck disable=SC2086
  nsenter -t "$pid" -m -u -i -p $net -r -w -- /usr/bin/env -i PATH="$ROOT_PATH" HOME=/root LANG=C.UTF-8 \
    TERM="${TERM:-dumb}" SLURM_CONF="$ROOT_D/etc/slurm.conf" "$@"
}

# this script, inside the root
in_root_cluster() {
  local net=
  if [ "${1-}" = -h ]; then net=-h; shift; fi
  in_root $net GLM_CLUSTER_IN_ROOT=1 GLM_CLUSTER_RELEASE="$RELEASE" GLM_CLUSTER_ACCOUNTING=1 \
    GLM_CLUSTER_DIR="$ROOT_D" GLM_CLUSTER_LOGIN_HOME="$ROOT/home/$LOGIN_USER" GLM_CLUSTER_SSH_LISTEN=0.0.0.0 \
    GLM_CLUSTER_SSH_ADDR="$ROOT_IP" GLM_CLUSTER_MIN_JOB_AGE="$MIN_JOB_AGE" GLM_CLUSTER_START_TIMEOUT="$START_TIMEOUT" \
    /opt/glm-cluster/cluster.sh "$@"
}

# a copy in the root of this script's folder (tests/tooling/cluster) and of the doubles (tests/doubles: the stand-ins,
# the plugin's source) in its doubles/
sync_files() {
  local dst=$ROOT/opt/glm-cluster
  rm -rf "$dst.new"
  install -d -m 0755 "$ROOT/opt"
  cp -R --preserve=mode,timestamps "$HERE" "$dst.new"
  cp -R --preserve=mode,timestamps "$DOUBLES" "$dst.new/doubles"
  find "$dst.new" -name __pycache__ -type d -prune -exec rm -rf {} +
  rm -rf "$dst.old"
  if [ -d "$dst" ]; then mv "$dst" "$dst.old"; fi
  mv "$dst.new" "$dst"
  rm -rf "$dst.old"
}

debootstrap_root() {
  [ -f "$ROOT/.glm-debootstrap-done" ] && return 0
  command -v debootstrap >/dev/null || {
    log "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap; }
  }
  local mirror t0=$SECONDS
  mirror=$(host_mirror)
  [ ! -e "$ROOT" ] || { log "removing an unfinished $ROOT"; rm -rf --one-file-system "$ROOT"; }
  install -d -m 0755 "$ROOTS_DIR" "$ROOTS_CACHE/$RELEASE/debootstrap"
  log "debootstrap $RELEASE into $ROOT (debs cached in $ROOTS_CACHE/$RELEASE)"
  debootstrap --variant=minbase --cache-dir="$ROOTS_CACHE/$RELEASE/debootstrap" \
    "$RELEASE" "$ROOT" "$mirror" >"$ROOTS_CACHE/$RELEASE/debootstrap.log" 2>&1 ||
    die "debootstrap failed (see $ROOTS_CACHE/$RELEASE/debootstrap.log)"
  printf 'deb %s %s main\n' "$mirror" "$RELEASE" >"$ROOT/etc/apt/sources.list"
  # daemons are started by this script, never by a package's maintainer script
  printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
  chmod 0755 "$ROOT/usr/sbin/policy-rc.d"
  printf '127.0.0.1 localhost\n' >"$ROOT/etc/hosts"
  touch "$ROOT/.glm-debootstrap-done"
  log "debootstrap done in $((SECONDS - t0)) s"
}

# the ssh config of the root's login node for the host (paths seen from the host); the inventory is the repo's
# inventory/$RELEASE
write_host_files() {
  write_if_changed "$HOST_D/ssh/ssh_config_host" <<EOF
# ssh -F $HOST_D/ssh/ssh_config_host $ROOT_SSH_ALIAS   (the login node of the $RELEASE root, from the host)
Host $ROOT_SSH_ALIAS
  HostName $ROOT_IP
  Port $SSH_PORT
  User $LOGIN_USER
  IdentityFile $HOST_D/ssh/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $HOST_D/ssh/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
EOF
}

root_install() {
  need_root
  local t0=$SECONDS started=
  debootstrap_root
  # a mirror's snapshot of sid can carry a Release file whose Valid-Until is past (seen here: "expired")
  echo 'Acquire::Check-Valid-Until "false";' >"$ROOT/etc/apt/apt.conf.d/99glm-valid-until"
  sync_files
  root_ns_pid >/dev/null || started=1
  start_ns
  in_root_cluster -h install
  write_host_files
  if [ -n "$started" ]; then stop_ns; fi
  log "root $RELEASE installed in $((SECONDS - t0)) s (Slurm $(cat "$ROOT/.glm-slurm-version" 2>/dev/null || echo '?'))"
}

root_start() {
  need_root
  [ -f "$ROOT/.glm-debootstrap-done" ] || die "no root $ROOT: run 'GLM_CLUSTER_RELEASE=$RELEASE $0 install' first"
  sync_files
  start_ns
  in_root_cluster start
  write_host_files
}

root_stop() {
  need_root
  if root_ns_pid >/dev/null; then in_root_cluster stop || true; fi
  stop_ns
}

root_status() {
  if ! root_ns_pid >/dev/null; then
    echo "root $RELEASE: namespaces not running ($ROOT)"
    return 1
  fi
  echo "root $RELEASE: $ROOT, login node $LOGIN_USER@$ROOT_IP:$SSH_PORT"
  in_root_cluster status
}

root_exec() {
  [ "$#" -gt 0 ] || die "exec: no command"
  local wd=/
  # the root is mounted at its own host path inside: a host working directory under it exists there too
  [[ $PWD == "$ROOT"/* ]] && wd=$PWD
  # shellcheck disable=SC2016  # expanded by that shell
  in_root /bin/sh -c 'cd "$1" 2>/dev/null || cd /; shift; exec "$@"' glm-exec "$wd" "$@"
}

root_env() {
  local uid gid
  uid=$(awk -F: -v u="$LOGIN_USER" '$1 == u {print $3}' "$ROOT/etc/passwd" 2>/dev/null)
  gid=$(awk -F: -v u="$LOGIN_USER" '$1 == u {print $4}' "$ROOT/etc/passwd" 2>/dev/null)
  cat <<EOF
export GLM_CLUSTER_RELEASE=$RELEASE
export GLM_CLUSTER_ROOT=$ROOT
export GLM_CLUSTER_DIR=$HOST_D
export GLM_CLUSTER_USER=$LOGIN_USER
export GLM_CLUSTER_LOGIN_HOME=$ROOT/home/$LOGIN_USER
export GLM_CLUSTER_LOGIN_UID=$uid
export GLM_CLUSTER_LOGIN_GID=$gid
export GLM_CLUSTER_SSH_HOST=$ROOT_IP
export GLM_CLUSTER_SSH_PORT=$SSH_PORT
export GLM_CLUSTER_SSH_KEY=$HOST_D/ssh/id_ed25519
export GLM_CLUSTER_KNOWN_HOSTS=$HOST_D/ssh/known_hosts
export GLM_CLUSTER_SSH_CONFIG=$HOST_D/ssh/ssh_config_host
export GLM_CLUSTER_SSH_ALIAS=$ROOT_SSH_ALIAS
export GLM_CLUSTER_INVENTORY=$(cd "$HERE/../../.." && pwd)/inventory/$RELEASE
export GLM_STANDIN_CONTROL=$HOST_D/control
# slurm commands of the root: $0 exec CMD... (SLURM_CONF is set there)
# ssh -F \$GLM_CLUSTER_SSH_CONFIG $ROOT_SSH_ALIAS
EOF
}

usage() {
  echo "usage: [GLM_CLUSTER_RELEASE=bookworm|trixie|sid] $0 install|start|stop|status|restart-controller [SECONDS]|restart-node NODE [SECONDS]|restart-login [SECONDS]|smoke|env|exec CMD..." >&2
  exit 2
}

if [ "$RELEASE" != bookworm ] && [ -z "$IN_ROOT" ]; then
  case ${1-} in
    install) root_install ;;
    start) root_start ;;
    stop) root_stop ;;
    status) root_status ;;
    restart-controller | restart-node | restart-login | smoke) root_ns_pid >/dev/null || die "root $RELEASE not running: '$0 start'"; in_root_cluster "$@" ;;
    env) root_env ;;
    exec) shift; root_exec "$@" ;;
    *) usage ;;
  esac
  exit
fi

case ${1-} in
  install) cmd_install ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  restart-controller) cmd_restart_controller "${2-}" ;;
  restart-node) cmd_restart_node "${2-}" "${3-}" ;;
  restart-login) cmd_restart_login "${2-}" ;;
  smoke) cmd_smoke ;;
  env) cmd_env ;;
  exec) shift; exec "$@" ;;
  *) usage ;;
esac
