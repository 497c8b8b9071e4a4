"""Batches and chains: jobs that wait for other jobs."""
