"""nodeagent over many nodes: the inventory (hosts.yml), SSH connections, the fleet runner, the
fleet comparison (drift and outliers) and inter-node bandwidth."""
