#!/bin/bash
# nodeagent's pre-flight gate as a Slurm Prolog: a node unfit for the job is drained, with the
# reason, before the job starts on it.
#
# Install on every compute node (slurmd runs the Prolog as SlurmdUser, normally root):
#   nodeagent integrations show slurm-prolog.sh > /etc/slurm/prolog.d/50-nodeagent.sh
#   chmod 755 /etc/slurm/prolog.d/50-nodeagent.sh
# and in slurm.conf:
#   Prolog=/etc/slurm/prolog.d/*             # every script there (https://slurm.schedmd.com/slurm.conf.html#OPT_Prolog)
#   PrologFlags=Alloc                        # run at allocation, before the batch script starts
#   SchedulerParameters=nohold_on_prolog_fail   # see "What Slurm does" below
#
# What Slurm does with this script's exit code (https://slurm.schedmd.com/prolog_epilog.html,
# "Failure Handling"): "If the Prolog fails (returns a non-zero exit code), this will result in the
# node being set to a DRAIN state and the job requeued. The job will be placed in a held state
# unless nohold_on_prolog_fail is configured in SchedulerParameters." Only batch jobs can be
# requeued. So a refused node leaves service and its job goes back to the queue, held until a
# human releases it (`scontrol release JOBID`) unless nohold_on_prolog_fail is set.
# Slurm's own drain reason is "Prolog error", which says nothing; slurmctld sets it only on a node
# that is not draining already (src/slurmctld/node_mgr.c, validate_node_specs), so this script
# drains first with nodeagent's reason, and that is what `sinfo -R` shows.
#
# The decision, by the exit code of `nodeagent preflight`:
#   0          the node may run the job: exit 0.
#   1, 2, 3    refused (a WARN under --fail-on warn, a FAIL, an UNKNOWN): drain with the one-line
#              reason `--format slurm` prints ("nodeagent: kernel/memlock,rdma/mlx5_0/1 FAIL: ...",
#              the failing subjects first, for sinfo -R's 20-character column), log every problem
#              with its fix, exit non-zero.
#   124, 137   no answer within NODEAGENT_TIMEOUT (timeout(1): 124 after TERM, 137 after KILL):
#              drain as hung, exit non-zero. The checks have their own budget, so a run this late
#              is stuck in the kernel (a read of /sys or /proc, a GPU driver call): the node is not
#              fit for a job either.
#   75         busy: a nodeagent.pyz whose build is not unpacked in its cache yet (a first run, or
#              the first after an upgrade). Unpacking takes 5-25 s, past this script's budget, so
#              the file unpacks in the background and exits 75 at once (NODEAGENT_NO_UNPACK=1, set
#              here): logged, exit 0, even with NODEAGENT_STRICT=1 (an upgrade would drain every
#              node). The next job's prolog judges the node. `nodeagent.pyz install /opt/nodeagent`
#              unpacks once at install time, and this script then runs /opt/nodeagent/bin/nodeagent.
#   other      nodeagent could not judge the node: 64 a bad setting or playbook, 70 an internal
#              error, 126/127 not executable or not installed, a signal, or 1 without a
#              reason on stdout (Python failing to import nodeagent). Logged (syslog tag
#              nodeagent-prolog, and stderr, which slurmd logs), then exit 0: a broken install or
#              a typo in a playbook is the same on every node, and must not drain a healthy
#              cluster. NODEAGENT_STRICT=1 drains and refuses instead.
#
# The prolog must be quick: "Any configured script is expected to complete execution quickly (in
# less time than MessageTimeout)" (slurm.conf, Prolog), and MessageTimeout is 10 s by default. So
# the checks get NODEAGENT_BUDGET (5 s) and the whole run NODEAGENT_TIMEOUT (9 s, then 1 s more
# before KILL). Raise both with MessageTimeout. The Slurm docs also ask prologs not to call Slurm
# commands (their load on slurmctld): this one calls scontrol only on the rare refused node.
#
# Settings (environment, or /etc/default/nodeagent, sourced when it exists; slurmd gives a prolog
# no PATH of its own, so the usual directories are appended to whatever PATH it has):
#   NODEAGENT            the nodeagent executable (default: $NODEAGENT_INSTALLED where it
#                        exists, else nodeagent on PATH)
#   NODEAGENT_INSTALLED  /opt/nodeagent/bin/nodeagent   the entry point `nodeagent.pyz install
#                        /opt/nodeagent` makes: nothing to unpack at a run
#   NODEAGENT_PLAYBOOK   preflight                playbook deciding (`nodeagent playbooks`)
#   NODEAGENT_BUDGET     5                        seconds the checks may take (preflight --budget)
#   NODEAGENT_TIMEOUT    9                        seconds before the run counts as hung
#   NODEAGENT_FAIL_ON    (the playbook's)         warn or fail (preflight --fail-on)
#   NODEAGENT_REPORT_DIR /var/spool/nodeagent     shared folder for NODE.json (`nodeagent report
#                                                 merge DIR` shows the fleet); empty: none written
#   NODEAGENT_STRICT     0                        1: drain when nodeagent cannot judge the node
set -euo pipefail

CONFIG=${NODEAGENT_CONFIG:-/etc/default/nodeagent}
if [[ -r $CONFIG ]]; then
    # shellcheck source=/dev/null
    . "$CONFIG"
fi
export PATH="${PATH:+$PATH:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# The entry point `nodeagent.pyz install /opt/nodeagent` makes (nothing to unpack at a run), else
# nodeagent on PATH.
INSTALLED=${NODEAGENT_INSTALLED:-/opt/nodeagent/bin/nodeagent}
NODEAGENT=${NODEAGENT:-}
if [[ -z $NODEAGENT ]]; then
    NODEAGENT=nodeagent
    if [[ -x $INSTALLED ]]; then
        NODEAGENT=$INSTALLED
    fi
fi
# A nodeagent.pyz whose build is not unpacked yet unpacks in the background and exits 75 rather
# than spending this run's time on it.
export NODEAGENT_NO_UNPACK=1
PLAYBOOK=${NODEAGENT_PLAYBOOK:-preflight}
BUDGET=${NODEAGENT_BUDGET:-5}
TIMEOUT=${NODEAGENT_TIMEOUT:-9}
FAIL_ON=${NODEAGENT_FAIL_ON:-}
REPORT_DIR=${NODEAGENT_REPORT_DIR-/var/spool/nodeagent}
STRICT=${NODEAGENT_STRICT:-0}
NODE=${SLURMD_NODENAME:-$(hostname -s)}
JOB=${SLURM_JOB_ID:-?}
TAG=nodeagent-prolog

log() {
    echo "$TAG: node $NODE job $JOB: $*" >&2
    if command -v logger >/dev/null 2>&1; then
        logger -t "$TAG" -p daemon.warning -- "node $NODE job $JOB: $*" || true
    fi
}

drain() {
    local reason=$1
    if scontrol update nodename="$NODE" state=drain reason="$reason"; then
        log "drained: $reason"
    else
        # Slurm drains the node itself on the non-zero exit that follows, as "Prolog error".
        log "scontrol could not drain the node (reason was: $reason)"
    fi
    log_problems
}

# The drain reason is cut to what `sinfo -R` shows; the log gets every problem and its fix, one
# line each, as `nodeagent preflight` prints them (`--output text:`).
log_problems() {
    local line
    [[ -s $WORK/problems.txt ]] || return 0
    while IFS= read -r line; do
        log "  $line"
    done <"$WORK/problems.txt"
}

save_report() {
    # Written locally by nodeagent, then renamed into the shared folder in one step, so that
    # `report merge` never reads half a file and a slow or absent share never changes the verdict.
    local report=$1
    [[ -n $REPORT_DIR && -s $report ]] || return 0
    local tmp="$REPORT_DIR/.$NODE.json.$$.tmp"
    if mkdir -p -- "$REPORT_DIR" && cp -- "$report" "$tmp" && mv -f -- "$tmp" "$REPORT_DIR/$NODE.json"; then
        return 0
    fi
    rm -f -- "$tmp" || true
    log "could not write the report to $REPORT_DIR/$NODE.json"
}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/nodeagent-prolog.XXXXXX")
trap 'rm -rf -- "$WORK"' EXIT

argv=("$NODEAGENT" preflight --playbook "$PLAYBOOK" --budget "$BUDGET" --format slurm
      --output "json:$WORK/report.json" --output "text:$WORK/problems.txt")
if [[ -n $FAIL_ON ]]; then
    argv+=(--fail-on "$FAIL_ON")
fi

rc=0
out=$(timeout --kill-after=1 "$TIMEOUT" "${argv[@]}") || rc=$?
reason=${out%%$'\n'*}
save_report "$WORK/report.json"

# A refusal is exit 1-3 with nodeagent's reason on stdout. Exit 1 without it is Python failing before
# nodeagent could run (a broken install: an import error exits 1 with a traceback on stderr).
if [[ $rc == [123] && $reason == nodeagent* ]]; then
    drain "$reason"
    exit "$rc"
fi
case $rc in
    0)
        exit 0
        ;;
    75)
        log "nodeagent could not judge the node yet (exit 75: a first run of this nodeagent.pyz," \
            "unpacking in the background; its line above): the job runs. No first run: nodeagent.pyz install /opt/nodeagent"
        exit 0
        ;;
    124 | 137)
        drain "nodeagent: preflight hung, no answer in ${TIMEOUT}s (a read of /sys, /proc or a GPU tool)"
        exit 1
        ;;
    *)
        log "nodeagent could not judge the node (exit $rc; 64 bad setting, 70 internal error," \
            "126/127 not installed): ${reason:-no output}"
        if [[ $STRICT == 1 ]]; then
            drain "nodeagent: preflight could not run (exit $rc), NODEAGENT_STRICT=1"
            exit 1
        fi
        exit 0
        ;;
esac
