"""ragkb's metadata store: the database and its migrations, the ledger (every document and job state
transition), job progress, re-indexing, the quality gate, blobs and the queue. The api and the worker use
it; the retriever does not."""
