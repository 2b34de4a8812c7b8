"""HTTP ↔ errors in one place: every error leaves in the spec's shape
``{"error": {"message", "type", "code"}}``."""

from __future__ import annotations

import logging
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from catalog_api.request_limits import json_body
from lakeview import errors

log = logging.getLogger("lakeview.catalog")
M = TypeVar("M", bound=BaseModel)


def error_response(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)


def from_exception(exc: Exception) -> JSONResponse:
    """The one mapping from exceptions to HTTP responses."""
    if isinstance(exc, errors.CatalogError):
        response = error_response(exc.status, exc.kind, str(exc))
        if isinstance(exc, errors.TooManyRequestsError):
            response.headers["Retry-After"] = str(exc.retry_after)
        return response
    if isinstance(exc, ValidationError):
        return error_response(400, "BadRequestException", _validation_message(exc))
    log.exception("unexpected error in the catalog")
    return error_response(500, "InternalServerError", f"{type(exc).__name__}: {exc}")


def model_response(model: BaseModel, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(model.model_dump_json(), status_code=status, media_type="application/json", headers=headers)


async def parse_body(request: Request, model: type[M], defaults: dict[str, Any] | None = None) -> M:
    """Parse a JSON body into a pyiceberg model; raises BadRequestError naming the problem.

    ``defaults`` fills keys the spec marks optional but pyiceberg's model requires.
    """
    data = await json_body(request)
    if not isinstance(data, dict):
        raise errors.BadRequestError(f"request body must be a JSON object for {model.__name__}")
    try:
        return model.model_validate({**(defaults or {}), **data})
    except ValidationError as exc:
        raise errors.BadRequestError(f"invalid {model.__name__}: {_validation_message(exc)}") from None
    except errors.CatalogError:
        raise
    except Exception as exc:  # pyiceberg's validators raise KeyError/TypeError/... for malformed input
        raise errors.BadRequestError(f"invalid {model.__name__}: {type(exc).__name__}: {exc}") from None


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        where = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)
