"""The worker: a Manager running processors, the poller and upkeep in one task group."""
