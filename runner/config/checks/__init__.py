"""The checks a composed config passes before anything runs, one module a part of the config (``validate`` runs
them all, with the checks beside each decision in :mod:`runner.config.decisions`)."""
