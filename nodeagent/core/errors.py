"""Errors that reach the user as one line and exit code 64 (EX_USAGE), never as a traceback."""


class UsageError(Exception):
    """Bad input from the user: an unreadable root, an unknown check id, a corrupt archive.

    The message is the whole story: what is wrong, where, and what to do.
    """

    exit_code = 64
