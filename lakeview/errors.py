"""One error hierarchy for Lakeview.

Every error a user can see derives from :class:`LakeviewError`. Errors are split into
*transient* (retrying may succeed: a lost commit race, a server not up yet) and *terminal*
(retrying cannot help: bad config, unsupported SQL) so loops know what to retry.
"""

from __future__ import annotations


class LakeviewError(Exception):
    """Root of every error Lakeview raises on purpose."""

    transient: bool = False


class TerminalError(LakeviewError):
    """Retrying will not help; a person has to change something."""


class TransientError(LakeviewError):
    """Retrying (with backoff) may succeed."""

    transient = True


class ConfigError(TerminalError):
    """The project file is invalid. The message names the file, the key, the value and what is valid."""

    def __init__(self, file: str, key: str, problem: str) -> None:
        self.file = file
        self.key = key
        self.problem = problem
        super().__init__(f"{file}: {key}: {problem}")


class UnsupportedSQLError(TerminalError):
    """A view's SQL cannot be maintained incrementally (or cannot be parsed)."""


class AggregateOverflowError(TerminalError):
    """An aggregate's value no longer fits its column's type (a full recompute overflows too).
    The message names the view, the column and the aggregate; the view is parked, never wrapped."""

    def __init__(self, view: str, column: str, aggregate: str, detail: str) -> None:
        self.view, self.column = view, column
        super().__init__(
            f"view {view!r}: column {column!r} ({aggregate}) overflows its type: {detail}; widen the argument "
            f"(e.g. CAST(x AS DECIMAL(38, 0))) or change the view, then resume it"
        )

    @classmethod
    def of(cls, view: str, columns: list[str], aggregate: str, exc: Exception) -> AggregateOverflowError:
        """The error naming the view, the output column(s) and the aggregate whose sum ``exc`` says left its type."""
        return cls(view, ", ".join(columns), aggregate, str(exc).splitlines()[0])


class SetupError(TerminalError):
    """The machine lacks something Lakeview needs (Java, a jar, an extension)."""


class CatalogError(LakeviewError):
    """Base of catalog errors; each maps to one HTTP status in the REST catalog."""

    status: int = 500
    kind: str = "InternalServerError"


class BadRequestError(CatalogError, TerminalError):
    status = 400
    kind = "BadRequestException"


class NotFoundError(CatalogError, TerminalError):
    status = 404
    kind = "NotFoundException"


class NoSuchNamespaceError(NotFoundError):
    kind = "NoSuchNamespaceException"


class NoSuchTableError(NotFoundError):
    kind = "NoSuchTableException"


class AlreadyExistsError(CatalogError, TerminalError):
    status = 409
    kind = "AlreadyExistsException"


class NamespaceNotEmptyError(CatalogError, TerminalError):
    status = 409
    kind = "NamespaceNotEmptyException"


class CommitConflictError(CatalogError, TransientError):
    """A commit's requirements no longer hold (someone else committed first): reload and retry."""

    status = 409
    kind = "CommitFailedException"


class CommitStateUnknownError(CatalogError, TransientError):
    """The commit may or may not have happened; the caller must check before retrying."""

    status = 500
    kind = "CommitStateUnknownException"


class WriterError(LakeviewError):
    """A snapshot writer failed to commit an epoch."""


class StorageError(WriterError, TransientError):
    """A table's storage (a file system, S3) or its catalog failed mid-commit; the epoch is retried."""


class RegistrarError(TransientError):
    """A registrar (Glue, Hive Metastore, filesystem) could not publish a view's pointer; retried."""


class RegistrarConflictError(TerminalError):
    """A registrar's entry for a view was changed by someone else in a way Lakeview must not overwrite."""


class NoSuchViewError(NotFoundError):
    kind = "NoSuchViewException"


class CatalogUnavailableError(CatalogError, TransientError):
    """The catalog store is busy or unreachable; nothing was changed."""

    status = 503
    kind = "ServiceUnavailableException"


class NotAuthorizedError(CatalogError, TerminalError):
    """No valid credentials (a missing, expired or forged token)."""

    status = 401
    kind = "NotAuthorizedException"


class ForbiddenError(CatalogError, TerminalError):
    """Valid credentials that lack the privilege for this namespace."""

    status = 403
    kind = "ForbiddenException"


class UnprocessableEntityError(CatalogError, TerminalError):
    """A well-formed request that contradicts itself (e.g. a property both removed and updated)."""

    status = 422
    kind = "UnprocessableEntityException"


class NoSuchPlanIdError(NotFoundError):
    """A scan plan id the catalog did not issue (or for another table)."""

    kind = "NoSuchPlanIdException"


class NoSuchPlanTaskError(NotFoundError):
    """A plan-task token the catalog did not issue for this table's snapshot."""

    kind = "NoSuchPlanTaskException"


class UnsupportedOperationError(CatalogError, TerminalError):
    """A valid request for something this catalog does not do (e.g. incremental scan planning)."""

    status = 406
    kind = "UnsupportedOperationException"


class PayloadTooLargeError(BadRequestError):
    """A request body over the catalog's size limit (nothing was parsed)."""

    status = 413
    kind = "PayloadTooLargeException"


class TooManyRequestsError(CatalogError, TransientError):
    """A client over a rate limit; ``retry_after`` seconds until it may try again."""

    status = 429
    kind = "TooManyRequestsException"

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after
