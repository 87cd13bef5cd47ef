"""The checks a composed config passes before anything runs, one module a part of the config (``validate``)."""
