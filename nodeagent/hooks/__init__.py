"""Start-up hooks that `nodeagent exec` puts on a job's PYTHONPATH (this folder, not the package).

Every module in this folder becomes importable by its bare name in the job's interpreter, so only
`sitecustomize.py` and the module it loads by path, `_nodeagent_measure.py` (a name no program uses),
may live here.
"""
