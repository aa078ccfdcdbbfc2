#!/bin/bash
# PyTorch training with torchrun, every worker started through `nodeagent exec`: each rank runs with
# its CPU and memory binding near its GPU, its thread pools and environment from a tuned profile
# (`nodeagent tune --apply --profile NAME`).
#
# Run it once per node (torchrun starts that node's workers), e.g. in an sbatch script:
#   srun --ntasks-per-node=1 launch-torchrun.sh train.py --epochs 10
#
# 1. `nodeagent preflight` once on this node, before any worker starts: a node unfit for the job
#    stops the launch here (the other nodes' torchrun then fail their rendezvous) instead of slowing
#    or failing the job hours later. Skip it (NODEAGENT_PREFLIGHT=0) where the Slurm prolog
#    (slurm-prolog.sh) already gates every job.
# 2. `torchrun --no-python`: torchrun executes the command as given instead of `python COMMAND`
#    (torchrun --help: "Skip prepending the training script with 'python' - just execute it
#    directly"), so every worker is `nodeagent exec [--profile NAME] -- python train.py ARGS`.
#    torchrun sets LOCAL_RANK for each worker, the first variable nodeagent exec reads for the rank
#    (nodeagent/tuning/launcher.py, RANK_VARS), and nodeagent execs the job, so the worker's PID, signals
#    and exit code are the job's own, as torchrun's monitoring expects.
#
# Settings (environment):
#   NNODES              nodes in the job               ($SLURM_NNODES, else 1)
#   NPROC_PER_NODE      workers per node               ($SLURM_GPUS_ON_NODE, else "gpu": one per GPU)
#   RDZV_ENDPOINT       host:port of the rendezvous    (the job's first node:29500, else localhost:29500)
#   RDZV_ID             the job's id                   ($SLURM_JOB_ID, else nodeagent)
#   NODEAGENT_PROFILE   profile the workers run with   (unset: the default profile, and a node
#                       without it runs them unchanged; a profile named here must exist)
#   NODEAGENT_PLAYBOOK  playbook of the preflight      (gpu-training)
#   NODEAGENT_PREFLIGHT 1; 0 leaves the preflight out
set -euo pipefail

if [[ $# -lt 1 ]]; then
    echo "usage: $0 TRAIN_SCRIPT.py [ARGS...]" >&2
    exit 64
fi

NNODES=${NNODES:-${SLURM_NNODES:-1}}
NPROC_PER_NODE=${NPROC_PER_NODE:-${SLURM_GPUS_ON_NODE:-gpu}}
# --profile only when a profile was named: nodeagent exec refuses a named profile that is not
# there, and runs the job unchanged where the default one is missing (a node never tuned).
profile=()
if [[ -n ${NODEAGENT_PROFILE:-} ]]; then
    profile=(--profile "$NODEAGENT_PROFILE")
fi
PLAYBOOK=${NODEAGENT_PLAYBOOK:-gpu-training}
RDZV_ID=${RDZV_ID:-${SLURM_JOB_ID:-nodeagent}}
if [[ -z ${RDZV_ENDPOINT:-} ]]; then
    first=localhost
    if [[ -n ${SLURM_JOB_NODELIST:-} ]]; then
        mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
        first=${nodes[0]:-localhost}
    fi
    RDZV_ENDPOINT="$first:29500"
fi

if [[ ${NODEAGENT_PREFLIGHT:-1} != 0 ]]; then
    if ! nodeagent preflight --playbook "$PLAYBOOK"; then
        echo "$0: nodeagent preflight refused $(hostname -s); not starting the workers" >&2
        exit 1
    fi
fi

exec torchrun \
    --nnodes "$NNODES" \
    --nproc-per-node "$NPROC_PER_NODE" \
    --rdzv-backend c10d \
    --rdzv-endpoint "$RDZV_ENDPOINT" \
    --rdzv-id "$RDZV_ID" \
    --no-python \
    nodeagent exec "${profile[@]}" -- python "$@"
