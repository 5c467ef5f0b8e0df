#!/usr/bin/env bash
# Starts a private single-node Slurm on this machine, submits scripts/slurm/emulate.sbatch on
# inputs/experiments/quickstart.yaml with 2 tasks, checks that the job COMPLETED and that its
# results.h5 equals the one of `mpirun -np 2` bit for bit (every dataset but /engine, and the
# /summary attributes), runs a `scalescope sweep` as a 2-task job and compares its sweep.csv with
# one process's, then stops the daemons it started and removes its files.
#
# Usage: test-local.sh [SCALESCOPE [REPO]]   (defaults: REPO/build/scalescope, this script's repo)
# Needs root and Debian's slurmctld slurmd slurm-client munge (scripts/setup.sh installs them);
# installs nothing. Exit 0: passed; 77: skipped (not root, or Slurm/munge not installed);
# anything else: failed (the daemon logs are printed). Leaves no daemon behind; daemons left by an
# earlier run that was killed are stopped at the start. Everything (config, state, spool, logs,
# munge socket and key when a private munged is needed) lives in one temporary directory; the
# ports are picked free, so it does not disturb a Slurm or munge already running here.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "${2:-$here/../..}" && pwd)
bin=$(realpath -- "${1:-$repo/build/scalescope}" 2>/dev/null || echo "${1:-$repo/build/scalescope}")
tag=scalescope-slurm-test
t0=$(date +%s)

log() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
skip() { echo "SKIP: $*"; exit 77; }

[ "$(id -u)" -eq 0 ] || skip "needs root (starts slurmctld/slurmd as root)"
for cmd in slurmctld slurmd sbatch scontrol sinfo srun munged munge unmunge setpriv; do
  command -v "$cmd" >/dev/null || skip "'$cmd' not found; scripts/setup.sh installs Slurm and munge"
done
id munge >/dev/null 2>&1 || skip "no 'munge' user (munge package not installed?)"
for f in "$bin" /usr/bin/python3; do
  [ -x "$f" ] || { echo "FAIL: $f not found or not executable"; exit 1; }
done
command -v mpirun >/dev/null || { echo "FAIL: mpirun not found"; exit 1; }

# An outer Slurm job's environment must not leak into ours (nor steer mpirun to Slurm).
while read -r v; do unset "$v"; done < <(env | sed -n 's/^\(SLURM_[A-Za-z0-9_]*\)=.*/\1/p')

# stop_pidfile FILE DIR: stops the process named in FILE if its command line mentions DIR (so only
# a daemon this script started with its private paths), waits for it, then removes FILE.
stop_pidfile() {
  local file=$1 dir=$2 pid state i
  [ -f "$file" ] || return 0
  pid=$(cat "$file" 2>/dev/null)
  if [[ "$pid" =~ ^[0-9]+$ ]] && [ -r "/proc/$pid/cmdline" ] &&
     tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$dir"; then
    kill -TERM "$pid" 2>/dev/null
    for ((i = 0; i < 100; i++)); do   # 10 s, then KILL; a zombie counts as gone
      state=$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null) || break
      [ -z "$state" ] || [ "$state" = Z ] && break
      sleep 0.1
    done
    [ -n "$state" ] && [ "$state" != Z ] && kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null   # reaps it when it is this shell's child
  fi
  rm -f "$file"
}

# Leftovers of an earlier run that was killed before its trap ran (its owner pid is gone).
for old in /tmp/$tag.*; do
  [ -d "$old" ] || continue
  owner=$(cat "$old/owner" 2>/dev/null)
  [[ "$owner" =~ ^[0-9]+$ ]] && kill -0 "$owner" 2>/dev/null && continue
  for p in "$old"/run/*.pid; do stop_pidfile "$p" "$old"; done
  rm -rf "$old"
done

tmp=$(mktemp -d "/tmp/$tag.XXXXXX") || { echo "FAIL: mktemp"; exit 1; }
echo $$ >"$tmp/owner"
chmod 755 "$tmp"   # munged, as the munge user, must reach its directory below
mkdir -p "$tmp"/{run,log,state,spool,tmpfs,work,mpi}
started_munged=0
passed=0

dump_logs() {
  local f
  for f in "$tmp"/log/* "$tmp"/munge/munged.log "$tmp"/work/*.out "$tmp"/sbatch.*; do
    [ -s "$f" ] || continue
    # A daemon's stdout repeats its log file: show it only when the log file is empty.
    [[ "$f" == *.stdout ]] && [ -s "${f%.stdout}.log" ] && continue
    echo "----- $f (last 40 lines)"
    tail -n 40 "$f"
  done
  echo "----- end of logs"
}
cleanup() {
  local rc=$?
  [ "$passed" -eq 1 ] || [ "$rc" -eq 77 ] || dump_logs
  # A job still running (a timeout) would outlive slurmd in its slurmstepd: cancel it first.
  local jobs
  jobs=$([ -n "${SLURM_CONF:-}" ] && timeout 10 squeue -h -o %i 2>/dev/null)
  if [ -n "$jobs" ]; then
    timeout 20 scancel --full --quiet $jobs 2>/dev/null
    local i
    for ((i = 0; i < 40; i++)); do
      [ -z "$(timeout 5 squeue -h -t running,completing -o %i 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
  stop_pidfile "$tmp/run/client-sbatch.pid" "$tmp"
  stop_pidfile "$tmp/run/slurmd.pid" "$tmp"
  stop_pidfile "$tmp/run/slurmctld.pid" "$tmp"
  [ "$started_munged" -eq 1 ] && stop_pidfile "$tmp/run/munged.pid" "$tmp"
  rm -rf "$tmp"
  log "cleaned up (daemons stopped, $tmp removed)"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
fail() { echo "FAIL: $*"; exit 1; }

# daemons_alive: fails naming the first daemon started here that has exited.
daemons_alive() {
  local f pid state
  for f in "$tmp"/run/*.pid; do
    [ -f "$f" ] || continue
    [[ "$f" == */client-*.pid ]] && continue
    pid=$(cat "$f")
    state=$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null)
    if [ -z "$state" ] || [ "$state" = Z ]; then
      fail "$(basename "$f" .pid) exited (see its log below)"
    fi
  done
}
# wait_for SECONDS WHAT COMMAND...: retries COMMAND every 0.5 s until it succeeds.
wait_for() {
  local secs=$1 what=$2; shift 2
  local end=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    daemons_alive
    [ "$(date +%s)" -lt "$end" ] || fail "timed out after ${secs}s waiting for $what"
    sleep 0.5
  done
}

# --- munge: the system's daemon if it works, else a private one (own socket, key and logs).
munge_ok() { munge -n ${1:+--socket="$1"} | unmunge ${1:+--socket="$1"}; }
socket=""   # empty: the default socket, the system's munged
if munge_ok >/dev/null 2>&1; then
  log "munge: using the running system munged (munge -n | unmunge works)"
else
  mdir=$tmp/munge
  mkdir -p "$mdir"
  socket=$mdir/munge.socket
  key=/etc/munge/munge.key
  if ! setpriv --reuid=munge --regid=munge --clear-groups test -r "$key" 2>/dev/null; then
    key=$mdir/munge.key   # none usable: a private one; the system key (if any) is left alone
    dd if=/dev/urandom of="$key" bs=1024 count=1 status=none || fail "cannot create $key"
  fi
  chown -R munge:munge "$mdir"
  chmod 755 "$mdir"   # munged wants its socket's directory searchable by all
  [ "$key" = "$mdir/munge.key" ] && chmod 400 "$key"
  log "munge: starting a private munged (key $key)"
  setpriv --reuid=munge --regid=munge --clear-groups \
    munged --foreground --socket="$socket" --key-file="$key" --pid-file="$mdir/munged.pid" \
      --log-file="$mdir/munged.log" --seed-file="$mdir/munged.seed" \
      >>"$tmp/log/munged.stdout" 2>&1 </dev/null &
  echo $! >"$tmp/run/munged.pid"
  started_munged=1
  wait_for 20 "munged (munge -n | unmunge on $socket)" munge_ok "$socket"
fi

# --- Slurm configuration: one node (this machine, as `slurmd -C` describes it), one partition.
host=$(hostname -s 2>/dev/null || hostname)
nodeline=$(slurmd -C 2>/dev/null | grep '^NodeName=') || fail "slurmd -C printed no NodeName line"
node=$(sed 's/^NodeName=\([^ ]*\).*/\1/' <<<"$nodeline")
free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
ctld_port=$(free_port) && slurmd_port=$(free_port) || fail "no free TCP port"
while [ "$slurmd_port" = "$ctld_port" ]; do slurmd_port=$(free_port); done
# A random first job id: Open MPI names its shared-memory segments and Slurm's PMIx its
# directories after the job id, so concurrent test runs must not both run job 1.
first_job=$(( 1000 + $(od -An -N4 -tu4 /dev/urandom | tr -d ' ') % 50000000 ))
conf=$tmp/slurm.conf
: >"$tmp/plugstack.conf"
cat >"$conf" <<EOF
ClusterName=scalescopetest
FirstJobId=$first_job
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
${socket:+AuthInfo=socket=$socket}
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
TmpFS=$tmp/tmpfs
SlurmctldPidFile=$tmp/state/slurmctld.pid
SlurmdPidFile=$tmp/spool/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$tmp/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
SwitchType=switch/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MailProg=/bin/true
ReturnToService=2
MinJobAge=600
KillWait=5
InactiveLimit=0
$nodeline NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
export SLURM_CONF=$conf

# --- daemons: in the foreground, as children of this script, so their pids are known exactly.
log "slurm: starting slurmctld and slurmd (node $node, ports $ctld_port/$slurmd_port, $tmp)"
slurmctld -D -f "$conf" >>"$tmp/log/slurmctld.stdout" 2>&1 </dev/null &
echo $! >"$tmp/run/slurmctld.pid"
wait_for 60 "slurmctld (scontrol ping)" bash -c 'scontrol ping | grep -q UP'
slurmd -D -f "$conf" >>"$tmp/log/slurmd.stdout" 2>&1 </dev/null &
echo $! >"$tmp/run/slurmd.pid"
node_state() { sinfo -h -n "$node" -o %t 2>/dev/null | head -n1; }
end=$(( $(date +%s) + 90 ))
while :; do
  state=$(node_state)
  [ "$state" = idle ] && break
  daemons_alive
  if [ "$(date +%s)" -ge "$end" ]; then
    scontrol show node "$node"
    fail "node $node not idle after 90s (state '${state:-?}')"
  fi
  sleep 0.5
done
log "slurm: node $node idle"

# --- the job: emulate.sbatch on the quickstart experiment, 2 tasks.
cfg=$repo/inputs/experiments/quickstart.yaml
log "slurm: sbatch --wait emulate.sbatch $cfg (2 tasks)"
overcommit=(); [ "$(nproc)" -lt 2 ] && overcommit=(--overcommit)   # 2 tasks on 1 CPU
SCALESCOPE_BIN=$bin timeout -k 10 300 sbatch --wait --parsable --job-name=scalescope-test --ntasks=2 \
  "${overcommit[@]}" --time=10 --chdir="$tmp/work" --output="$tmp/work/scalescope-%j.out" \
  "$repo/scripts/slurm/emulate.sbatch" "$cfg" --quiet >"$tmp/sbatch.out" 2>"$tmp/sbatch.err" &
echo $! >"$tmp/run/client-sbatch.pid"   # so that a later run can stop it if this one is killed
wait $!
rc=$?
rm -f "$tmp/run/client-sbatch.pid"
job=$(head -n1 "$tmp/sbatch.out" | cut -d';' -f1)
[[ "$job" =~ ^[0-9]+$ ]] || fail "sbatch gave no job id (exit $rc): $(cat "$tmp/sbatch.err")"
[ "$rc" -ne 124 ] || { scontrol show job "$job"; fail "job $job did not finish within 300s"; }
jobstate=$(scontrol show job -o "$job" 2>/dev/null | tr ' ' '\n' | sed -n 's/^JobState=//p')
log "slurm: job $job: sbatch exit $rc, JobState=${jobstate:-unknown}"
[ "$rc" -eq 0 ] || fail "sbatch --wait exited $rc for job $job ($(cat "$tmp/sbatch.err"))"
[ "$jobstate" = COMPLETED ] || fail "job $job is ${jobstate:-unknown to scontrol}, not COMPLETED"
slurm_out=$tmp/work/out/scalescope-test-$job
[ -f "$slurm_out/results.h5" ] || fail "job $job wrote no $slurm_out/results.h5"
grep -q "2 task(s)" "$tmp/work/scalescope-$job.out" || fail "job log does not report 2 tasks"

# --- a sweep as a Slurm job on 2 tasks: the same table as one process gives.
log "slurm: sbatch --wait emulate.sbatch sweep $cfg (2 tasks)"
sweep_args=(--set parallel.dp= --vary parallel.tp=2,4 --vary training.micro_batch_size=1,2 --quiet)
SCALESCOPE_BIN=$bin timeout -k 10 300 sbatch --wait --parsable --job-name=scalescope-sweep --ntasks=2 \
  "${overcommit[@]}" --time=10 --chdir="$tmp/work" --output="$tmp/work/scalescope-%j.out" \
  "$repo/scripts/slurm/emulate.sbatch" sweep "$cfg" "${sweep_args[@]}" >"$tmp/sbatch.out" \
  2>"$tmp/sbatch.err" &
echo $! >"$tmp/run/client-sbatch.pid"
wait $!
rc=$?
rm -f "$tmp/run/client-sbatch.pid"
sjob=$(head -n1 "$tmp/sbatch.out" | cut -d';' -f1)
[[ "$sjob" =~ ^[0-9]+$ ]] || fail "sbatch (sweep) gave no job id (exit $rc): $(cat "$tmp/sbatch.err")"
[ "$rc" -eq 0 ] || fail "sbatch --wait exited $rc for the sweep job $sjob ($(cat "$tmp/sbatch.err"))"
"$bin" sweep "$cfg" "${sweep_args[@]}" -o "$tmp/sweep1" || fail "the one-process sweep failed"
cmp "$tmp/work/out/scalescope-sweep-$sjob/sweep.csv" "$tmp/sweep1/sweep.csv" ||
  fail "the Slurm sweep's table differs from one process's"
log "slurm: sweep job $sjob: sweep.csv identical to one process's"

# --- the same run under mpirun.
log "mpirun: -np 2 on the same experiment"
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
  timeout -k 10 300 mpirun -np 2 "$bin" run "$cfg" -o "$tmp/mpi/out" --quiet \
  --set run.engine=optimistic >"$tmp/log/mpirun.log" 2>&1 ||
  { cat "$tmp/log/mpirun.log"; fail "mpirun -np 2 failed"; }

# --- bit-for-bit comparison of the two results.h5 (and summary.json without "engine").
/usr/bin/python3 - "$slurm_out" "$tmp/mpi/out" <<'PY' || fail "the Slurm and mpirun results differ"
import json, sys
import h5py, numpy as np

def content(path):
    out = {}
    with h5py.File(f"{path}/results.h5", "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and name.split("/")[0] != "engine":
                out["dataset " + name] = obj[()]
        f.visititems(visit)
        for k, v in f["summary"].attrs.items():
            out["/summary@" + k] = v
    s = json.load(open(f"{path}/summary.json"))
    engine = s.pop("engine")
    out["summary.json"] = json.dumps(s, sort_keys=True)
    return out, engine

def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "O":
        return a.tolist() == b.tolist()
    return a.tobytes() == b.tobytes()

(a, ea), (b, eb) = content(sys.argv[1]), content(sys.argv[2])
bad = sorted(set(a) ^ set(b)) + [k for k in sorted(set(a) & set(b)) if not same(a[k], b[k])]
for k in bad:
    print(f"differs: {k}")
print(f"compared {len(a)} datasets/attributes: {'identical' if not bad else f'{len(bad)} differ'}"
      f" (slurm: {ea['kind']} x{ea['processes']}, mpirun: {eb['kind']} x{eb['processes']})")
sys.exit(1 if bad or ea["processes"] != 2 or eb["processes"] != 2 else 0)
PY
passed=1
log "PASS: Slurm job $job COMPLETED; its results.h5 equals mpirun -np 2's bit for bit"
