"""``python -m dlsched`` runs the CLI."""

from dlsched.cli.app import main

main()
