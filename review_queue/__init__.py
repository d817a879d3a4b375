"""review_queue package."""
