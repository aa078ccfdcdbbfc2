"""The shipped playbooks (`*.yml`, package data), read by nodeagent.gate.playbook with importlib.resources.

A package rather than a bare folder so that the editable install finds it as `nodeagent.playbooks`
(setuptools' editable finder maps a package-dir entry only when it has an __init__.py).
"""
