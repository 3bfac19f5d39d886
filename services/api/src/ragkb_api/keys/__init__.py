"""API keys: issue, list, change, revoke; `python -m ragkb_api.keys` creates one from the command line."""
