"""Families of Tensor ops, composed from the core Tensor API (each a mixin of Tensor)."""
