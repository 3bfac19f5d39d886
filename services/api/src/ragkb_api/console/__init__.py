"""The admin console (/console): static pages that call the public v1 API with a browser session."""
