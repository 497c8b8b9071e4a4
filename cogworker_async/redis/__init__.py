"""Everything that speaks to Redis. No module outside this package imports ``redis``."""
