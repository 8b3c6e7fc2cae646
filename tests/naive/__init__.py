"""Slow, obvious NumPy transcriptions of the papers' equations; every fast kernel is checked against them."""
