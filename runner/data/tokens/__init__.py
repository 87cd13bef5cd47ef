"""Text as token ids: the tokenizers, and the stores of a text column's ids."""
