#!/usr/bin/env bash
# Stop the test SLURM started by start-slurm.sh (its jobs are cancelled first).
set -u
scancel --full --quiet -u "$(id -un)" 2>/dev/null || true
pkill -x slurmd 2>/dev/null || true
pkill -x slurmctld 2>/dev/null || true
echo "slurm: stopped"
