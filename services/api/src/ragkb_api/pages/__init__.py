"""Static admin pages."""
