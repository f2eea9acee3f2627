"""The compile's deadline, as the model builders and solvers import it: :mod:`te_ccl.deadline`."""

from te_ccl.deadline import EVERY, TimeLimitReached, check, checked, left, until

__all__ = ["until", "check", "left", "checked", "TimeLimitReached", "EVERY"]
