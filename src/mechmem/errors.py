"""Exceptions a user can cause. Scripts turn these into one `error: ...` line and exit status 2."""


class MechmemError(Exception):
    """Base class for errors caused by bad input (files, flags, configs)."""


class CheckpointError(MechmemError):
    """A checkpoint file is missing, unreadable, of the wrong format or inconsistent."""


class TrainingDiverged(MechmemError):
    """The loss became NaN or infinite."""


class NotApplicable(MechmemError):
    """An analysis does not apply to this model or task; its command prints `skipped: REASON`, exit 0."""


def one_line(exc: BaseException) -> str:
    """The first line of an exception's message (its class name when empty)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class BadArgument(MechmemError, ValueError):
    """An argument of a public function is out of range, of the wrong shape, or does not fit the model or
    task (a `ValueError` too, so either name catches it)."""


class BadArgumentType(MechmemError, TypeError):
    """An argument of a public function is of the wrong kind (a `TypeError` too)."""
