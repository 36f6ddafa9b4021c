"""Embedding providers: the interface, the embedded local default and remote APIs."""
