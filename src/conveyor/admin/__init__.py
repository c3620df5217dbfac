"""The operator's API: `app.admin` (actions) and `app.jobs` (reads)."""
