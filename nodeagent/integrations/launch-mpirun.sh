#!/bin/bash
# MPI training (Horovod on MPI, mpi4py, DeepSpeed's MPI launcher...) with Open MPI's mpirun, every
# rank started through `nodeagent exec`: each rank runs with its CPU and memory binding near its GPU,
# its thread pools and environment from a tuned profile (`nodeagent tune --apply --profile NAME`).
#
# Run it once, on the launch node, inside the allocation (mpirun finds the hosts from Slurm, PBS
# or LSF) or with HOSTFILE:
#   NP=16 launch-mpirun.sh train.py --epochs 10
#
# 1. `nodeagent preflight` once on every node: mpirun with one process per node (--map-by
#    ppr:1:node). mpirun exits non-zero when a process does (mpirun(1), EXIT STATUS), so one unfit
#    node stops the launch before any rank starts.
# 2. The ranks: `mpirun ... nodeagent exec [--profile NAME] -- python train.py ARGS`.
#    - Open MPI sets OMPI_COMM_WORLD_LOCAL_RANK in every rank, which nodeagent exec reads for the
#      rank's place on its node (nodeagent/tuning/launcher.py, RANK_VARS).
#    - --bind-to none: mpirun binds ranks by itself by default (to cores or packages, mpirun(1)
#      "Mapping, Ranking, and Binding"); nodeagent exec binds each rank near its GPU and NIC
#      instead, and a binding made first would only narrow the CPUs it may choose from.
#    - -x NAME exports a variable of this shell to the ranks on every node (mpirun(1), -x): the
#      profile name and the CUDA/NCCL settings the job relies on.
#
# Settings (environment):
#   NP                  number of ranks                   (required outside an allocation)
#   HOSTFILE            hosts and slots (mpirun --hostfile)
#   NODEAGENT_PROFILE   profile the ranks run with         (unset: the default profile, and a node
#                       without it runs them unchanged; a profile named here must exist)
#   NODEAGENT_PLAYBOOK  playbook of the preflight          (gpu-training)
#   NODEAGENT_PREFLIGHT 1; 0 leaves the preflight out (the Slurm prolog already gates every job)
set -euo pipefail

if [[ $# -lt 1 ]]; then
    echo "usage: $0 TRAIN_SCRIPT.py [ARGS...]" >&2
    exit 64
fi

# --profile only when a profile was named: nodeagent exec refuses a named profile that is not
# there, and runs the job unchanged where the default one is missing (a node never tuned).
profile=()
if [[ -n ${NODEAGENT_PROFILE:-} ]]; then
    profile=(--profile "$NODEAGENT_PROFILE")
fi
PLAYBOOK=${NODEAGENT_PLAYBOOK:-gpu-training}

hosts=()
if [[ -n ${HOSTFILE:-} ]]; then
    hosts=(--hostfile "$HOSTFILE")
fi
ranks=()
if [[ -n ${NP:-} ]]; then
    ranks=(-np "$NP")
fi

if [[ ${NODEAGENT_PREFLIGHT:-1} != 0 ]]; then
    if ! mpirun "${hosts[@]}" --map-by ppr:1:node nodeagent preflight --playbook "$PLAYBOOK"; then
        echo "$0: nodeagent preflight refused a node (its reason is above); not starting the ranks" >&2
        exit 1
    fi
fi

# The variables exported to every rank, when this shell has them.
exports=()
for name in NODEAGENT_PROFILE PATH LD_LIBRARY_PATH PYTHONPATH CUDA_VISIBLE_DEVICES NCCL_DEBUG NCCL_SOCKET_IFNAME NCCL_IB_HCA; do
    if [[ -n ${!name:-} ]]; then
        exports+=(-x "$name")
    fi
done

exec mpirun "${hosts[@]}" "${ranks[@]}" \
    --bind-to none \
    "${exports[@]}" \
    nodeagent exec "${profile[@]}" -- python "$@"
