"""Rendering: the format registry (`formats`) and the Atom, RSS and JSON Feed writers (`documents`), pure functions
of their input.
"""
