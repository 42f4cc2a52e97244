# glm_continuity READY_FILE REPLICA_FILE SUCCESSOR_FILE END_FILE LEAD UNTIL SCRIPT [SBATCH_ARG...]
# Included in serve.sbatch by the glm.serve.server role with server_successors_until, for a replica behind the router;
# runs in the background beside SGLang, once per job. Nothing here waits on anything but files and Slurm's clock.
# Once READY_FILE exists (the health gate passed: this job serves, its address is the replica's in REPLICA_FILE):
# 1. Its successor is submitted, unless SUCCESSOR_FILE says it was (a requeued job keeps its id): the same job name,
#    the same Slurm comment (the deployment's membership), SCRIPT with the SBATCH_ARGs, and
#    --dependency=after:THIS_JOB+MINUTES, so that Slurm starts it MINUTES after this job started: LEAD seconds before
#    this job's time limit, as Slurm reports it (server_time, or the partition's MaxTime when lower). One
#    `scontrol show job` for the comment, the limit and the start, one sbatch. None past UNTIL (YYYY-MM-DD[THH:MM],
#    the node's local time; "forever": no end) nor past the service's end (END_FILE, written by the teardown:
#    glm_service_end). An sbatch that fails is said and tried again 3 times (30, 60, 120 s); the job then goes on
#    without one, and the replica ends with it. The successor's environment has GLM_SUCCESSOR_OF=THIS_JOB.
# 2. This job watches REPLICA_FILE (every 2 s, no Slurm call): once another job's id is there after its own (its
#    successor has passed its own gate and taken the replica's place in the router), it notes which one, and when
#    that one started (the file's third line), in SUCCESSOR_FILE.took-over ("ID START") and sends itself USR1, the
#    drain of server_drain_before: it finishes its requests, SGLang stops, the job records the handover
#    (glm_record_handover) and ends COMPLETED. The same, with SUCCESSOR_FILE.ended, once the service's end has come
#    (teardown's glm_stop_at): the replica leaves the router and drains, and no successor follows.
glm_continuity() {
  local ready_file=$1 replica_file=$2 successor_file=$3 end_file=$4 lead=$5 until=$6 script=$7 owner owned= lines end
  shift 7
  while [ ! -e "$ready_file" ]; do sleep 2; done
  if [ ! -s "$successor_file" ]; then
    glm_submit_successor "$successor_file" "$end_file" "$lead" "$until" "$script" "$@" || true
  fi
  while sleep 2; do
    if end=$(glm_service_end "$end_file") && [ "$(date +%s)" -ge "$end" ]; then
      date -d "@$end" '+%F %T' > "$successor_file.ended"
      kill -USR1 $$
      return 0
    fi
    lines=() owner=
    # one read of a file that is replaced whole (mv), never written in place
    { mapfile -t lines < "$replica_file"; } 2> /dev/null && owner=${lines[1]:-}
    # another job's id once this job's was there (not the predecessor's, still there while the gate writes this one's)
    if [ "$owner" = "$SLURM_JOB_ID" ]; then
      owned=1
    elif [ -n "$owned" ] && [ -n "$owner" ]; then
      printf '%s %s\n' "$owner" "${lines[2]:-}" > "$successor_file.took-over"
      kill -USR1 $$
      return 0
    fi
  done
}

# glm_await_takeover SUCCESSOR_FILE DRAIN_SECONDS: Slurm's USR1 for the time limit (server_drain_before; Slurm may
# send it up to a minute early) has come while this job's successor, submitted (SUCCESSOR_FILE: its id, then this
# job's end), has not taken over yet: SGLang goes on serving until the successor has taken the replica's place, or
# until DRAIN_SECONDS before this job's end, whichever comes first; then the drain. At once without a successor.
glm_await_takeover() {
  local file=$1 drain=$2 end=
  [ -s "$file" ] && end=$(sed -n 2p "$file") && [ -n "$end" ] || return 0
  if [ ! -e "$file.took-over" ] && [ ! -e "$file.ended" ] && [ "$(date +%s)" -lt $((end - drain)) ]; then
    echo "[glm.serve] the time limit's signal came before the successor took over: serving until it does, or until $drain s before the limit"
  fi
  while [ ! -e "$file.took-over" ] && [ ! -e "$file.ended" ] && [ "$(date +%s)" -lt $((end - drain)) ]; do sleep 1; done
}

# glm_service_end END_FILE: the epoch second the service ends, as the teardown wrote it (empty: now, 0 printed; else
# glm_stop_at, YYYY-MM-DDTHH:MM[:SS] by the login node's clock); fails when the file is not there (no end asked for).
glm_service_end() {
  local text=
  [ -e "$1" ] || return 1
  IFS= read -r text < "$1" || true
  if [ -z "$text" ]; then echo 0; else date -d "${text/T/ }" +%s 2> /dev/null || echo 0; fi
}

# glm_record_handover HANDOVERS_FILE TOOK_OVER_FILE GPUS: after the drain, one line for status (the layout's
# handovers file): "END_EPOCH NAME OLD_ID NEW_ID NEW_START GPUS"; END - NEW_START is the time both jobs held GPUS.
glm_record_handover() {
  local new_id new_start
  read -r new_id new_start < "$2" || true
  printf '%s %s %s %s %s %s\n' "$(date +%s)" "$SLURM_JOB_NAME" "$SLURM_JOB_ID" "${new_id:-?}" "${new_start:--}" "$3" >> "$1"
}

# glm_slurm_seconds LIMIT: the seconds of a Slurm time limit (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS); fails
# for UNLIMITED or anything else
glm_slurm_seconds() {
  local t=$1 d=0 h=0 m=0 s=0
  [[ $t =~ ^([0-9]+-)?[0-9]+(:[0-9]+){0,2}$ ]] || return 1
  if [[ $t == *-* ]]; then
    d=${t%%-*} t=${t#*-}
    IFS=: read -r h m s <<< "$t"
  else
    case ${t//[^:]/} in
      '') m=$t ;;
      :) IFS=: read -r m s <<< "$t" ;;
      *) IFS=: read -r h m s <<< "$t" ;;
    esac
  fi
  echo $(((((10#$d * 24 + 10#${h:-0}) * 60 + 10#${m:-0}) * 60) + 10#${s:-0}))
}

# glm_bad_nodes FILE TTL: the nodes of the deploy's bad-node list (plugins/module_utils/bad_nodes.py's JSON,
# {node: {cause, since, job_id}}) added less than TTL seconds ago, comma-separated; nothing when there is no list or
# no python3 on the node (said on stderr).
glm_bad_nodes() {
  [ -n "$1" ] && [ -s "$1" ] || return 0
  if ! command -v python3 > /dev/null; then
    echo "[glm.serve] no python3 on this node: the bad-node list $1 is not read for the successor" >&2
    return 0
  fi
  python3 -c '
import json, sys, time
try:
    with open(sys.argv[1]) as handle:
        data = json.load(handle)
except (OSError, ValueError):
    data = {}
fresh = [str(n) for n, e in (data.items() if isinstance(data, dict) else ())
         if isinstance(e, dict) and isinstance(e.get("since"), (int, float)) and time.time() - e["since"] < float(sys.argv[2])]
print(",".join(sorted(fresh)))' "$1" "$2" 2> /dev/null || true
}

# glm_submit_successor SUCCESSOR_FILE END_FILE LEAD UNTIL SCRIPT [SBATCH_ARG...]: step 1 of glm_continuity. With
# BAD_NODES_FILE (and BAD_NODE_TTL, seconds) set, the successor avoids the nodes of that list as the deploy's own
# submissions do: the list's nodes and the SBATCH_ARGs' own --exclude in one --exclude (bad_nodes.py
# sbatch_args_avoiding), read when the successor is submitted.
glm_submit_successor() {
  local successor_file=$1 end_file=$2 lead=$3 until=$4 script=$5 line comment limit start seconds started minutes begins end id tries
  local bad args=() own= value avoids=
  shift 5
  bad=$(glm_bad_nodes "${BAD_NODES_FILE:-}" "${BAD_NODE_TTL:-86400}")
  if [ -n "$bad" ]; then
    while [ $# -gt 0 ]; do
      case $1 in
        --exclude=*) value=${1#--exclude=} own+=${value:+,$value} ;;
        --exclude | -x)
          if [ $# -ge 2 ]; then own+=${2:+,$2}; shift; else args+=("$1"); fi ;;
        -x?*) value=${1#-x} own+=${value:+,$value} ;;
        *) args+=("$1") ;;
      esac
      shift
    done
    set -- ${args[@]+"${args[@]}"} "--exclude=$bad$own"
    avoids=" (avoiding the nodes of the bad-node list: $bad)"
  fi
  line=$(scontrol -o show job "$SLURM_JOB_ID" 2> /dev/null) || line=
  [[ $line =~ (^|[[:space:]])Comment=([^[:space:]]*) ]] && comment=${BASH_REMATCH[2]} || comment=
  [[ $line =~ (^|[[:space:]])TimeLimit=([^[:space:]]*) ]] && limit=${BASH_REMATCH[2]} || limit=
  [[ $line =~ (^|[[:space:]])StartTime=([^[:space:]]*) ]] && start=${BASH_REMATCH[2]} || start=
  if [ "$comment" = "(null)" ]; then comment=; fi
  if ! seconds=$(glm_slurm_seconds "$limit"); then
    echo "[glm.serve] no successor: this job's time limit is '${limit:-unknown}' (server_successors_until needs one)" >&2
    return 1
  fi
  started=$(date -d "$start" +%s 2> /dev/null) || started=$(date +%s)
  minutes=$(((seconds - lead) / 60))
  if [ "$minutes" -lt 1 ]; then
    echo "[glm.serve] no successor: the time limit ($limit) leaves less than a minute before server_handover_lead ($lead s)" >&2
    return 1
  fi
  begins=$((started + minutes * 60))
  if [ "$until" != forever ]; then
    end=$(date -d "${until/T/ }" +%s 2> /dev/null) || end=0
    if [ "$begins" -ge "$end" ]; then
      echo "[glm.serve] no successor: it would start at $(date -d "@$begins" '+%F %T'), past server_successors_until ($until); the replica ends with this job"
      return 0
    fi
  fi
  if end=$(glm_service_end "$end_file") && [ "$begins" -ge "$end" ]; then
    echo "[glm.serve] no successor: the service ends at $(date -d "@$end" '+%F %T') (teardown); the replica ends with this job"
    return 0
  fi
  for tries in 0 30 60 120; do
    sleep "$tries"
    if id=$(GLM_SUCCESSOR_OF=$SLURM_JOB_ID sbatch --parsable --job-name="$SLURM_JOB_NAME" ${comment:+"--comment=$comment"} \
      --dependency="after:$SLURM_JOB_ID+$minutes" "$@" "$script" 2>&1); then
      id=${id%%;*}
      # the teardown wrote the service's end while the sbatch ran: the successor is taken back at once
      if end=$(glm_service_end "$end_file") && [ "$begins" -ge "$end" ]; then
        scancel "$id" 2> /dev/null || true
        echo "[glm.serve] the service ended while successor job $id was being submitted: cancelled it"
        return 0
      fi
      printf '%s\n%s\n' "$id" "$((started + seconds))" > "$successor_file"
      echo "[glm.serve] successor job $id submitted (server_successors_until=$until): Slurm starts it at about $(date -d "@$begins" '+%F %T'), $minutes min after this job started and $((seconds - minutes * 60)) s before its time limit ($limit; server_handover_lead=$lead, rounded to Slurm's minutes)$avoids"
      return 0
    fi
    echo "[glm.serve] the successor's sbatch failed: $id" >&2
  done
  echo "[glm.serve] no successor after 4 tries: the replica ends with this job (run the deploy again)" >&2
  return 1
}
