"""What every layer shares: findings and statuses, errors, input limits, value parsers, YAML with line
numbers, bounded threads.
"""
