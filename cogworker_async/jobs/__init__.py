"""What a job is: its wire format, its options and their rules, pure (no I/O)."""
