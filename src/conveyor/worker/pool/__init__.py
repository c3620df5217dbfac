"""The process pool: a supervisor that forks workers, restarts them and stops them."""
