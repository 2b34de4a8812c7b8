"""The embedded stack: the catalog service plus one streaming query per view, in one process.

Spark is imported only when views start, so the catalog-only paths stay light.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import httpx

from catalog_api.auth.authenticator import project_authenticator
from catalog_api.ops.metrics import timed
from catalog_api.ops.routes import lakeview_app_options
from catalog_api.registrars.service import RegistrationService, registered_elsewhere
from catalog_api.server import CatalogServer
from catalog_api.store.catalog import open_store
from lakeview.config.models import ProjectConfig
from lakeview.ivm.commits import CommitRecord
from lakeview.ops.parking import ParkedView, park, unpark
from lakeview.ops.runtime import RuntimePublisher
from lakeview.sql.dag import topological_order
from lakeview.stack.history_sampler import HistorySampler
from lakeview.stack.inline import inline_views, publish_inline_views
from lakeview.stack.maintenance import MaintenanceThread
from lakeview.stack.supervision import ViewSupervisor
from spark_jobs.graph_pipeline import GraphPipeline
from spark_jobs.group_pipeline import GroupPipeline
from spark_jobs.session import build_session
from writers.registry import make_writer, rest_catalog, state_writer_factory

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from catalog_api.registrars.service import RegistrationService
    from lakeview.stack.supervision import ViewSupervisor

log = logging.getLogger("lakeview")


@contextlib.contextmanager
def catalog_for(project: ProjectConfig) -> Iterator[str]:
    """The URI of the project's running catalog, or of a temporary one on a free loopback port
    (stopped on exit) when none answers — so one-shot commands work with or without `up`."""

    try:
        running = httpx.get(project.catalog_uri + "/v1/config", timeout=2).status_code == 200
    except httpx.HTTPError:
        running = False
    if running:
        yield project.catalog_uri
        return
    stack = EmbeddedStack(project, port=0).start_catalog(history=False)
    try:
        yield stack.catalog_uri
    finally:
        stack.stop()


class EmbeddedStack:
    """Catalog + views. Use as a context manager; ``stop()`` is safe to call twice."""

    def __init__(self, project: ProjectConfig, *, port: int | None = None, catalog_uri: str | None = None) -> None:
        """``catalog_uri``: commit through a catalog that already runs elsewhere (no server here)."""
        self.project = project
        port = project.server.port if port is None else port

        self.external_catalog_uri = catalog_uri
        self.history: Any = None  # lakeview.stack.history_sampler.HistorySampler while the catalog serves the console
        if catalog_uri is None:
            store = open_store(project)
            self.server = CatalogServer(
                store,
                host=project.server.host,
                port=port,
                authenticator=project_authenticator(project),
                **lakeview_app_options(project, store),
            )
        self.runtime: RuntimePublisher | None = None
        self.spark: SparkSession | None = None
        self.pipelines: dict[str, GraphPipeline] = {}
        self.maintenance: Any = None  # lakeview.maintenance.MaintenanceThread while views run
        self.registration: RegistrationService | None = None
        self.queries: dict[str, Any] = {}  # view -> its streaming query (a group's members share one)
        self.groups: dict[str, Any] = {}  # group -> spark_jobs.group_pipeline.GroupPipeline
        self.parked: dict[str, ParkedView] = {}  # view -> why it stopped (FAILED), while the others run
        self.supervisor: ViewSupervisor | None = None
        self._on_commit: Callable[[CommitRecord], None] | None = None

    @property
    def catalog_uri(self) -> str:
        return self.external_catalog_uri or self.server.uri

    def start_catalog(self, *, history: bool = True) -> EmbeddedStack:
        """Serve the catalog (and the console; ``history=False``: without sampling its history,
        for a temporary catalog serving one command)."""
        if self.external_catalog_uri is None:
            self.server.start()
            if history and self.history is None:  # the console's lag and backlog history (/ui/)
                self.history = HistorySampler(self.project, self.server.store).start()
        return self

    def start_views(
        self,
        views: list[str] | None = None,
        *,
        spark: SparkSession | None = None,
        available_now: bool = False,
        on_commit: Callable[[CommitRecord], None] | None = None,
        isolate: bool = False,
        on_park: Callable[[ParkedView], None] | None = None,
    ) -> None:
        """Prepare each view's table and start its streaming query (manual views only with
        ``available_now``, i.e. ``lakeview refresh``).

        ``isolate`` (``lakeview up``): a view that cannot start, or whose epoch fails, is parked
        as FAILED (``on_park`` hears of it) and the others go on; a parked view restarts on
        ``lakeview resume``. Without it, the first error is raised."""

        names = topological_order(self.project, list(self.project.views) if views is None else views)  # upstreams first
        on_commit = self._with_registration(on_commit)
        self._on_commit = on_commit
        self.spark = (
            spark
            or self.spark
            or build_session(
                catalog_uri=self.catalog_uri,
                warehouse=self.project.lake.name,
                master=self.project.spark.master,
                extra=self.project.spark.conf,
            )
        )
        for name in names:
            if not self.project.views[name].materialize:
                continue  # an inline view: published as an Iceberg view below, never maintained
            if self.project.views[name].cadence.is_manual and not available_now:
                log.info("%s: manual cadence; refresh it with `lakeview refresh %s`", name, name)
                continue
            try:
                self._start_view(name, on_commit, available_now)
            except Exception as exc:
                if not isolate:
                    raise
                for parked in self.park(name, exc, None):
                    log.error(
                        "%s: FAILED to start: %s (parked; `lakeview resume %s` retries)", name, parked.error, name
                    )
                    if on_park is not None:
                        on_park(parked)
        self._publish_inline_views()
        if not available_now and self.maintenance is None and self.pipelines:
            # Background table health (retention, compaction, orphans); it never blocks commits.

            self.maintenance = MaintenanceThread(self.project, list(self.pipelines), self.catalog_uri).start()
        sources = {view: pipeline.source for view, pipeline in self.pipelines.items()}
        if self.runtime is None and self.queries:
            self.runtime = RuntimePublisher(self.project, self.queries, sources).start()
        elif self.runtime is not None:
            self.runtime.sources.update(sources)
        if isolate and not available_now and self.supervisor is None:
            self.supervisor = ViewSupervisor(self, on_park).start()

    def _start_view(self, name: str, on_commit: Callable[[CommitRecord], None] | None, available_now: bool) -> None:
        """Prepare one view's tables and start its query (a group member: the group's one query);
        a view started again after a failure is no longer parked."""

        if self.project.views[name].group is not None:
            self._start_group(self.project.views[name].group, on_commit, available_now)  # type: ignore[arg-type]
            started = [
                v for v, p in self.pipelines.items() if self.project.views[v].group == self.project.views[name].group
            ]
        else:
            writer = make_writer(self.project, name, self.catalog_uri)
            writer.commit = timed(name, writer.commit)  # type: ignore[method-assign]  # commit latency metric
            pipeline = GraphPipeline(
                self.spark, self.project, name, writer, on_commit, state_writer=state_writer_factory(self.project, name)
            )
            pipeline.prepare()
            if getattr(pipeline, "group", None) is not None:  # Iceberg: every table of an epoch in one transaction
                pipeline.group.commit = timed(name, pipeline.group.commit)  # type: ignore[union-attr]
            self.pipelines[name] = pipeline
            self.queries[name] = pipeline.start(available_now=available_now)
            started = [name]

        for view in started:
            self.parked.pop(view, None)
            unpark(self.project, view)
            if self.runtime is not None and view in self.pipelines:
                self.runtime.sources[view] = self.pipelines[view].source

    def park(
        self, view: str, error: BaseException | str, epoch: int | None, *, transient: bool = False
    ) -> list[ParkedView]:
        """Record ``view`` (with a group's other members: they share its query) as FAILED and stop
        tracking its query; every other view keeps running. Returns the views parked."""

        group = self.project.views[view].group
        views = (
            [v for v, c in self.project.views.items() if c.group == group and c.materialize]
            if group is not None
            else [view]
        )
        parked = []
        for name in views:
            self.queries.pop(name, None)
            self.pipelines.pop(name, None)
            self.parked[name] = park(self.project, name, error, epoch, transient=transient)
            parked.append(self.parked[name])
        if group is not None:
            self.groups.pop(group, None)
        return parked

    def resume(self, view: str) -> bool:
        """Start a parked view again from its last committed epoch (Spark replays the failed one;
        each table skips what it holds). False, and parked with the new error, if it cannot start."""
        if view not in self.parked:
            return False
        try:
            self._start_view(view, self._on_commit, False)
        except Exception as exc:
            log.error("%s: could not resume: %s", view, exc)
            self.park(view, exc, self.parked[view].failed_epoch if view in self.parked else None)
            return False
        return True

    @property
    def halted(self) -> bool:
        """Whether nothing can run: every maintained view is parked."""
        return bool(self.parked) and not self.queries

    def _start_group(self, group: str, on_commit: Callable[[CommitRecord], None] | None, available_now: bool) -> None:
        """Start the one query of a view group (once; starting any member starts them all, so
        ``lakeview refresh MEMBER`` refreshes the whole group)."""
        if group in self.groups:
            return

        assert self.spark is not None
        pipeline = GroupPipeline(
            self.spark,
            self.project,
            group,
            rest_catalog(self.project, f"lakeview-group-{group}", self.catalog_uri),
            on_commit,
        )
        pipeline.prepare()
        assert pipeline.writer is not None
        for view in pipeline.views:  # one transaction is every member's commit latency
            pipeline.writer.commit = timed(view, pipeline.writer.commit)  # type: ignore[method-assign]
        query = pipeline.start(available_now=available_now)
        self.groups[group] = pipeline
        for view, member in pipeline.pipelines.items():
            self.pipelines[view] = member
            self.queries[view] = query

    def _publish_inline_views(self) -> None:
        """Inline views (``materialize = false``) as Iceberg views in the catalog, once the tables
        they read exist; a failure is logged, never stops the materialized views."""

        if inline_views(self.project):
            for name, outcome in publish_inline_views(self.project).items():
                log.info("%s: inline view %s", name, outcome)

    def _with_registration(
        self, on_commit: Callable[[CommitRecord], None] | None
    ) -> Callable[[CommitRecord], None] | None:
        """Fan each commit out to the view's registrars (Glue, HMS, paths) in the background:
        ``notify`` only sets a flag, so a slow or failing registrar never blocks a commit."""
        if self.registration is None:
            for view, registrar, namespace in registered_elsewhere(self.project):
                log.warning(
                    "%s.%s is still registered in %s but no longer configured there; `lakeview prune` removes it",
                    namespace,
                    view,
                    registrar,
                )
            service = RegistrationService(self.project)
            if not service.has_work:
                return on_commit
            self.registration = service.start()
        registration = self.registration

        def fan_out(record: CommitRecord) -> None:
            registration.notify(record.view)
            if on_commit is not None:
                on_commit(record)

        return fan_out

    def stop_views(self) -> None:
        if self.supervisor is not None:  # first: stopping queries must not read as failures
            self.supervisor.stop()
            self.supervisor = None
        if self.maintenance is not None:
            self.maintenance.stop()
            self.maintenance = None
        if self.registration is not None:
            self.registration.stop()
            self.registration = None
        if self.runtime is not None:
            self.runtime.stop()  # records the views as STOPPED for `lakeview status`
            self.runtime = None
        for name, query in list(self.queries.items()):
            try:
                query.stop()
            except Exception:  # stopping must go on for the others
                log.exception("%s: error while stopping its query", name)
            del self.queries[name]
        self.groups.clear()

    def stop(self) -> None:
        self.stop_views()
        if self.history is not None:
            self.history.stop()
            self.history = None
        if self.external_catalog_uri is None:
            self.server.stop()

    def __enter__(self) -> EmbeddedStack:
        return self.start_catalog()

    def __exit__(self, *exc: object) -> None:
        self.stop()
