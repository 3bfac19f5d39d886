"""ragkb command-line client: a client of ragkb's public HTTP API, installable on its own."""

__version__ = "0.1.0"
