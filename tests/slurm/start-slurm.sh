#!/usr/bin/env bash
# Bring up a real SLURM for the tests (Debian's slurmctld + slurmd): no systemd, no cgroups, auth/none.
#  - partition `debug` (the default): node `localhost`, 8 advertised CPUs and 4 fake GPUs (gres files are
#    links to /dev/null), its slurmd in this machine's own network.
#  - partition `twonode`: nodes lbsn1 and lbsn2, a slurmd each in its own network namespace (lbs-n1, lbs-n2)
#    with its own hostname and address (10.77.0.11, .12 on interface ib0, a veth pair into the bridge lbsbr0,
#    10.77.0.1 on this side). Like JSC's nodes, each has two names: `lbsnN` resolves (the namespace's
#    /etc/hosts) to a second, unrouted address (10.77.1.1N on its loopback: the "management" interface), and
#    only `lbsnNi` to the address the other node can reach. Where namespaces cannot be made (no root, no `ip`,
#    a container without them) only `debug` comes up and the two-node tests say why they skip.
# Needs root. Idempotent: a running cluster is left alone. Stop it with stop-slurm.sh.
set -euo pipefail
STATE=${LBSCALE_SLURM_STATE:-/var/lib/lbscale-slurm}
BRIDGE=lbsbr0
NET=10.77

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null; then
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurmctld slurmd slurm-client >/dev/null
fi

mkdir -p "$STATE/ctld" "$STATE/spool/localhost" "$STATE/spool/lbsn1" "$STATE/spool/lbsn2" "$STATE/log" /etc/slurm
for i in 0 1 2 3; do ln -sf /dev/null "$STATE/fakegpu$i"; done
CTL=$(hostname -s)
NEW=$(mktemp)

# the two namespaced nodes: bridge, veth pairs, addresses, /etc/netns/<ns>/hosts (ip netns exec mounts it)
two_nodes() {
  command -v ip >/dev/null || { echo "no ip command (iproute2)" >&2; return 1; }
  ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge || return 1
  ip addr show dev "$BRIDGE" | grep -q "$NET.0.1/24" || ip addr add "$NET.0.1/24" dev "$BRIDGE" || return 1
  ip link set "$BRIDGE" up || return 1
  for n in 1 2; do
    ns=lbs-n$n
    if ! ip netns list | grep -qw "$ns"; then
      ip netns add "$ns" || return 1
    fi
    if ! ip -n "$ns" link show ib0 >/dev/null 2>&1; then
      ip link del "lbs-v$n" >/dev/null 2>&1 || true
      ip link add "lbs-v$n" type veth peer name ib0 netns "$ns" || return 1
      ip -n "$ns" addr add "$NET.0.1$n/24" dev ib0 || return 1
      ip -n "$ns" addr add "$NET.1.1$n/32" dev lo || return 1
      ip -n "$ns" link set lo up && ip -n "$ns" link set ib0 up || return 1
    fi
    ip link set "lbs-v$n" master "$BRIDGE" && ip link set "lbs-v$n" up || return 1  # also after a new bridge
    mkdir -p "/etc/netns/$ns"
    hosts=$(mktemp)
    {
      echo "127.0.0.1 localhost"
      echo "$NET.0.1 $CTL"
      for m in 1 2; do echo "$NET.1.1$m lbsn$m"; echo "$NET.0.1$m lbsn${m}i"; done
    } > "$hosts"
    # unchanged: left alone (a running node has it bind-mounted as its /etc/hosts)
    cmp -s "$hosts" "/etc/netns/$ns/hosts" || cat "$hosts" > "/etc/netns/$ns/hosts"
    rm -f "$hosts"
  done
  # the probes: what a node needs (own hostname and /etc/hosts, a TCP connection to the other node and to
  # this side of the bridge, where slurmctld listens)
  unshare --mount --uts sh -c "mount --bind /etc/netns/lbs-n1/hosts /etc/hosts && hostname lbsn1" || return 1
  ip netns exec lbs-n2 python3 -c "
import socket, subprocess, sys
srv = socket.socket(); srv.bind(('$NET.0.12', 0)); srv.listen(); port = srv.getsockname()[1]
probe = 'import socket; socket.create_connection((\"$NET.0.12\", %d), timeout=3).close()' % port
sys.exit(subprocess.run(['nsenter', '--net=/run/netns/lbs-n1', sys.executable, '-c', probe]).returncode)
" || { echo "no TCP connection from lbs-n1 to lbs-n2 over $BRIDGE" >&2; return 1; }
  python3 -c "
import socket, subprocess, sys
srv = socket.socket(); srv.bind(('$NET.0.1', 0)); srv.listen(); port = srv.getsockname()[1]
probe = 'import socket; socket.create_connection((\"$NET.0.1\", %d), timeout=3).close()' % port
sys.exit(subprocess.run(['nsenter', '--net=/run/netns/lbs-n1', sys.executable, '-c', probe]).returncode)
" || { echo "no TCP connection from lbs-n1 to $NET.0.1 (slurmctld's side of $BRIDGE)" >&2; return 1; }
}
if [ "$(id -u)" = 0 ] && two_nodes 2>"$STATE/log/netns.err"; then
  TWO=1; CTL_ADDR=$NET.0.1
else
  TWO=0; CTL_ADDR=127.0.0.1
  echo "slurm: no second node (network namespaces unavailable: $(tail -1 "$STATE/log/netns.err" 2>/dev/null))" >&2
fi

# cred_expire: SLURM holds a requeued job until the old job credential has expired (default 120 s);
# 10 s keeps the requeue test short without starting a job whose credential is still revoked.
cat > "$NEW" <<CONF
# lbscale-test: the SLURM of the lbscale test suite (tests/slurm/start-slurm.sh)
ClusterName=lbscale-test
SlurmctldHost=$CTL($CTL_ADDR)
AuthType=auth/none
AuthInfo=cred_expire=10
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
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
CONF
# the namespaced nodes come first: SLURM 22.05 answers any node name with the only node while that one is
# called localhost, and would then take lbsn1 for a duplicate of it
if [ "$TWO" = 1 ]; then
  cat >> "$NEW" <<CONF
NodeName=lbsn[1-2] NodeAddr=$NET.0.[11-12] CPUs=2 RealMemory=4000 State=UNKNOWN
PartitionName=twonode Nodes=lbsn[1-2] MaxTime=INFINITE State=UP
CONF
fi
cat >> "$NEW" <<CONF
NodeName=localhost NodeAddr=127.0.0.1 CPUs=8 RealMemory=16000 Gres=gpu:4 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
NODES=localhost; [ "$TWO" = 1 ] && NODES=localhost,lbsn1,lbsn2
up() {  # every node idle, mixed or allocated
  sinfo -h -N -n "$NODES" -o "%N %T" 2>/dev/null | awk '$2 ~ /^(idle|mixed|alloc)/ {n++} END {exit n < '"$(( TWO ? 3 : 1 ))"'}'
}

if cmp -s "$NEW" /etc/slurm/slurm.conf && up; then
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
if [ "$TWO" = 1 ]; then
  # own network (nsenter), own hostname (unshare --uts), own /etc/hosts (a bind mount in its own mount
  # namespace); not `ip netns exec`, which remounts /sys and so hides /sys/fs/cgroup from slurmd
  for n in 1 2; do
    setsid unshare --mount --uts sh -c "mount --bind /etc/netns/lbs-n$n/hosts /etc/hosts && hostname lbsn$n \
      && exec nsenter --net=/run/netns/lbs-n$n slurmd -N lbsn$n" </dev/null >"$STATE/log/slurmd-lbsn$n.out" 2>&1 &
  done
fi

for _ in $(seq 60); do
  if up; then
    echo "slurm: up ($(sinfo -h -N -n "$NODES" -o "%N %T" | tr '\n' ' '| sed 's/ $//'))"; exit 0
  fi
  for node in $(sinfo -h -N -n "$NODES" -o "%N %T" 2>/dev/null | awk '$2 ~ /^(down|drain)/ {print $1}'); do
    scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true
  done
  sleep 1
done
echo "slurm: did not come up; logs in $STATE/log" >&2
tail -n 5 "$STATE/log/slurmctld.log" "$STATE"/log/slurmd-*.log >&2 || true
exit 1
