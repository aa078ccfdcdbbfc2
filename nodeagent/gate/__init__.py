"""The pre-flight gate: playbooks and their schema, thresholds, expected hardware, baselines, and the
verdict that starts or stops a job.
"""
