"""Applying tuners' plans: the journal written before every change, the state folder and its lock,
profiles, persistence, revert, and the launcher that applies a profile to a job.
"""
