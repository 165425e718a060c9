"""HTML report export."""
