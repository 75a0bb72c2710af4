"""Exceptions a user can cause. Scripts turn these into one `error: ...` line and exit status 2."""


class MechmemError(Exception):
    """Base class for errors caused by bad input (files, flags, configs)."""


class CheckpointError(MechmemError):
    """A checkpoint file is missing, unreadable, of the wrong format or inconsistent."""


class TrainingDiverged(MechmemError):
    """The loss became NaN or infinite."""
