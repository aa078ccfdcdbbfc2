"""Renderers: the same report as a terminal table or as JSON, and (nodeagent.render.outputs, for
`--output FORMAT:PATH`) as JUnit XML, Prometheus text, Markdown, HTML or a Slurm node reason."""
