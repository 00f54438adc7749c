#!/bin/bash
# One array task of an lbscale sweep on JURECA DC (4 x A100 per node): trial $SLURM_ARRAY_TASK_ID of the plan.
# Edit account (and the budget's partition), the array range (`lbscale sweep "$SPEC" --dry-run` lists the
# trials, numbered from 0) and nodes/tasks to one trial's GPUs (here 8 GPUs = 2 nodes), then:
#   sbatch slurm/jureca.sh
# The job checkpoints on SIGUSR1 five minutes before the time limit and requeues itself (--requeue).
#SBATCH --job-name=lbscale
#SBATCH --account=your-project
#SBATCH --partition=dc-gpu
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=32
#SBATCH --time=06:00:00
#SBATCH --array=0-7%2
#SBATCH --requeue
#SBATCH --signal=USR1@300
#SBATCH --output=slurm-%x-%A_%a.out
set -euo pipefail
module load Stages/2024 GCC OpenMPI CUDA NCCL PyTorch
[ -f "${VENV:-.venv}/bin/activate" ] && source "${VENV:-.venv}/bin/activate"
export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"  # srun no longer inherits --cpus-per-task (Slurm >= 22.05)
# the profile (--system) adds NCCL/Gloo on ib0 and MASTER_ADDR = first node + "i" (JSC's InfiniBand name)
SPEC=${SPEC:-experiments/sat4-lamb.yaml}
read -r -a EXTRA <<< "${LBSCALE_ARGS:-}"
lbscale sweep "$SPEC" --system jureca-dc --requeue --array-task "$SLURM_ARRAY_TASK_ID" "${EXTRA[@]}"
