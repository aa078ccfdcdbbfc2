"""What every layer shares: findings and statuses, errors, input limits, value parsers, YAML and JSON
files read with line numbers, the one atomic write, bounded threads.
"""
