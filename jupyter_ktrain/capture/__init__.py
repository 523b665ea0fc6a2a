"""Notebook cell -> self-contained program (source slice, values, requirements)."""

from .cell_program import CapturedProgram, capture

__all__ = ["CapturedProgram", "capture"]
