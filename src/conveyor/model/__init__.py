"""The vocabulary every layer speaks: jobs and their states, errors, outcomes, validation,
clocks and versions. No I/O, no imports from the rest of the package."""
