"""HTTP controllers: a few lines each, delegating to the service layer."""
