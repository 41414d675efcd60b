"""Colour conversions: cvtColor."""
