"""Pure decisions, no I/O: retry and its budgets, rate limits, fairness, concurrency keys,
adaptive limits, circuit breakers, queue settings, hygiene, results, backpressure and the
rule of jobs that wait on others. Backends and the worker both apply them."""
