"""Search, search-test and analyze: the caller's scope resolved, then the retriever asked."""
