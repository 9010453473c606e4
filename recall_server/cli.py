"""The one entry point: serve, migrate, openapi, demo, and the operator's keys, hooks and erasure commands.

One module although long: the whole command line is one click group, read top to bottom like its --help.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import urllib.error
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import click
import msgspec

from recall_server import __version__, config, serving
from recall_server.config import ENV_NAMES, Settings
from recall_server.embedders import EMBEDDERS

T = TypeVar("T")


def _settings(**flags: object) -> Settings:
    return config.load(**flags)


def _dsn(settings: Settings) -> str:
    if settings.database_url:
        return settings.database_url
    from recall_server.db import embedded

    return embedded.start(settings.data_dir)


def _key_file(settings: Settings) -> Path:
    return config.key_file(settings)


def _owner(settings: Settings, operation: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
    """Run one operator operation on an owner connection (works while a server runs on the store)."""

    async def run() -> T:
        from recall_server.db import pool

        conn = await pool.connect(_dsn(settings))
        try:
            return await operation(conn)
        finally:
            await conn.close()

    return asyncio.run(run())


def _bootstrap_local_key(settings: Settings) -> None:
    """Embedded default: on first start, one write key for `default`, printed once, kept 0600 in the data dir."""
    from recall_server.service import ops

    path = _key_file(settings)
    if path.exists():
        return
    key = _owner(settings, lambda conn: ops.issue_key_checked(conn, "default", "write", "local default"))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(key.key + "\n")
    if sys.stdout.isatty():  # a person is watching; a log file or a pipe must never hold the secret
        click.echo(f"created a write key for tenant 'default' (also saved, mode 0600, in {path}):\n{key.key}")
    else:
        click.echo(f"created a write key for tenant 'default'; it is in {path} (mode 0600)")


data_dir_option = click.option(
    "--data-dir", type=click.Path(path_type=Path), default=None,
    help=f"Embedded PostgreSQL data directory (env {ENV_NAMES['data_dir']}); ignored when DATABASE_URL is set.",
)


@click.group()
@click.version_option(__version__, prog_name="recall-server")
def main() -> None:
    """recall-server: the Chain-of-Recall reference graph server."""


@main.command()
@click.option("--host", default=None, help=f"Bind address (env {ENV_NAMES['host']}, default 127.0.0.1).")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help=f"Port (env {ENV_NAMES['port']}, default 8000).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help=f"Worker processes (env {ENV_NAMES['workers']}, default one per core, at most "
                   f"{config.MAX_DEFAULT_WORKERS}).")
@click.option("--log-format", type=click.Choice(["auto", "text", "json"]), default=None,
              help=f"Log lines (env {ENV_NAMES['log_format']}): text on a terminal and JSON otherwise (auto, the "
                   "default), or always one of them.")
@data_dir_option
def serve(host: str | None, port: int | None, workers: int | None, log_format: str | None,
          data_dir: Path | None) -> None:
    """Start the HTTP server (migrating the database first). It holds the terminal: stop it with Ctrl-C."""
    settings = _settings(host=host, port=port, workers=workers, log_format=log_format, data_dir=data_dir)
    settings = msgspec.structs.replace(settings, workers=settings.workers or config.default_workers())
    held = serving.hold_address(settings)  # before anything starts: a second server on the port fails here
    own_metrics_dir = not settings.metrics_dir
    if own_metrics_dir:  # worker processes aggregate Prometheus metrics through a shared directory
        settings = msgspec.structs.replace(settings, metrics_dir=tempfile.mkdtemp(prefix="recall-metrics-"))
    else:  # an earlier run's files would be summed in (prometheus_client: wipe it between runs)
        Path(settings.metrics_dir).mkdir(parents=True, exist_ok=True)
        for stale in Path(settings.metrics_dir).glob("*.db"):
            stale.unlink()
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = settings.metrics_dir  # read by prometheus_client at import

    from recall_server import observability  # after PROMETHEUS_MULTIPROC_DIR: prometheus_client reads it at import
    from recall_server.db.migrate import migrate

    settings = msgspec.structs.replace(settings, log_format=observability.log_format(settings.log_format))

    embedded = not settings.database_url
    settings = msgspec.structs.replace(settings, database_url=_dsn(settings))
    if settings.migrate_on_start:
        asyncio.run(migrate(settings.database_url))
    if embedded:
        _bootstrap_local_key(settings)
    os.environ.update(config.to_env(settings))  # worker processes build their settings from it
    serving.banner(settings, embedded, _key_file(settings))
    held.close()  # granian binds it now
    try:
        # returns after SIGTERM/SIGINT, exit 0
        serving.granian(settings, observability.log_config(settings.log_level, settings.log_format)).serve()
    finally:
        if own_metrics_dir:
            shutil.rmtree(settings.metrics_dir, ignore_errors=True)


@main.command("migrate")
@data_dir_option
@click.option("--citus", is_flag=True, default=False,
              help="Then distribute the tables and functions by tenant_id (on a Citus coordinator; docs/scaling.md).")
def migrate_command(data_dir: Path | None, citus: bool) -> None:
    """Apply schema.sql (idempotent, even when this file was applied before) and print the schema version."""
    from recall_server.db import queries as q
    from recall_server.db.migrate import migrate

    settings = _settings(data_dir=data_dir)
    try:
        version = asyncio.run(migrate(_dsn(settings), again=True, citus=citus))
    except RuntimeError as exc:  # --citus on a database without the extension
        raise click.ClickException(str(exc)) from None
    click.echo(f"schema version {version}")
    if not _owner(settings, q.vectors_available):
        click.echo("pgvector is not in this database, so search is lexical only. To search by meaning: install "
                   "pgvector on the PostgreSQL server (its package, or https://github.com/pgvector/pgvector), run "
                   "`recall-server migrate` again as a role that may CREATE EXTENSION, then `recall-server reindex`.",
                   err=True)


@main.command()
@click.option("--output", "-o", type=click.Path(path_type=Path), default=None, help="Write here instead of stdout.")
def openapi(output: Path | None) -> None:
    """Print the OpenAPI document the server serves, as YAML (this is how openapi.yaml is made)."""
    from recall_server.app import create_app
    from recall_server.openapi import document_yaml

    text = document_yaml(create_app(msgspec.structs.replace(config.load(), database_url="postgresql://unused")))
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text)


@main.group()
def tenants() -> None:
    """Manage tenants (as the database owner)."""


@tenants.command("create")
@click.argument("name")
@data_dir_option
def tenants_create(name: str, data_dir: Path | None) -> None:
    """Create tenant NAME (lowercase letters, digits, - and _)."""
    from recall_server.service import ops

    try:
        created = _owner(_settings(data_dir=data_dir), lambda conn: ops.create_tenant(conn, name))
    except asyncpg.CheckViolationError:
        raise click.BadParameter("use lowercase letters, digits, - and _ (at most 63)", param_hint="NAME") from None
    click.echo(f"tenant {name} {'created' if created else 'already exists'}")


@tenants.command("retention")
@click.argument("name")
@click.option("--closed-threads", "days", type=float, default=None,
              help="Days a thread is kept after it is closed or merged; omit to keep them until deleted.")
@data_dir_option
def tenants_retention(name: str, days: float | None, data_dir: Path | None) -> None:
    """Set how long tenant NAME keeps closed/merged threads (applies from the next status change)."""
    from recall_server.service import ops
    from recall_server.errors import NotFound

    try:
        _owner(_settings(data_dir=data_dir), lambda conn: ops.set_retention(conn, name, days))
    except NotFound as exc:
        raise click.ClickException(exc.detail) from None
    click.echo(f"tenant {name}: closed/merged threads " + (f"expire {days:g} days after closing" if days else
                                                           "are kept until deleted"))


@tenants.command("audit-retention")
@click.argument("name")
@click.option("--days", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Days an audited request is kept; omit for the server's RECALL_AUDIT_TTL (30 days).")
@data_dir_option
def tenants_audit_retention(name: str, days: float | None, data_dir: Path | None) -> None:
    """Set how long tenant NAME keeps its request audit (GET /requests), applied by the sweep."""
    from recall_server.service import ops
    from recall_server.errors import NotFound

    try:
        _owner(_settings(data_dir=data_dir), lambda conn: ops.set_audit_retention(conn, name, days))
    except NotFound as exc:
        raise click.ClickException(exc.detail) from None
    click.echo(f"tenant {name}: audited requests " + (f"are kept {days:g} days" if days else
                                                      "are kept for RECALL_AUDIT_TTL"))


@tenants.command("audit-queries")
@click.argument("name")
@click.argument("keep", type=click.Choice(["on", "off"]))
@data_dir_option
def tenants_audit_queries(name: str, keep: str, data_dir: Path | None) -> None:
    """Whether tenant NAME's request audit keeps each search's question (off by default: it is user content)."""
    from recall_server.service import ops
    from recall_server.errors import NotFound

    try:
        _owner(_settings(data_dir=data_dir), lambda conn: ops.set_audit_queries(conn, name, keep == "on"))
    except NotFound as exc:
        raise click.ClickException(exc.detail) from None
    click.echo(f"tenant {name}: audited searches " + ("keep their question" if keep == "on" else
                                                      "keep their parameters, never the question"))


@tenants.command("lineage")
@click.argument("name")
@click.option("--policy", type=click.Choice(["erase", "flag", "keep"]), required=True,
              help="erase: the memories learned from an erased source are erased too; flag (the default): they "
                   "stay, marked source_erased; keep: they stay as they are (the lineage is recorded).")
@data_dir_option
def tenants_lineage(name: str, policy: str, data_dir: Path | None) -> None:
    """Set what erasing a source does to tenant NAME's memories learned from it (docs/lifecycle.md)."""
    from recall_server.service import ops
    from recall_server.errors import NotFound

    try:
        _owner(_settings(data_dir=data_dir), lambda conn: ops.set_lineage_policy(conn, name, policy))
    except NotFound as exc:
        raise click.ClickException(exc.detail) from None
    click.echo(f"tenant {name}: lineage policy {policy}")


@tenants.command("extract")
@click.argument("name")
@click.option("--namespace", "template", default=None,
              help="Where its threads' extracted memories go by default, e.g. 'users/{subject}' ({subject}: the "
                   "appending key's subject ID).")
@click.option("--off", is_flag=True, help="No default: only threads that opt in extract.")
@data_dir_option
def tenants_extract(name: str, template: str | None, off: bool, data_dir: Path | None) -> None:
    """Set tenant NAME's default extraction namespace: the memories of its threads' conversations go there,
    unless a thread says otherwise ("extract" on POST/PATCH /threads)."""
    from recall_server.service import ops
    from recall_server.errors import NotFound

    if off == (template is not None):
        raise click.UsageError("give exactly one of --namespace or --off")
    try:
        _owner(_settings(data_dir=data_dir), lambda conn: ops.set_extract_namespace(conn, name, template))
    except NotFound as exc:
        raise click.ClickException(exc.detail) from None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--namespace") from None
    click.echo(f"tenant {name}: " + (f"threads extract memories into {template} unless they opt out" if template
                                     else "only threads that opt in extract memories"))


@tenants.command("memory-ttl")
@click.argument("name")
@click.option("--scratchpad", type=click.FloatRange(min=0), default=None,
              help="Seconds a scratchpad memory lives unless written with ttl/expires_at (0: until deleted).")
@click.option("--state", type=click.FloatRange(min=0), default=None,
              help="Seconds a state memory lives unless written with ttl/expires_at (0: until deleted).")
@data_dir_option
def tenants_memory_ttl(name: str, scratchpad: float | None, state: float | None, data_dir: Path | None) -> None:
    """Set tenant NAME's default lifetimes of scratchpad and state memories (applies to new writes)."""
    from recall_server.service import ops
    from recall_server.errors import NotFound

    try:
        _owner(_settings(data_dir=data_dir), lambda conn: ops.set_memory_ttl(conn, name, scratchpad, state))
    except NotFound as exc:
        raise click.ClickException(exc.detail) from None
    click.echo(f"tenant {name}: memory ttl updated")


@tenants.command("checkpoint-retention")
@click.argument("name")
@click.option("--keep", type=click.IntRange(min=0), default=None,
              help="Checkpoints kept per LangGraph thread and namespace, newest first (0 or omitted: no count).")
@click.option("--max-age", type=click.FloatRange(min=0), default=None,
              help="Seconds a checkpoint is kept, except the newest of its thread and namespace (0 or omitted: no age).")
@data_dir_option
def tenants_checkpoint_retention(name: str, keep: int | None, max_age: float | None, data_dir: Path | None) -> None:
    """Set tenant NAME's LangGraph checkpoint retention, applied by the sweep."""
    from recall_server.service import ops
    from recall_server.errors import NotFound

    try:
        _owner(_settings(data_dir=data_dir),
               lambda conn: ops.set_checkpoint_retention(conn, name, keep or None, max_age or None))
    except NotFound as exc:
        raise click.ClickException(exc.detail) from None
    click.echo(f"tenant {name}: checkpoints " + ", ".join(
        [*([f"keep the newest {keep}"] if keep else []), *([f"expire after {max_age:g} s"] if max_age else [])]
        or ["are kept until deleted or pruned"]))


@main.command()
@click.option("--batch", type=int, default=500, show_default=True, help="Objects purged per transaction.")
@data_dir_option
def sweep(batch: int, data_dir: Path | None) -> None:
    """Purge the content of every expired object, trace reads past RECALL_TRACE_TTL and webhook deliveries
    past RECALL_DELIVERY_TTL, now (serve also does this periodically)."""
    from recall_server.service import ops

    settings = _settings(data_dir=data_dir)
    purged = _owner(settings, lambda conn: ops.sweep(conn, batch, settings.trace_ttl, settings.delivery_ttl,
                                                             settings.audit_ttl))
    click.echo(f"purged {purged} expired objects")


@main.command()
@click.option("--embedder", type=click.Choice(list(EMBEDDERS[:-1])), default=None,
              help="Embed with this model instead of RECALL_EMBEDDER (to prepare a switch while the server serves).")
@click.option("--all", "everything", is_flag=True,
              help="Embed every live object again, not only those without a vector of the model.")
@data_dir_option
def reindex(embedder: str | None, everything: bool, data_dir: Path | None) -> None:
    """Embed every live object that has no vector of the model, here, with progress. Resumable: what it queued
    stays queued if it stops (a running server's indexer drains it too). Vectors of other models are kept."""
    from recall_server.db.pool import Database
    from recall_server.service.indexer import Indexer

    settings = _settings(data_dir=data_dir, **({"embedder": embedder} if embedder else {}))
    settings = msgspec.structs.replace(settings, database_url=_dsn(settings))  # the owner's: it builds the index

    async def run() -> tuple[int, str]:
        db = await Database.open(settings.database_url, min_size=1, max_size=2, timeout=settings.db_timeout,
                                 queue_limit=settings.queue_limit, queue_wait=settings.queue_wait)
        try:
            indexer = Indexer(db, settings)
            done = await indexer.reindex(everything, lambda n, total: click.echo(f"embedded {n} of {total}", err=True))
            assert indexer.embedder is not None
            return done, indexer.embedder.model
        finally:
            await db.close()

    try:
        done, model = asyncio.run(run())
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"reindexed {done} objects with {model}")


@main.command("verify-erasure")
@click.argument("object_id")
@click.option("--tenant", default="default", show_default=True)
@click.option("--checkpoints", is_flag=True,
              help="OBJECT_ID is a LangGraph thread_id whose checkpoints were deleted (DELETE /checkpoints).")
@data_dir_option
def verify_erasure(object_id: str, tenant: str, checkpoints: bool, data_dir: Path | None) -> None:
    """Report every place in the store's tables OBJECT_ID's content could still be read; exit 1 if there is any.
    What it cannot check (the WAL, table and index pages, backups) it lists as not checked."""
    from recall_server.service import ops

    check = ops.verify_checkpoint_erasure if checkpoints else ops.verify_erasure
    findings = _owner(_settings(data_dir=data_dir), lambda conn: check(conn, tenant, object_id))
    for place in findings:
        click.echo(place)
    if not checkpoints:  # each memory learned from it, and what its tenant's lineage policy left of it
        for _, state in _owner(_settings(data_dir=data_dir), lambda conn: ops.erasure_lineage(conn, tenant, object_id)):
            click.echo(state)
    if not findings:
        click.echo(f"{object_id}: erased (no content found) in the store's tables, search columns and vectors")
    click.echo(f"not checked: {'; '.join(ops.NOT_CHECKED)}")
    if findings:
        sys.exit(1)


@main.group()
def keys() -> None:
    """Manage API keys (as the database owner)."""


def _grant_options(grants: tuple[str, ...]) -> list[Any]:
    """`--grant ACCESS:PATTERN` options as Grants (models.Grant validates the pattern)."""
    import msgspec

    from recall_server.models import Grant

    parsed = []
    for option in grants:
        access, _, pattern = option.partition(":")
        try:
            parsed.append(msgspec.convert({"access": access, "namespace": pattern}, Grant))
        except msgspec.ValidationError as exc:
            raise click.BadParameter(f"{option!r}: {exc} (expected read:PATTERN or write:PATTERN)",
                                     param_hint="--grant") from None
    return parsed


_GRANT_HELP = ("ACCESS:PATTERN, repeatable: read or write (which includes read), and the namespaces it covers, "
               "e.g. write:users/{subject_id}/** or read:teams/payments/** (docs/tenancy.md#grants).")


@keys.command("create")
@click.option("--tenant", default=None, help="Tenant the key belongs to (default: the store's only tenant).")
@click.option("--scope", type=click.Choice(["read", "write", "admin"]), required=True)
@click.option("--label", default="", help="Its display name, to recognise it by in `keys list`.")
@click.option("--subject", default=None, help="Who the key speaks for, KIND:ID (e.g. user:u123, agent:triage).")
@click.option("--grant", "grants", multiple=True, help=_GRANT_HELP + " None: the key reaches its whole tenant.")
@data_dir_option
def keys_create(tenant: str | None, scope: str, label: str, subject: str | None, grants: tuple[str, ...],
                data_dir: Path | None) -> None:
    """Create a key; it is printed once, alone on the last line, and cannot be recovered."""
    from recall_server import ids
    from recall_server.errors import NotFound, Unprocessable
    from recall_server.service import ops

    if subject is not None and not ids.SUBJECT_RE.match(subject):
        raise click.BadParameter(f"{subject!r} is not KIND:ID (e.g. user:u123)", param_hint="--subject")
    parsed = _grant_options(grants)
    try:
        key = _owner(_settings(data_dir=data_dir),
                     lambda conn: ops.issue_key_checked(conn, tenant, scope, label, subject, parsed))
    except (NotFound, Unprocessable) as exc:
        raise click.ClickException(exc.detail) from None
    who = f", subject {key.subject}" if key.subject else ""
    click.echo(f"key {key.id} for tenant {key.tenant}, scope {key.scope}{who} (shown once; store it now):")
    click.echo(key.key)


@keys.command("grant")
@click.argument("key_id")
@click.option("--grant", "grants", multiple=True, help=_GRANT_HELP + " None: the whole tenant.")
@data_dir_option
def keys_grant(key_id: str, grants: tuple[str, ...], data_dir: Path | None) -> None:
    """Replace KEY_ID's grants: they hold from the next request on, in every server process."""
    from recall_server.db import tenancy
    from recall_server.errors import NotFound, Unprocessable
    from recall_server.service import ops

    parsed = _grant_options(grants)

    async def change(conn: Any) -> Any:
        changed = await ops.set_grants(conn, key_id, None, parsed)
        await tenancy.after_revoking()
        return changed

    try:
        key = _owner(_settings(data_dir=data_dir), change)
    except (NotFound, Unprocessable) as exc:
        raise click.ClickException(exc.detail) from None
    click.echo(f"key {key.id}: {_describe_grants(key.grants)}")


def _describe_grants(grants: list[Any]) -> str:
    return ", ".join(f"{g.access}:{g.namespace}" for g in grants) or "the whole tenant"


@keys.command("list")
@click.option("--tenant", default=None, help="Only this tenant's keys.")
@data_dir_option
def keys_list(tenant: str | None, data_dir: Path | None) -> None:
    """List keys (never their secrets)."""
    from recall_server.service import ops

    for k in _owner(_settings(data_dir=data_dir), lambda conn: ops.list_keys(conn, tenant)):
        state = f"revoked {k.revoked_at:%Y-%m-%d %H:%M:%S}" if k.revoked_at else "active"
        used = f"used {k.last_used_at:%Y-%m-%d %H:%M:%S}" if k.last_used_at else "never used"
        click.echo(f"{k.id}  {k.tenant:<20} {k.scope:<6} {state:<28} {used:<24} {k.label}")
        if k.subject or k.grants:
            click.echo(f"    {k.subject or '(no subject)'}: {_describe_grants(k.grants)}")


@keys.command("revoke")
@click.argument("key_id")
@data_dir_option
def keys_revoke(key_id: str, data_dir: Path | None) -> None:
    """Revoke KEY_ID: refused from the next request on, by every server process."""
    from recall_server.service import ops

    if _owner(_settings(data_dir=data_dir), lambda conn: ops.revoke_key(conn, key_id)) is None:
        raise click.ClickException(f"no key {key_id}")
    click.echo(f"key {key_id} revoked")


@main.group()
def hooks() -> None:
    """Manage webhook endpoints (as the database owner)."""


@hooks.command("create")
@click.option("--tenant", required=True, help="Tenant whose threads and triggers the deliveries write.")
@click.option("--source", type=click.Choice(["github"]), required=True)
@click.option("--label", default="", help="A note to recognise the hook by in `hooks list`.")
@data_dir_option
def hooks_create(tenant: str, source: str, label: str, data_dir: Path | None) -> None:
    """Create a hook; its secret is printed once, alone on the last line, and cannot be recovered."""
    from recall_server.service import ops
    from recall_server.errors import NotFound

    try:
        hook = _owner(_settings(data_dir=data_dir), lambda conn: ops.issue_hook_checked(conn, tenant, source, label))
    except NotFound as exc:
        raise click.ClickException(exc.detail) from None
    click.echo(f"hook {hook.id} for tenant {hook.tenant}, source {hook.source}")
    click.echo(f"payload URL: <this server's base URL>{hook.url} (content type application/json)")
    click.echo("secret (shown once; paste it as the webhook's Secret):")
    click.echo(hook.secret)


@hooks.command("list")
@click.option("--tenant", default=None, help="Only this tenant's hooks.")
@data_dir_option
def hooks_list(tenant: str | None, data_dir: Path | None) -> None:
    """List hooks (never their secrets)."""
    from recall_server.service import ops

    for h in _owner(_settings(data_dir=data_dir), lambda conn: ops.list_hooks(conn, tenant)):
        state = f"revoked {h.revoked_at:%Y-%m-%d %H:%M:%S}" if h.revoked_at else "active"
        click.echo(f"{h.id}  {h.tenant:<20} {h.source:<6} {state:<28} {h.url}  {h.label}")


@hooks.command("revoke")
@click.argument("hook_id")
@data_dir_option
def hooks_revoke(hook_id: str, data_dir: Path | None) -> None:
    """Revoke HOOK_ID: its deliveries get 404 from the next one on."""
    from recall_server.service import ops

    if _owner(_settings(data_dir=data_dir), lambda conn: ops.revoke_hook(conn, hook_id)) is None:
        raise click.ClickException(f"no hook {hook_id}")
    click.echo(f"hook {hook_id} revoked")


@main.command()
@click.option("--url", default=None, help="Base URL of a running server (env RECALL_URL; default: the local `serve`).")
@click.option("--key", default=None,
              help="API key (env RECALL_API_KEY); default: the one the local `serve` saved in its data directory.")
@data_dir_option
def demo(url: str | None, key: str | None, data_dir: Path | None) -> None:
    """Load the PR #412 story into a running server and print the hop-by-hop recall."""
    from recall_server.demo import run

    url, key = config.client_target(url, key, data_dir)
    if key is None:
        raise click.ClickException("no API key: pass --key or set RECALL_API_KEY (and RECALL_URL for another "
                                   "server), or start the local server with `recall-server serve`, which saves one")
    from recall_server.client import RecallClient, RecallError

    try:
        with RecallClient(url, key) as client:
            writable = client.can_write()
    except RecallError as exc:
        raise click.ClickException(str(exc)) from None
    if not writable:
        raise click.ClickException("demo writes the PR #412 story, so it needs a write key; this one has read "
                                   "scope. Pass --key (or RECALL_API_KEY) with a write key: "
                                   "`recall-server keys create --tenant default --scope write`")
    try:
        run(url, key, click.echo)
    except urllib.error.URLError as exc:
        click.echo(f"cannot reach {url}: {exc.reason}; start it with `recall-server serve`", err=True)
        sys.exit(1)


@main.command("mcp")
@click.option("--url", default=None, help="Base URL of the server (env RECALL_URL; default: the local `serve`).")
@click.option("--key", default=None,
              help="API key (env RECALL_API_KEY; default: the key the local `serve` saved in its data directory).")
@click.option("--run", "run_id", default=None, help="Run ID sent as X-Recall-Run on every call (default: a new one).")
@data_dir_option
def mcp_command(url: str | None, key: str | None, run_id: str | None, data_dir: Path | None) -> None:
    """Serve the recall tools to an MCP client on stdin/stdout, acting through the server at --url."""
    from recall_server.mcp import serve_stdio

    serve_stdio(*config.client_target(url, key, data_dir), run_id)
