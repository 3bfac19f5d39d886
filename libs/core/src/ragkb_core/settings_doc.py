"""Enumerate the environment variables a settings class reads, with defaults: the source of the README's
configuration table and of the deployment check that docker-compose.yml sets every one of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic_settings import BaseSettings

ENV_PREFIX = "RAGKB_"
NESTED_DELIMITER = "__"


@dataclass(frozen=True)
class EnvVariable:
    name: str
    default: Any
    description: str


def env_variables(settings_class: type[BaseSettings]) -> list[EnvVariable]:
    return _walk(settings_class, ENV_PREFIX)


def _walk(model: type[BaseModel], prefix: str) -> list[EnvVariable]:
    variables: list[EnvVariable] = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        env_name = f"{prefix}{name.upper()}"
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            variables.extend(_walk(annotation, env_name + NESTED_DELIMITER))
        else:
            default = field.get_default(call_default_factory=True)
            variables.append(EnvVariable(env_name, default, field.description or ""))
    return variables
