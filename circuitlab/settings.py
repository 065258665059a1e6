"""Settings objects: typed (pydantic), immutable, unknown names refused, checked when built.

A subclass declares its fields and checks them in a `model_validator(mode="after")` that raises ValueError;
building one with bad values raises a `UserError` of one line, prefixed by the class's `ERROR_PREFIX`
("invalid training settings: lr must be positive, got -1")."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from circuitlab.errors import UserError


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    #: put before the message of a setting out of range
    ERROR_PREFIX: ClassVar[str] = ""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as error:
            raise UserError(self.ERROR_PREFIX + explain(error)) from None

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def replace(self, **changes: Any) -> Settings:
        """A copy with some fields changed (checked again)."""
        return type(self)(**{**self.model_dump(), **changes})


def explain(error: ValidationError) -> str:
    """The first problem of a failed validation, in one sentence."""
    problem = error.errors()[0]
    message = str(problem["msg"]).removeprefix("Value error, ")
    where = ".".join(str(part) for part in problem["loc"])
    if problem["type"] == "extra_forbidden":
        return f"unknown setting {where!r}"
    if problem["type"] == "value_error" or not where:
        return message
    return f"{where}: {message} (got {problem.get('input')!r})"
