"""Comparing nodes: a node's facts and findings flattened into comparable values, and the fleet
comparison (drift from the majority, median/MAD outliers, hardware below the majority's). The gate
judges one node's values; the cluster compares many."""
