"""What each verdict status means to a caller's shell: the exit codes of `gate` and `verdict`.

Kept apart from the verdict's models so that printing a kept verdict needs nothing else.
"""

EXIT_CODES = {"passed": 0, "failed": 1, "unmeasured": 3, "awaiting": 4, "parked": 4}


def exit_code(status: str) -> int:
    """Unknown statuses count as unmeasured: never a pass that was not measured."""
    return EXIT_CODES.get(status, 3)
