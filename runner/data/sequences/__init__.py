"""Token ids as training sequences and batches, whatever the data kind:

- ``windows``: sequences cut from ids that stay where they are (spans of one flat array): packed windows, or one
  sequence per document in chunks;
- ``packed``: examples one per item, or packed into rows of exactly ``data.seq_len`` that never attend across them;
- ``padding``: a batch of variable-length sequences padded (where to: the shape policy's ``PadTo``; with what:
  ``IGNORE_INDEX`` targets), and batches of similar length.
"""
