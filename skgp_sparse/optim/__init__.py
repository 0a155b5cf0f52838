"""Optimisation: Adam, the natural-step schedule with back-off, and the minibatch loop."""

from .adam import Adam
from .loop import History, NonFiniteELBOError, train
from .natural import NaturalStepSchedule

__all__ = ["Adam", "History", "NaturalStepSchedule", "NonFiniteELBOError", "train"]
