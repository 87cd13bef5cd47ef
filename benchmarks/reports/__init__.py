"""What the races print: ``compare.py``'s and ``families.py``'s tables and targets (``compare``), an idiom's row
from its two processes (``idioms_summary``) and the idiom tables (``idioms_table``)."""
