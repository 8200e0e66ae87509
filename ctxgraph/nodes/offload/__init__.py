"""Context offloading: large tool results, large inputs and old tool arguments become artifacts."""
