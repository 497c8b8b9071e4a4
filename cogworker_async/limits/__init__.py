"""Rate and concurrency limits a job acquires while it runs."""
