"""The shared state of the rules that protect a downstream (docs/downstreams.md): circuit
breakers' records, the retry budget's ledger, adaptive concurrency's controller."""
