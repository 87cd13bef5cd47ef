"""Each decision an option makes, one function that its check calls before the run and the fit with what it finds."""
