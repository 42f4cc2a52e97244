# glm_await_ready SERVER_PID BASE CURL_CONFIG MODEL READY_FILE [REPLICA_FILE]
# Included in serve.sbatch by the glm.serve.server role; runs in the background beside the server, on its node.
# The health gate: every 2 s while SERVER_PID lives, it asks the server on BASE (http://NODE:PORT, the node itself,
# never through a proxy the job inherited) for /health (200 once SGLang has warmed up: http_server.py's warm-up
# thread), /v1/models with the key, and one short chat with the key (the deploy's smoke question, 16 tokens), whose
# answer must carry "choices". CURL_CONFIG is a curl config file (0600) holding the key's header: the key is on no
# command line. Once all three answer it writes READY_FILE (the job's record that SGLang served, which lets the job
# restart it after a crash) and, behind the router, REPLICA_FILE (URL, the job id, then GLM_JOB_STARTED, the epoch
# second the job started, when the script set it (successors: the handover's record); written atomically): the
# router's launcher adds a replica only once that file exists, so a replica that loads but answers wrongly never
# takes traffic. Without curl on the node it says so and writes both at once (no gate).
glm_await_ready() {
  local server_pid=$1 base=$2 curl_config=$3 model=$4 ready_file=$5 replica_file=${6:-} body answer
  body=$(printf '{"model": "%s", "messages": [{"role": "user", "content": "How many times does the letter r appear in strawberry?"}], "max_tokens": 16}' "$model")
  if command -v curl > /dev/null 2>&1; then
    while kill -0 "$server_pid" 2> /dev/null; do
      sleep 2
      curl -sf --noproxy '*' --max-time 10 -o /dev/null "$base/health" || continue
      curl -sf --noproxy '*' --max-time 10 -K "$curl_config" -o /dev/null "$base/v1/models" || continue
      answer=$(curl -sf --noproxy '*' --max-time 60 -K "$curl_config" -H 'Content-Type: application/json' \
        --data-binary "$body" "$base/v1/chat/completions") || continue
      [[ $answer == *'"choices"'* ]] || continue
      break
    done
    kill -0 "$server_pid" 2> /dev/null || return 0
    echo "[glm.serve] health gate passed: /health, /v1/models and a chat answer with the key on $base"
    date +%s > "$ready_file"
  else
    # no READY_FILE either: without the gate nothing tells a crash from a start failure, so nothing is restarted
    echo "[glm.serve] no curl on ${SLURMD_NODENAME:-this node}: no health gate (the replica joins the router as it starts) and no restart after a crash" >&2
  fi
  if [ -n "$replica_file" ]; then
    printf '%s\n' "$base" "$SLURM_JOB_ID" ${GLM_JOB_STARTED:+"$GLM_JOB_STARTED"} > "$replica_file.$SLURM_JOB_ID" && mv -f "$replica_file.$SLURM_JOB_ID" "$replica_file"
    # SGLang died while the file was being written: take it back
    kill -0 "$server_pid" 2> /dev/null || glm_leave_router "$replica_file"
  fi
}

# glm_sglang_load: SGLang's /metrics text on stdin; prints "TOTAL RUNNING QUEUED SEEN": the requests it has served,
# those running and those queued now, and 1 when the text is SGLang's (num_requests_total is there), else 0. With
# --enable-priority-scheduling each priority has a series beside the total (priority=""): those are skipped. awk, not a
# Prometheus parser: this runs on the node, outside the container, where the node's own tools are all there is. Read
# by the drain (glm_drain) and the activity watch (activity_watch.bash).
glm_sglang_load() {
  awk '
    $1 ~ /[{,]priority="[^"]/ { next }
    $1 ~ /^sglang:num_requests_total(\{|$)/ { t += $NF; seen = 1 }
    $1 ~ /^sglang:num_running_reqs(\{|$)/ { r += $NF }
    $1 ~ /^sglang:num_queue_reqs(\{|$)/ { q += $NF }
    END { printf "%d %d %d %d", t, r, q, seen }'
}

# glm_drain SERVER_PID REPLICA_FILE METRICS_URL SECONDS [WHY]: Slurm's USR1, SECONDS before the job's time limit
# (sbatch --signal=B:USR1@SECONDS, server_drain_before), the job's own once its successor took its place
# (successor.bash), or the deploy's once a rolling change's new job took it (WHY says which: glm_drain_why). The
# replica leaves the router (unless its file is another job's by now), waits 10 s (the router drops
# it within its sync interval), then until SGLang's /metrics shows no running or queued request (at most until 15 s
# before the limit; at once without metrics), then asks SGLang to stop through GLM_STOP_FILE (the step's loop sends
# it a SIGTERM) and waits for it: the job ends COMPLETED before Slurm's SIGTERM, with no request cut.
glm_drain() {
  local server_pid=$1 replica_file=$2 url=$3 seconds=$4 started=$SECONDS text running queued
  local why=${5:-"the time limit is $seconds s away (server_drain_before)"}
  glm_leave_router "$replica_file"
  echo "[glm.serve] $why: left the router; finishing the requests in flight, then stopping SGLang"
  sleep 10 &
  wait $! || true
  while kill -0 "$server_pid" 2> /dev/null && [ $((SECONDS - started)) -lt $((seconds - 15)) ]; do
    text=$(curl -sf --noproxy '*' --max-time 5 "$url") || break
    read -r _ running queued _ <<< "$(printf '%s\n' "$text" | glm_sglang_load)" || break
    [ $((running + queued)) -gt 0 ] || break
    sleep 1
  done
  : > "$GLM_STOP_FILE"
  wait "$server_pid" || true
  echo "[glm.serve] SGLang stopped $((SECONDS - started)) s after the drain began, before the time limit"
}

# glm_drain_why REPLICA_FILE SECONDS [SUCCESSOR_FILE]: why this job drains, for its log (glm_drain's WHY): its
# successor took the replica's place (SUCCESSOR_FILE.took-over, successor.bash; another job than the one it submitted:
# a rolling change's), the service's end came (.ended), another job of the replica's name took its place (the replica
# file's second line: a rolling change's new job, whose deploy sent this job USR1), or Slurm's USR1 SECONDS before the
# time limit (server_drain_before).
glm_drain_why() {
  local owner= successor=
  if [ -n "${3:-}" ] && [ -s "$3.took-over" ]; then
    read -r owner _ < "$3.took-over" || true
    successor=$(sed -n 1p "$3" 2> /dev/null) || successor=
    echo "job $owner took the replica's place ($([ "$owner" = "$successor" ] && echo server_successors_until || echo 'a change rolled out by the deploy'))"
  elif [ -n "${3:-}" ] && [ -s "$3.ended" ]; then
    echo "the service ends at $(cat "$3.ended") (teardown's glm_stop_at)"
  elif owner=$(sed -n 2p "$1" 2> /dev/null) && [ -n "$owner" ] && [ "$owner" != "${SLURM_JOB_ID:-}" ]; then
    echo "job $owner took the replica's place (a change rolled out by the deploy)"
  else
    echo "the time limit is $2 s away (server_drain_before)"
  fi
}

# glm_end_children PID...: end the job's helpers (the health gate, the activity watcher) and wait until they are gone.
# Not bash's `wait`: when a trapped signal (Slurm's USR1) comes while bash reaps one of them, the trap runs but bash's
# job table keeps that child as running, and `wait PID` never returns (bash 5.2.15: 3 of 150 tries here with the USR1
# sent as the gate ended; the replica stayed in the router until the job's end). `kill -0` asks the kernel instead.
glm_end_children() {
  local pid
  kill "$@" 2> /dev/null || true
  for pid in "$@"; do
    while kill -0 "$pid" 2> /dev/null; do sleep 0.1; done
  done
}

# glm_preempted FALLBACK: whether Slurm is preempting this job, asked once its USR1 came (a preemption sends the job's
# own --signal instead of SIGTERM with the site's PreemptParameters=send_user_signal; Slurm 24.11
# src/interfaces/preempt.c 452-455): `scontrol show job` has PreemptTime set then (src/api/job_info.c,
# "PreemptTime=", None while not preempted; a requeue clears it) and EndTime pulled in to the preemption + GraceTime.
# Prints the seconds left to EndTime (FALLBACK when it cannot be read: EndTime=Unknown for a job without a time
# limit) and succeeds; fails for the time limit's USR1 or a deploy's (one scontrol, at a signal only). The standard
# time format whatever the user's SLURM_TIME_FORMAT. Bounded to 5 s: a controller that does not answer (restarting:
# scontrol retries its connect for ~18 s, measured on the test bed) must not hold the replica in the router; it is
# then taken for the time limit's USR1 (the drain's own seconds).
glm_preempted() {
  local shown preempt end now
  shown=$(SLURM_TIME_FORMAT=standard timeout 5 scontrol show job "${SLURM_JOB_ID:-}" 2> /dev/null) || return 1
  preempt=$(grep -o 'PreemptTime=[^ ]*' <<< "$shown" | head -n 1 | cut -d= -f2)
  case "$preempt" in ''|None|Unknown) return 1 ;; esac
  end=$(grep -o ' EndTime=[^ ]*' <<< "$shown" | head -n 1 | cut -d= -f2)
  now=$(date +%s)
  if end=$(date -d "$end" +%s 2> /dev/null) && [ "$end" -gt "$now" ]; then echo $((end - now)); else echo "${1:-60}"; fi
}

# glm_leave_router REPLICA_FILE: take this job's replica out of the router (the file, when it is still this job's: its
# second line is the job id; a replacement may have announced itself under the same name already).
glm_leave_router() {
  if [ "$(sed -n 2p "$1" 2> /dev/null)" = "${SLURM_JOB_ID:-}" ]; then rm -f "$1"; fi
}
