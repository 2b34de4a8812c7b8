"""What a view reads: the file sources with their quarantine and schema evolution, and an upstream view's published changes."""
