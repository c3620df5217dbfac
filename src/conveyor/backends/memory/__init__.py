"""The `memory://` backend: the whole backend contract in plain Python, inside one
process. For tests (see conveyor.testing) and as the reference model the
conformance suite's state machine compares the other backends with; nothing is
kept when the process exits, and no other process can reach it."""
