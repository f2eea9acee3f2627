"""``python -m te_ccl`` runs the ``teccl`` command line."""

from te_ccl.cli.main import main

main()
