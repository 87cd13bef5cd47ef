"""Local data only (no network at run time): byte-level text and synthetic classification."""
