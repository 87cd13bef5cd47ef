"""Reading what ``data.path`` (and ``data.val_path``) name, from local disk (no network at run time)."""
