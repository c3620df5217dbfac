"""What a job carries: its payload text, big payloads kept apart in a blob store
(claim check), and how a payload is shown."""
