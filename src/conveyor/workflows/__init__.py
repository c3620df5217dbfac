"""Chains, groups and chords, the inputs a member gets from its parents, and a workflow's
graph as stored."""
