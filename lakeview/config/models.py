"""The project file ``lakeview.toml``, validated into typed models.

Unknown keys are rejected; every problem is raised as one :class:`ConfigError` naming the
file, the key, the bad value and what would be valid.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lakeview.config.auth import AuthConfig
from lakeview.config.cadence import Cadence, parse_cadence
from lakeview.config.console import ConsoleConfig
from lakeview.config.schema import parse_ddl
from lakeview.config.storage import MaintenanceConfig, RetentionConfig, S3Config
from lakeview.errors import LakeviewError

PROJECT_FILE = "lakeview.toml"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceFormat(str, Enum):
    JSON = "json"
    CSV = "csv"
    PARQUET = "parquet"
    INGEST = "ingest"  # rows POSTed to /lakeview/v1/sources/{name}/rows, landed as JSON lines

    @property
    def reader_format(self) -> str:
        """The file format Spark and the oracle read the landing directory with."""
        return "json" if self is SourceFormat.INGEST else self.value


class TableFormat(str, Enum):
    ICEBERG = "iceberg"
    DELTA = "delta"


class RegistrarName(str, Enum):
    """Where a view is published besides the REST catalog (``register = [...]``)."""

    GLUE = "glue"
    HIVE = "hive"
    FILESYSTEM = "filesystem"


def _interval(value: Any) -> Cadence:
    interval = value if isinstance(value, Cadence) else parse_cadence(value)
    if interval.is_manual:
        raise ValueError(f'{value!r}: the pointer-update interval is a duration like "10s"')
    return interval


class GlueConfig(_Strict):
    """AWS Glue Data Catalog; credentials come from the usual AWS chain (env, profile, role)."""

    endpoint: str | None = Field(None, description="Glue endpoint URL; default: AWS for the region")
    region: str = Field("us-east-1", description="AWS region of the Glue catalog")
    catalog_id: str | None = Field(None, description="AWS account id of the Glue catalog; default: the caller's")
    interval: Cadence = Field(
        default_factory=lambda: parse_cadence("30s"),
        description="move a registered pointer at most this often",
    )

    @field_validator("interval", mode="before")
    @classmethod
    def _interval(cls, value: Any) -> Cadence:
        return _interval(value)


class HiveConfig(_Strict):
    """A Hive Metastore reached over Thrift."""

    uri: str = Field(description="`thrift://HOST:PORT` of the Hive Metastore")
    interval: Cadence = Field(
        default_factory=lambda: parse_cadence("30s"),
        description="move a registered pointer at most this often",
    )

    @field_validator("uri")
    @classmethod
    def _thrift(cls, value: str) -> str:
        if not re.match(r"^thrift://[^\s/:]+:\d+$", value):
            raise ValueError(f"{value!r} is not a metastore URI; use thrift://HOST:PORT")
        return value

    @field_validator("interval", mode="before")
    @classmethod
    def _interval(cls, value: Any) -> Cadence:
        return _interval(value)


class LakeConfig(_Strict):
    """Where the lake lives. Relative paths are relative to the project file."""

    warehouse: str = Field(
        "lake",
        description=(
            "local directory for view tables, Spark checkpoints (`_lakeview/checkpoints/<view>`) and the default "
            "catalog store. Or `s3://bucket/prefix`: tables go there, local state (checkpoints, SQLite store) to "
            "`.lakeview/` next to the project file"
        ),
    )
    name: str = Field(
        "lakeview",
        description="warehouse name: the REST catalog prefix and the `warehouse` clients pass",
    )
    catalog_store: str | None = Field(
        None,
        description=(
            "SQLAlchemy URL of the catalog store, e.g. `postgresql+psycopg2://user@host/db`; default: the SQLite file "
            "`<warehouse>/catalog.db`"
        ),
    )

    s3: S3Config = Field(
        default_factory=S3Config,
        description=(
            "how to reach an `s3://` warehouse (any S3-compatible store: SeaweedFS, MinIO); given to pyiceberg, to "
            "deltalake (`storage_options`) and, as `CREATE SECRET`, to DuckDB"
        ),
    )

    @field_validator("warehouse")
    @classmethod
    def _local_only(cls, value: str) -> str:
        if "://" in value and not value.startswith(("file://", "s3://")):
            raise ValueError(f"{value!r}: use a local directory or s3://bucket/prefix")
        if value.startswith("s3://") and not value.removeprefix("s3://").strip("/"):
            raise ValueError(f"{value!r}: name a bucket, e.g. s3://my-bucket/lake")
        return value

    @field_validator("name")
    @classmethod
    def _identifier(cls, value: str) -> str:
        return _check_name(value)


class ServerConfig(_Strict):
    host: str = Field(
        "127.0.0.1",
        description='bind address; anything but loopback is refused unless `[auth] mode = "oauth2"`',
    )
    port: int = Field(8181, ge=0, le=65535, description="the catalog's port (`/iceberg`, `/lakeview/v1`, `/metrics`)")

    # A non-loopback host is only valid with [auth] mode = "oauth2": see _check_auth.


class ChangeFeedConfig(_Strict):
    """A source whose rows are changes: an operation column mapped to insert/update/delete.

    Each row is the row's new image (a delete needs only the key). Lakeview keeps the current
    row per key (a state table) to retract the old image of an update or delete.
    """

    operation: str = Field(description="column holding the operation")
    key: list[str] = Field(min_length=1, description="columns identifying a row of the source")
    sequence: str = Field(description="column ordering the changes of one key (e.g. an LSN or a timestamp)")
    insert: list[str] = Field(
        default_factory=lambda: ["insert", "i", "c", "r"], description="operation values meaning insert"
    )
    update: list[str] = Field(default_factory=lambda: ["update", "u"], description="operation values meaning update")
    delete: list[str] = Field(default_factory=lambda: ["delete", "d"], description="operation values meaning delete")


class ImagesConfig(_Strict):
    """A change feed of before/after images: each row holds the old row (absent for an insert)
    and the new row (absent for a delete) as two objects with the source's columns."""

    before: str = Field("before", description="field holding the row before the change")
    after: str = Field("after", description="field holding the row after the change")
    key: list[str] = Field(min_length=1, description="columns identifying a row of the source")


class NewColumns(str, Enum):
    IGNORE = "ignore"  # input columns not in the schema are dropped
    EVOLVE = "evolve"  # they are added to the source's schema (lakeview.config.evolution)


class SourceConfig(_Strict):
    """A landing directory where files of one format arrive."""

    format: SourceFormat = Field(
        description=(
            "`json` (one object per line), `csv` (with a header row), `parquet`, or `ingest`: rows POSTed to "
            "`/lakeview/v1/sources/NAME/rows`, landed in `path` as JSON lines"
        ),
    )
    path: str = Field(description="landing directory")
    schema_: str = Field(
        alias="schema",
        description='Spark DDL column list, e.g. `"order_id BIGINT, quantity INT, ts TIMESTAMP"`',
    )
    changes: ChangeFeedConfig | None = Field(
        None,
        description="the source is a change feed: an operation column mapped to insert / update / delete",
    )
    images: ImagesConfig | None = Field(None, description="the source is a change feed of before/after images")
    required: list[str] = Field(
        default_factory=list,
        description="columns a row must have; rows without them are quarantined",
    )
    new_columns: NewColumns = Field(
        NewColumns.IGNORE,
        description=(
            '`"ignore"`: input columns not in `schema` are dropped. `"evolve"`: a new input column is added to the '
            "source's schema with the type Spark infers (recorded in `<warehouse>/_lakeview/schemas/NAME.json`), "
            "`SELECT *` views gain it (earlier rows read NULL); columns are never dropped or retyped (a value that no "
            "longer fits is quarantined). Change feeds too: with `changes` a new top-level field, with `images` a new "
            "field of the `before` or `after` object. A view kept as an operator graph (joins, unions, subqueries, "
            "top-k) naming its columns reads the declared ones; one whose `*` flows through filters, projections, "
            "`UNION ALL` and joins gains the new columns too; a `*` whose rows top-k, `DISTINCT` or `UNION` keeps in "
            "state, or that must line up with another branch's columns, is refused at load (see docs/sql.md)"
        ),
    )

    @field_validator("schema_")
    @classmethod
    def _ddl(cls, value: str) -> str:
        parse_ddl(value)
        return value


class ViewConfig(_Strict):
    sql: str = Field(description="the view's SQL over declared sources or other views (see docs/sql.md)")
    dialect: str = Field(
        "spark",
        description="dialect of `sql`: `spark`, `duckdb` or `trino` (transpiled to Spark SQL by sqlglot)",
    )
    format: TableFormat = Field(
        TableFormat.ICEBERG,
        description=(
            "`iceberg` (committed through the REST catalog) or `delta` (delta-rs, at `<warehouse>/<namespace>/<view>`)"
        ),
    )
    cadence: Cadence = Field(
        default_factory=lambda: parse_cadence("1m"),
        description=(
            'how often a snapshot is committed: a duration of at least 100ms, or `"manual"` (only `lakeview refresh`)'
        ),
    )
    namespace: str = Field("default", description="catalog namespace of the view's table")
    registrars: list[RegistrarName] = Field(
        default_factory=list,
        alias="register",
        description="also publish in `glue`, `hive` (needs `[hive]`) or `filesystem` after each commit",
    )
    materialize: bool = Field(
        True,
        description="`false`: an inline view, not maintained, published as an Iceberg view over materialized views",
    )
    group: str | None = Field(
        None,
        description=(
            "views with the same group commit each epoch in one multi-table catalog transaction with one frontier; "
            "members read the same one source (not a view), share the cadence and are Iceberg; one streaming query "
            "keeps the whole group, and `lakeview refresh MEMBER` refreshes every member"
        ),
    )
    retention: RetentionConfig = Field(default_factory=RetentionConfig, description="which snapshots stay readable")
    maintenance: MaintenanceConfig = Field(
        default_factory=MaintenanceConfig,
        description="background table maintenance",
    )
    target_lag: Cadence | None = Field(
        None,
        description=(
            "the freshness SLO: `status` and `/metrics` report the fraction of the last hour in which lag stayed at "
            "or below it; default 2 × cadence"
        ),
    )
    watermark: str | None = Field(
        None,
        description=(
            'event-time delay after which a row is late, e.g. `"10 minutes"` (Spark interval text); needs an '
            "append-only source or an aggregate over a change feed, and an event-time column"
        ),
    )
    event_time: str | None = Field(
        None,
        description=(
            "the watermark's event-time column, for a view without `window()`; default: `window()`'s column; "
            'over joins or unions `"source.column"` names the one append-only source whose rows can be late'
        ),
    )

    @field_validator("cadence", mode="before")
    @classmethod
    def _cadence(cls, value: Any) -> Cadence:
        return value if isinstance(value, Cadence) else parse_cadence(value)

    @field_validator("target_lag", mode="before")
    @classmethod
    def _target_lag(cls, value: Any) -> Cadence | None:
        if value is None or isinstance(value, Cadence):
            return value
        lag = parse_cadence(value)
        if lag.is_manual:
            raise ValueError(f'{value!r}: a target lag is a duration like "10s" or "5m"')
        return lag

    @property
    def target_lag_seconds(self) -> float | None:
        """The freshness SLO in seconds: ``target_lag``, else 2 x cadence (None for manual views)."""
        if self.target_lag is not None:
            return self.target_lag.seconds
        return None if self.cadence.seconds is None else 2 * self.cadence.seconds

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        return _check_name(value)


class SparkConfig(_Strict):
    """Where view jobs run: local mode by default, or an existing cluster (``master``)."""

    master: str = Field(
        "local[2]",
        description=(
            "where view jobs run: `local[N]`, `spark://HOST:PORT` (standalone), `k8s://URL`, `yarn`; `lakeview up "
            "--spark-master` overrides it; under spark-submit, spark-submit's own master wins"
        ),
    )
    conf: dict[str, str] = Field(
        default_factory=dict,
        description='extra Spark properties, e.g. `{ "spark.driver.host" = "10.0.0.5" }` so executors reach the driver',
    )
    driver_rows_max: int = Field(
        500_000,
        ge=0,
        description="append views: a batch with more input rows has its data files written by the executors; keyed views "
        "and operator-graph views: a first batch (a backfill into empty tables) with more input rows is computed by Spark "
        "and written by the executors; operator-graph views: a later batch with more input rows is reduced by Spark "
        "before the driver (a stateless view's rows appended by the executors, a linear aggregate's partial sums per group)",
    )
    driver_keys_max: int = Field(
        2_000_000,
        ge=0,
        description="keyed tables (a view's, its state, a change feed's mirror) with more live rows are read only by the "
        "executors: keys found, deletes folded and changes derived by Spark jobs; the driver keeps no index or rows of them",
    )
    max_files_per_trigger: int | None = Field(
        None,
        ge=1,
        description="at most this many new files per batch (Spark's maxFilesPerTrigger); bounds every view's delta",
    )

    @field_validator("master")
    @classmethod
    def _master(cls, value: str) -> str:
        if not re.match(r"^(local(\[(\d+|\*)\])?|spark://[^\s]+|k8s://[^\s]+|yarn)$", value):
            raise ValueError(f"{value!r} is not a Spark master; use local[N], spark://HOST:PORT, k8s://URL or yarn")
        return value


class ProjectConfig(_Strict):
    """A whole project: the lake, the server, sources and views."""

    lake: LakeConfig = Field(default_factory=LakeConfig, description="where the lake lives")
    server: ServerConfig = Field(default_factory=ServerConfig, description="the catalog's HTTP server")
    spark: SparkConfig = Field(default_factory=SparkConfig, description="where and how view jobs run")
    sources: dict[str, SourceConfig] = Field(default_factory=dict, description="the sources views read, by name")
    views: dict[str, ViewConfig] = Field(default_factory=dict, description="the views Lakeview keeps, by name")
    glue: GlueConfig | None = Field(None, description='the Glue catalog views with `register = ["glue"]` publish to')
    hive: HiveConfig | None = Field(None, description='the Hive Metastore views with `register = ["hive"]` publish to')
    auth: AuthConfig = Field(default_factory=AuthConfig, description="how the catalog authenticates clients")
    console: ConsoleConfig = Field(default_factory=ConsoleConfig, description="the browser console's history (/ui/)")
    root: Path = Field(default=Path("."), exclude=True, description="the project file's directory (set by the loader)")
    file: str = Field(default=PROJECT_FILE, exclude=True, description="the project file's path (set by the loader)")

    def resolve(self, path: str) -> Path:
        """A config path made absolute against the project directory."""
        path = path.removeprefix("file://")
        candidate = Path(path).expanduser()
        return candidate if candidate.is_absolute() else (self.root / candidate).resolve()

    @property
    def is_s3(self) -> bool:
        return self.lake.warehouse.startswith("s3://")

    @property
    def warehouse_path(self) -> Path:
        """The local warehouse directory; for an s3:// warehouse, the local state directory
        (Spark checkpoints, the default SQLite catalog store): ``.lakeview/`` next to the project file."""
        return self.root / ".lakeview" if self.is_s3 else self.resolve(self.lake.warehouse)

    @property
    def warehouse_uri(self) -> str:
        """Where view tables live: an absolute local path or ``s3://bucket/prefix``."""
        return self.lake.warehouse.rstrip("/") if self.is_s3 else str(self.warehouse_path)

    def table_location(self, view: str) -> str:
        """A Delta view's table location: ``<warehouse>/<namespace>/<view>``."""
        return f"{self.warehouse_uri}/{self.views[view].namespace}/{view}"

    @property
    def catalog_store_url(self) -> str:
        return self.lake.catalog_store or f"sqlite:///{self.warehouse_path / 'catalog.db'}"

    @property
    def catalog_uri(self) -> str:
        """The URI Iceberg clients use (``uri=`` in pyiceberg, Spark, Trino)."""
        host = "127.0.0.1" if self.server.host in ("0.0.0.0", "localhost") else self.server.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.server.port}/iceberg"

    def source_path(self, name: str) -> Path:
        if name not in self.sources and name in self.views:
            return self.changes_path(name)  # a view read by other views: the changes it publishes
        return self.resolve(self.sources[name].path)

    def changes_path(self, view: str) -> Path:
        """Where ``view`` publishes each epoch's change (Z-set files) for the views reading it, one
        subdirectory per reader (lakeview.view_changes)."""
        return self.warehouse_path / "_lakeview" / "changes" / view

    def require_view(self, name: str) -> ViewConfig:
        """The view called ``name``; raises LakeviewError listing the declared views."""
        if name not in self.views:
            raise LakeviewError(f"no view {name!r}; views: {', '.join(self.views) or 'none'}")
        return self.views[name]

    def checkpoint_path(self, view: str) -> Path:
        """Spark's checkpoint of the query keeping ``view``: a grouped view's is its group's
        (one query per group, ``group-<name>``), so every reader of positions finds it."""
        config = self.views.get(view)
        name = f"group-{config.group}" if config is not None and config.group is not None else view
        return self.warehouse_path / "_lakeview" / "checkpoints" / name


def _check_name(value: str) -> str:
    if not _NAME.match(value):
        raise ValueError(f"{value!r} is not a valid name; use letters, digits and _ (not starting with a digit)")
    return value


@functools.lru_cache(maxsize=4096)  # the bind guard asks on every request without auth; parsing costs ~20 µs
def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses, ``[::1]`` too (the only binds allowed without auth)."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def file_io_properties(project: ProjectConfig) -> dict[str, str]:
    """pyiceberg FileIO properties for the warehouse (S3 endpoint and credentials; none when local)."""
    return project.lake.s3.iceberg_properties() if project.is_s3 else {}


def delta_storage_options(project: ProjectConfig) -> dict[str, str] | None:
    """deltalake ``storage_options`` for the warehouse (None when local)."""
    return project.lake.s3.delta_options() if project.is_s3 else None
