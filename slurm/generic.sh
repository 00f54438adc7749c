#!/bin/bash
# One array task of an lbscale sweep: runs trial number $SLURM_ARRAY_TASK_ID of the plan, with one srun task
# per GPU of that trial. Before `sbatch slurm/generic.sh`:
#   - see the plan:      lbscale sweep "$SPEC" --dry-run     (trial numbers = table rows, from 0)
#   - set --array to 0..(trials - 1), and the resources to one trial's GPUs (here 4 GPUs on one node);
#   - set account and partition for your site (uncomment the lines below).
# Environment: SPEC (the sweep spec), LBSCALE_ARGS (extra sweep options, e.g. "--batch 8k..65k --epochs 2"),
# LBSCALE (the lbscale command, default `lbscale` on PATH).
#SBATCH --job-name=lbscale
##SBATCH --account=your-project
##SBATCH --partition=gpu
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:4
#SBATCH --time=02:00:00
#SBATCH --array=0-7%4
#SBATCH --output=slurm-%x-%A_%a.out
set -euo pipefail
SPEC=${SPEC:-experiments/sat4-lamb.yaml}
LBSCALE=${LBSCALE:-lbscale}
read -r -a EXTRA <<< "${LBSCALE_ARGS:-}"   # split on spaces only: nothing in it is run as shell
"$LBSCALE" sweep "$SPEC" --system generic --array-task "$SLURM_ARRAY_TASK_ID" "${EXTRA[@]}"
