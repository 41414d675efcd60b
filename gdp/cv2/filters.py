"""Filters, gradients and edges."""
