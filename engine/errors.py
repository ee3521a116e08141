"""Exceptions raised by the engine.

Every message names the problem and the fix, so a caller (the monitor daemon) can log it
and carry on. All derive from :class:`EngineError`, which derives from ``ValueError`` so
generic "bad argument" handlers catch them too.
"""
from __future__ import annotations


class EngineError(ValueError):
    """Base class of every error the engine raises on purpose."""


class EmptyInputError(EngineError):
    """X or Y has no rows or no columns."""


class ShapeMismatchError(EngineError):
    """X and Y disagree on the number (or the labels) of variables, or are not 2-D."""


class NonFiniteInputError(EngineError):
    """X or Y holds NaN or +-inf."""


class TooFewSamplesError(EngineError):
    """Too few rows (or blocks of rows) to split, estimate and permute."""


class TooFewVariablesError(EngineError):
    """Variable selection needs at least two variables (columns)."""


class InvalidParameterError(EngineError):
    """A constructor or function parameter is out of its allowed range."""
