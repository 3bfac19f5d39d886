"""Model loading for ragkb: the packaged multilingual-e5-small, converted once into the model cache, and
the embedder that the worker and the retriever share."""

from ragkb_models.e5_convert import E5_MODEL_NAME, convert_e5
from ragkb_models.embedder import Backend, Embedder, EmbedderPool, in_precision, load_embedder
from ragkb_models.errors import ModelError, ModelFileError

__all__ = [
    "E5_MODEL_NAME",
    "Backend",
    "Embedder",
    "EmbedderPool",
    "ModelError",
    "ModelFileError",
    "convert_e5",
    "in_precision",
    "load_embedder",
]
