"""The one error a bad checkpoint raises, kept free of torch so tokenizer and template readers can use it."""


class CheckpointError(ValueError):
    """A checkpoint file is missing, malformed or asks for something this runtime does not support."""
