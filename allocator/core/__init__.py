"""allocator.core."""
