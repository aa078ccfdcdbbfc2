"""The application layer: every flow the faces offer (check a node, a recording or a fleet; tune:
plan, apply, verify, revert; bench; preflight; baseline), as functions that take a request and
return a result. The CLI and the TUI only turn their input into a request and render the result,
so both run exactly the same flow. Nothing here prints: progress is reported through callbacks.
"""
