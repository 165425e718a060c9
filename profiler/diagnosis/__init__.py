"""Diagnosis rules: Profile -> findings with evidence and fixes (pure functions)."""
