"""Token ids as training sequences and batches, whatever the data kind: windows, padded and packed batches."""
