"""The ``teccl`` command line: one module per subcommand, registered lazily in ``main``."""
