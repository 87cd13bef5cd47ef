"""Text as token ids:

- ``tokenizers``: what turns text into ids (``data.tokenizer``): UTF-8 bytes, or a tokenizer saved in a directory;
- ``byte_tokenizer``: runner's byte ids as a Hugging Face tokenizer, for an exported byte-level model;
- ``encoding``: a text column's ids, tokenized once on every core into a store (:mod:`runner.data.store`) named by
  the rows' content, read through memory maps.
"""
