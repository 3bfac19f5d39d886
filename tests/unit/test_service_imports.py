"""What a service's start imports: never a package that only an optional path needs.

`onnx` (the graph writer's, ~1.3 s with ml_dtypes) and `qdrant-client` (external Qdrant KBs and the Qdrant server
adapter, ~1.2 s) were a third or more of the retriever's and the worker's imports, so every start and every restart
after a crash waited for them (ragkb_models.graph_io, ragkb_retriever.external). torch is the sentence-transformers
fallback's. A fresh interpreter, so that nothing this test run imported earlier hides an import."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

OPTIONAL = ("onnx", "qdrant_client", "torch", "sentence_transformers", "transformers")
SERVICES = ("ragkb_retriever.app", "ragkb_worker.app", "ragkb_api.app")


@pytest.mark.parametrize("module", SERVICES)
def test_a_service_module_imports_no_optional_package(module: str) -> None:
    script = f"import json, sys, {module}; print(json.dumps(sorted(m for m in {OPTIONAL!r} if m in sys.modules)))"
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert json.loads(completed.stdout.strip().splitlines()[-1]) == []
