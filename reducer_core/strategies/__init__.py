"""Reduction strategies as resumable step machines: ``propose`` / ``observe`` / ``best`` / ``state``."""

from reducer_core.strategies.base import MODES, Strategy
from reducer_core.strategies.space import SearchSpace

__all__ = ["MODES", "SearchSpace", "Strategy"]
