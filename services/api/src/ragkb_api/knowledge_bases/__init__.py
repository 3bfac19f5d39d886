"""Knowledge bases: settings, lookups, deletion (a job the worker runs)."""
