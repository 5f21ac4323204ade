"""Rendering: the format registry (`formats`) and the Atom, RSS and JSON Feed writers (`feeds`), pure functions
of their input.
"""
