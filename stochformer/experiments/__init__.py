"""Experiments: each is a function from a validated config to a result object."""
