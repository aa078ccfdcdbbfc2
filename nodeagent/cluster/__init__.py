"""nodeagent over many nodes: the inventory (hosts.yml), SSH connections, the fleet runner, the
fleet comparison (drift and outliers) and inter-node bandwidth."""

# Hosts handled at once by default. SSH is mostly waiting and the checks that run here on each
# pulled recording take tens of milliseconds, so a thread per host is cheap; 128 covers a typical
# fleet in one wave, where a host waiting for a free slot would add its whole time to the run
# (a dead host's connect timeout above all). sshd's MaxStartups limits concurrent handshakes per
# node, not across nodes, so the fleet's size is not a limit here.
DEFAULT_PARALLEL = 128
