#!/bin/bash
# Horovod training with horovodrun, every rank started through `nodeagent exec`: each rank runs with
# its CPU and memory binding near its GPU, its thread pools and environment from a tuned profile
# (`nodeagent tune --apply --profile NAME`).
#
# Run it once, on the launch node:
#   NP=8 HOSTS=node1:4,node2:4 launch-horovodrun.sh train.py --epochs 10
#
# 1. `nodeagent preflight` once on every host of HOSTS, over ssh (horovodrun reaches them over ssh
#    too), before any rank starts: one unfit node stops the launch.
# 2. The ranks: horovodrun runs the command given on every slot. With its Gloo controller each rank
#    gets HOROVOD_LOCAL_RANK (horovod/runner/gloo_run.py), which nodeagent exec does not read
#    (it reads LOCAL_RANK, SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID:
#    nodeagent/tuning/launcher.py), so a small shell passes it as --local-rank; under --mpi, Open MPI's
#    OMPI_COMM_WORLD_LOCAL_RANK is read directly. Without a rank every process would get rank 0's
#    CPUs. nodeagent execs the job, so the rank's PID, signals and exit code are the job's own.
#
# Settings (environment):
#   NP                  number of ranks                       (required)
#   HOSTS               host:slots,...  (horovodrun -H)       (localhost:$NP)
#   NODEAGENT_PROFILE   profile the ranks run with            (unset: the default profile, and a
#                       node without it runs them unchanged; a profile named here must exist)
#   NODEAGENT_PLAYBOOK  playbook of the preflight             (gpu-training)
#   NODEAGENT_PREFLIGHT 1; 0 leaves the preflight out (the Slurm prolog already gates every job)
set -euo pipefail

if [[ $# -lt 1 || -z ${NP:-} ]]; then
    echo "usage: NP=RANKS [HOSTS=host:slots,...] $0 TRAIN_SCRIPT.py [ARGS...]" >&2
    exit 64
fi

HOSTS=${HOSTS:-localhost:$NP}
PLAYBOOK=${NODEAGENT_PLAYBOOK:-gpu-training}

if [[ ${NODEAGENT_PREFLIGHT:-1} != 0 ]]; then
    IFS=, read -r -a slots <<<"$HOSTS"
    for slot in "${slots[@]}"; do
        host=${slot%%:*}
        if [[ $host == localhost ]]; then
            gate=(nodeagent preflight --playbook "$PLAYBOOK")
        else
            gate=(ssh -o BatchMode=yes "$host" nodeagent preflight --playbook "$PLAYBOOK")
        fi
        if ! "${gate[@]}"; then
            echo "$0: nodeagent preflight refused $host; not starting the ranks" >&2
            exit 1
        fi
    done
fi

# $1 of the inner shell is the profile, empty when none was named; the job's command line follows it
# untouched. --profile only when a profile was named: nodeagent exec refuses a named profile that is
# not there, and runs the job unchanged where the default one is missing (a node never tuned).
# shellcheck disable=SC2016  # expanded by the inner shell, on each rank
rank_shell='profile=()
if [[ -n $1 ]]; then
    profile=(--profile "$1")
fi
shift
if [[ -n ${HOROVOD_LOCAL_RANK:-} ]]; then
    exec nodeagent exec "${profile[@]}" --local-rank "$HOROVOD_LOCAL_RANK" -- "$@"
fi
exec nodeagent exec "${profile[@]}" -- "$@"'

exec horovodrun -np "$NP" -H "$HOSTS" \
    bash -c "$rank_shell" nodeagent-rank "${NODEAGENT_PROFILE:-}" python "$@"
