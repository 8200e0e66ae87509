"""Skills: listed by name and description, loaded on demand, remembered, and policed."""
