"""`nodeagent tui`: the Textual face of the same engine (checks, tuners, benchmark, fleet).

app.py builds the app (make_app), screen_table.py lists the screens (the one place a screen is
named), screens/ holds one module per screen, widgets/ the shared pieces, backend.py the one
interface to the engine, messages.py the messages workers post, and nodeagent.tcss all the
styling. The app imports Textual, never TensorFlow, NVML or paramiko: those load when a screen
first needs them. screen_table imports nothing but the standard library (the CLI reads it).
"""
