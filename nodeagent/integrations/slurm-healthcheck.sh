#!/bin/bash
# nodeagent's pre-flight gate as Slurm's HealthCheckProgram: every HealthCheckInterval seconds, a
# node that fails is drained with the reason, and a node nodeagent drained that passes again is
# resumed. Nodes drained by anyone else are never touched.
#
# Install on every compute node:
#   nodeagent integrations show slurm-healthcheck.sh > /usr/local/sbin/nodeagent-healthcheck
#   chmod 755 /usr/local/sbin/nodeagent-healthcheck
# and in slurm.conf (https://slurm.schedmd.com/slurm.conf.html#OPT_HealthCheckProgram):
#   HealthCheckProgram=/usr/local/sbin/nodeagent-healthcheck
#   HealthCheckInterval=300          # seconds between runs
#   HealthCheckNodeState=IDLE        # not next to a running job (a check reads /sys, runs nvidia-smi)
#
# From slurm.conf: the program runs "as user root periodically on all compute nodes that are not in
# the NOT_RESPONDING state", "Any action to be taken must be explicitly performed by the program
# (e.g. execute "scontrol update NodeName=foo State=drain Reason=tmp_file_system_full" to drain a
# node)", it "will be killed if it does not terminate normally within 60 seconds", and it also runs
# when slurmd starts, before it registers (scontrol may fail then: logged, retried next interval).
# So the checks get NODEAGENT_BUDGET (30 s) and the whole run NODEAGENT_TIMEOUT (50 s, then 5 s
# more before KILL), inside slurmd's 60 s.
#
# The decision, by the exit code of `nodeagent preflight` (as in slurm-prolog.sh):
#   0          passes: resume the node if it is drained with a reason of nodeagent's own (it starts
#              with "nodeagent " or "nodeagent:", as `--format slurm` prints it and the prolog
#              drains with it).
#   1, 2, 3    refused, with nodeagent's reason on stdout: drain with the reason (and log every
#              problem with its fix: the reason is cut to fit), unless someone else drained the
#              node (their reason is kept; the node is out of service anyway).
#   124, 137   no answer within NODEAGENT_TIMEOUT: drain as hung, as refused.
#   75         busy: a nodeagent.pyz unpacking its build in the background (a first run; see
#              slurm-prolog.sh): logged, the node left as it is, even with NODEAGENT_STRICT=1.
#   other      nodeagent could not judge the node (64 bad setting, 70 internal error, 126/127 not
#              installed, 1 without a reason: Python failing to import it): logged, the node is
#              left as it is (neither drained: a broken install must not drain a healthy cluster,
#              nor resumed: nothing vouches for it). NODEAGENT_STRICT=1 drains instead.
#
# Settings (environment, or /etc/default/nodeagent, sourced when it exists):
#   NODEAGENT            the nodeagent executable (default: $NODEAGENT_INSTALLED where it
#                        exists, else nodeagent on PATH)
#   NODEAGENT_INSTALLED  /opt/nodeagent/bin/nodeagent   the entry point `nodeagent.pyz install
#                        /opt/nodeagent` makes: nothing to unpack at a run
#   NODEAGENT_PLAYBOOK   preflight                playbook deciding (`nodeagent playbooks`)
#   NODEAGENT_BUDGET     30                       seconds the checks may take (preflight --budget)
#   NODEAGENT_TIMEOUT    50                       seconds before the run counts as hung
#   NODEAGENT_FAIL_ON    (the playbook's)         warn or fail (preflight --fail-on)
#   NODEAGENT_REPORT_DIR /var/spool/nodeagent     shared folder for NODE.json (`nodeagent report
#                                                 merge DIR` shows the fleet); empty: none written
#   NODEAGENT_NODENAME   $SLURMD_NODENAME or `hostname -s`: the node's name in Slurm
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
BUDGET=${NODEAGENT_BUDGET:-30}
TIMEOUT=${NODEAGENT_TIMEOUT:-50}
FAIL_ON=${NODEAGENT_FAIL_ON:-}
REPORT_DIR=${NODEAGENT_REPORT_DIR-/var/spool/nodeagent}
STRICT=${NODEAGENT_STRICT:-0}
NODE=${NODEAGENT_NODENAME:-${SLURMD_NODENAME:-$(hostname -s)}}
TAG=nodeagent-healthcheck

log() {
    echo "$TAG: node $NODE: $*" >&2
    if command -v logger >/dev/null 2>&1; then
        logger -t "$TAG" -p daemon.warning -- "node $NODE: $*" || true
    fi
}

# The node's state flags and drain reason, from `scontrol show node`: a line "   State=IDLE+DRAIN ..."
# and a line "   Reason=TEXT [user@time]" (src/api/node_info.c, slurm_sprint_node_table).
STATE=""
CURRENT_REASON=""
read_node() {
    local info line
    if ! info=$(scontrol show node "$NODE"); then
        log "scontrol show node failed; the node's state is unknown"
        return 1
    fi
    while IFS= read -r line; do
        line=${line#"${line%%[![:space:]]*}"}
        case $line in
            State=*)
                STATE=${line#State=}
                STATE=${STATE%% *}
                ;;
            Reason=*)
                CURRENT_REASON=${line#Reason=}
                CURRENT_REASON=${CURRENT_REASON% \[*@*\]}
                ;;
        esac
    done <<<"$info"
}

drained() { [[ $STATE == *DRAIN* ]]; }
# nodeagent's reasons: "nodeagent: SUBJECTS STATUS: ..." (`preflight --format slurm`; older
# versions wrote "nodeagent PLAYBOOK STATUS: ...") or "nodeagent: ..." (these scripts' own, for a
# hang or a strict failure).
ours() { [[ $CURRENT_REASON == "nodeagent "* || $CURRENT_REASON == nodeagent:* ]]; }

drain() {
    local reason=$1
    read_node || true
    if drained && ! ours; then
        log "refused ($reason), but drained already by someone else ($CURRENT_REASON): left as is"
        return 0
    fi
    if drained && [[ $CURRENT_REASON == "$reason" ]]; then
        return 0
    fi
    if scontrol update nodename="$NODE" state=drain reason="$reason"; then
        log "drained: $reason"
        log_problems
    else
        log "scontrol could not drain the node (reason was: $reason)"
        log_problems
        return 1
    fi
}

resume() {
    read_node || return 0
    if drained && ours; then
        if scontrol update nodename="$NODE" state=resume; then
            log "passes again: resumed (it was drained with: $CURRENT_REASON)"
        else
            log "scontrol could not resume the node"
            return 1
        fi
    fi
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
    # Renamed into the shared folder in one step, so that `report merge` never reads half a file.
    local report=$1
    [[ -n $REPORT_DIR && -s $report ]] || return 0
    local tmp="$REPORT_DIR/.$NODE.json.$$.tmp"
    if mkdir -p -- "$REPORT_DIR" && cp -- "$report" "$tmp" && mv -f -- "$tmp" "$REPORT_DIR/$NODE.json"; then
        return 0
    fi
    rm -f -- "$tmp" || true
    log "could not write the report to $REPORT_DIR/$NODE.json"
}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/nodeagent-healthcheck.XXXXXX")
trap 'rm -rf -- "$WORK"' EXIT

argv=("$NODEAGENT" preflight --playbook "$PLAYBOOK" --budget "$BUDGET" --format slurm
      --output "json:$WORK/report.json" --output "text:$WORK/problems.txt")
if [[ -n $FAIL_ON ]]; then
    argv+=(--fail-on "$FAIL_ON")
fi

rc=0
out=$(timeout --kill-after=5 "$TIMEOUT" "${argv[@]}") || rc=$?
reason=${out%%$'\n'*}
save_report "$WORK/report.json"

if [[ $rc == [123] && $reason == nodeagent* ]]; then
    drain "$reason"
    exit 1
fi
case $rc in
    0)
        resume
        exit 0
        ;;
    75)
        log "nodeagent could not judge the node yet (exit 75: a first run of this nodeagent.pyz," \
            "unpacking in the background; its line above): the node is left as it is. No first run: nodeagent.pyz install /opt/nodeagent"
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
