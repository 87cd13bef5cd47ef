"""runner's data modules, local data only (no network at run time)."""
