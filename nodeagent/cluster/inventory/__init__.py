"""Inventories: hosts.yml (native), Ansible inventories, Slurm-style host lists, and what loading one
gives.
"""
