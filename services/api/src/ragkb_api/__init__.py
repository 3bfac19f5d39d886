"""ragkb api: the only public entry point."""
