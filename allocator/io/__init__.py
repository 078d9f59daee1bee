"""allocator.io."""
