"""Token fences: per-request masks over the vocabulary between the output head and sampling."""
