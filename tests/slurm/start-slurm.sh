#!/usr/bin/env bash
# Bring up a real single-node SLURM for the tests (Debian's slurmctld + slurmd): no systemd, no cgroups,
# auth/none, 8 advertised CPUs and 4 fake GPUs (gres files are links to /dev/null). Needs root.
# Idempotent: a running cluster is left alone. Stop it with stop-slurm.sh.
set -euo pipefail
STATE=${LBSCALE_SLURM_STATE:-/var/lib/lbscale-slurm}

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null; then
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurmctld slurmd slurm-client >/dev/null
fi

mkdir -p "$STATE/ctld" "$STATE/spool" "$STATE/log" /etc/slurm
for i in 0 1 2 3; do ln -sf /dev/null "$STATE/fakegpu$i"; done
CTL=$(hostname -s)
NEW=$(mktemp)

# cred_expire: SLURM holds a requeued job until the old job credential has expired (default 120 s);
# 10 s keeps the requeue test short without starting a job whose credential is still revoked.
cat > "$NEW" <<CONF
# lbscale-test: single-node SLURM for the lbscale test suite (tests/slurm/start-slurm.sh)
ClusterName=lbscale-test
SlurmctldHost=$CTL(127.0.0.1)
AuthType=auth/none
AuthInfo=cred_expire=10
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
EnforcePartLimits=ALL
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/log/jobcomp.txt
AccountingStorageType=accounting_storage/none
KillWait=5
MinJobAge=600
InactiveLimit=0
SchedulerParameters=sched_interval=2
NodeName=localhost NodeAddr=127.0.0.1 CPUs=8 RealMemory=16000 Gres=gpu:4 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF

if cmp -s "$NEW" /etc/slurm/slurm.conf && sinfo -h -o %T 2>/dev/null | grep -qE "idle|mixed|alloc"; then
  rm -f "$NEW"
  echo "slurm: already running"; exit 0
fi
mv "$NEW" /etc/slurm/slurm.conf
cat > /etc/slurm/gres.conf <<CONF
NodeName=localhost Name=gpu File=$STATE/fakegpu[0-3]
CONF

pkill -x slurmctld 2>/dev/null || true
pkill -x slurmd 2>/dev/null || true
sleep 1
setsid slurmctld -c -i </dev/null >"$STATE/log/slurmctld.out" 2>&1 &
setsid slurmd -N localhost </dev/null >"$STATE/log/slurmd.out" 2>&1 &

for _ in $(seq 60); do
  state=$(sinfo -h -n localhost -o %T 2>/dev/null || true)
  case "$state" in
    idle*|mixed*|alloc*) echo "slurm: up ($state)"; exit 0 ;;
    down*|drain*) scontrol update nodename=localhost state=resume >/dev/null 2>&1 || true ;;
  esac
  sleep 1
done
echo "slurm: did not come up; logs in $STATE/log" >&2
tail -5 "$STATE/log/slurmctld.log" "$STATE/log/slurmd.log" >&2 || true
exit 1
