"""Each decision an option makes, one ``resolve_*`` function of the config and the facts it needs, beside the
checks that call it before the run; the fit calls the same function with what it finds."""
