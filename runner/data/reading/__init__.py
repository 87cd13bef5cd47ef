"""Reading what ``data.path`` (and ``data.val_path``) name, from local disk (no network at run time):

- ``sources``: a file, a folder or a glob resolved to one kind of data (rows, text, a ``save_to_disk`` folder), and
  :class:`~runner.data.reading.sources.DataError`, the one-paragraph refusal every data module raises;
- ``corpus``: text files as documents of bytes, in a deterministic order (the Python stdlib source by default);
- ``text_files``: text files into a store of their raw bytes (:mod:`runner.data.store`), named by their contents;
- ``tables``: a table (JSON lines, CSV, Parquet, a ``save_to_disk`` folder) as a ``datasets.Dataset``, memory-mapped
  Arrow prepared once;
- ``table_errors``: what is wrong with a table, in the words of the paragraph that refuses it.
"""
