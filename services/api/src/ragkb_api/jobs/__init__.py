"""Long operations as jobs: manifest sync, retry of failed documents, re-index and rollback; reading,
following and cancelling jobs."""
