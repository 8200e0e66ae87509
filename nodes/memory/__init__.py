"""Long-term memory: filtering, extraction and loading."""
