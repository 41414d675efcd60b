"""Pointwise operations and statistics."""
