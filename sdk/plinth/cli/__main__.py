"""``python -m plinth.cli``: the ``plinth`` command."""

from plinth.cli import main

main()
