"""Fault tests: hostile input (every kind of bad message, from a fixed seed) through a real learner, checked by
comparing article-id sets (outputs ∪ dead letters = input)."""
