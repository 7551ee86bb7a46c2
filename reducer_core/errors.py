"""Errors raised by the engine. Every message says what is wrong and how to fix it.

ReducerError                      base: anything the engine refuses to do
├── InvalidModelError             the model cannot be indexed (cycle, duplicate producer, unreadable)
│   └── UnsafeExternalDataError   external data points outside the model's folder
├── MissingTypeError              a boundary tensor has no known dtype (shape inference needed)
├── OriginalDidNotFailError       the unreduced model passes the check: nothing to reduce
├── GoalUnreachableError          the check fails even with every node kept (precision: not an fp16 problem)
├── ReplayMismatchError           a saved state or replay belongs to another model/check/mode
└── UsageError                    options that contradict each other
"""


class ReducerError(Exception):
    """Base class of every error the engine raises on purpose."""


class InvalidModelError(ReducerError):
    """The model cannot be reduced as given."""


class UnsafeExternalDataError(InvalidModelError):
    """An external-data location escapes the model's folder (absolute, '..', or a symlink)."""


class MissingTypeError(ReducerError):
    """A tensor that must become a graph input or output has no known element type."""


class OriginalDidNotFailError(ReducerError):
    """The original model passed the check, so there is no failure to reduce."""


class GoalUnreachableError(ReducerError):
    """A ``Goal.PASS`` session's whole set does not pass: no subset can (for ``precision``: the
    failure is not a precision problem, it stays with every node in fp32)."""


class CheckInfraError(ReducerError):
    """The check itself is broken (cannot start, missing tool): no verdict about the model."""


class ReplayMismatchError(ReducerError):
    """A debug replay or saved strategy state does not match this reduction."""


class UsageError(ReducerError):
    """Options that cannot be honoured together."""
