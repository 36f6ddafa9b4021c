"""Test doubles that talk real protocols (loopback HTTP), for memdir tests and benchmarks."""
