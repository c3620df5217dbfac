"""Services that run an app: loading it from a path, schedule commands, paced redrives,
queue overviews and the queue-state metrics."""
