"""What watches runs: traces and run metrics."""
