"""ragkb retriever: owns the index (Qdrant Edge in-process, or a Qdrant server) and answers searches."""
