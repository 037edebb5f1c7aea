"""All of the gateway's SQL, returning models. Nothing else writes SQL.

Functions that must join a caller's transaction take the connection; the
rest take the Database and borrow a connection for one statement.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import uuid
from typing import Any, AsyncIterator, Mapping, Sequence

import asyncpg

from provisioning.clusters import DEFAULT_CLUSTER
from provisioning.db.pool import Database
from provisioning.errors import Conflict
from provisioning.models import AuditEvent, DeviceRequest, User, Workspace

# Also named in migrations 0003 and 0004, whose triggers publish every change
# to workspaces, users (since 0010: to the columns replicas cache) and
# sessions: no code path sends events itself.
EVENTS_CHANNEL = "tenant_gateway_events"


def _user(row: asyncpg.Record) -> User:
    # Replicas cache these; migration 0010's trigger tells them when one of
    # these columns changes, and only then: a column read here belongs there too.
    return User(id=row["id"], email=row["email"], is_admin=row["is_admin"], status=row["status"],
                provider=row["oidc_provider"])


def workspace_from_row(row: asyncpg.Record) -> Workspace:
    return Workspace(
        id=row["id"], user_id=row["user_id"], namespace=row["k8s_namespace"],
        service_account=row["k8s_sa_name"], tier=row["tier"], status=row["status"],
        created_at=row["created_at"], service_account_uid=row["k8s_sa_uid"], cluster=row["cluster"],
        dedicated=row["dedicated"],
    )


# -- users --------------------------------------------------------------------

async def create_user(db: asyncpg.Connection | Database, email: str, password_hash: str, *, is_admin: bool = False) -> User:
    try:
        row = await db.fetchrow(
            "INSERT INTO users (id, email, password_hash, is_admin) VALUES ($1, $2, $3, $4) RETURNING *",
            uuid.uuid4(), email, password_hash, is_admin,
        )
    except asyncpg.UniqueViolationError:
        raise Conflict("that email is already registered", code="email_taken") from None
    assert row is not None
    return _user(row)


async def user_with_hash_by_email(db: Database, email: str) -> tuple[User, str] | None:
    """A password account only: SSO users have no password and share emails freely."""
    row = await db.fetchrow("SELECT * FROM users WHERE lower(email) = lower($1) AND oidc_issuer IS NULL", email)
    return (_user(row), row["password_hash"]) if row else None


async def sso_user(db: Database, *, provider: str, issuer: str, subject: str, email: str, is_admin: bool,
                   issued_at: datetime.datetime) -> User:
    """The user (issuer, subject) names, made at first sign-in. Never matches
    a password account, whatever the email.

    Email and admin rights follow the provider, but only forward in time:
    the row remembers the `iat` of the token it took them from, and
    - a newer token (or a row from before that was remembered) sets them;
    - a token exactly as old (providers count whole seconds: two tokens of
      one second cannot be ordered) sets the email but may only take admin
      rights away, never give them: of two such tokens, the lesser wins
      whichever comes first;
    - an older token changes nothing: a demoted admin's old ID token, still
      within its expiry, cannot make them an admin again.
    The row is updated only when one of these changes something, so a
    repeated sign-in that changes nothing writes nothing.
    """
    row = await db.fetchrow(
        """WITH upserted AS (
               INSERT INTO users AS u (id, email, password_hash, is_admin, oidc_issuer, oidc_subject, oidc_provider,
                                       oidc_claims_issued_at)
               VALUES ($1, $2, NULL, $3, $4, $5, $6, $7)
               ON CONFLICT (oidc_issuer, oidc_subject) DO UPDATE SET
                 email = EXCLUDED.email, oidc_provider = EXCLUDED.oidc_provider,
                 is_admin = EXCLUDED.is_admin AND (u.is_admin OR u.oidc_claims_issued_at IS DISTINCT FROM
                                                                 EXCLUDED.oidc_claims_issued_at),
                 oidc_claims_issued_at = EXCLUDED.oidc_claims_issued_at
               WHERE u.oidc_claims_issued_at IS NULL OR u.oidc_claims_issued_at < EXCLUDED.oidc_claims_issued_at
                  OR (u.oidc_claims_issued_at = EXCLUDED.oidc_claims_issued_at
                      AND (u.email, u.oidc_provider, u.is_admin)
                          IS DISTINCT FROM (EXCLUDED.email, EXCLUDED.oidc_provider, u.is_admin AND EXCLUDED.is_admin))
               RETURNING *)
           SELECT * FROM upserted
           UNION ALL
           SELECT * FROM users WHERE oidc_issuer = $4 AND oidc_subject = $5 AND NOT EXISTS (SELECT 1 FROM upserted)""",
        uuid.uuid4(), email, is_admin, issuer, subject, provider, issued_at,
    )
    if row is None:
        # The row was made by a racing first sign-in that committed after
        # this statement's snapshot, and this token changed nothing in it.
        row = await db.fetchrow("SELECT * FROM users WHERE oidc_issuer = $1 AND oidc_subject = $2", issuer, subject)
    assert row is not None
    return _user(row)


async def holds_newest_claims(db: Database, user_id: uuid.UUID, issued_at: datetime.datetime) -> bool:
    """Whether a token issued at `issued_at` is the newest word of the
    provider the user's row took (sso_user, just before): an older token,
    still within its expiry, must not change what follows from its claims."""
    row = await db.fetchrow("SELECT oidc_claims_issued_at FROM users WHERE id = $1", user_id)
    return row is None or row["oidc_claims_issued_at"] is None or row["oidc_claims_issued_at"] <= issued_at


async def get_user(db: Database, user_id: uuid.UUID) -> User | None:
    row = await db.fetchrow("SELECT * FROM users WHERE id = $1", user_id)
    return _user(row) if row else None


async def set_user_status(db: Database, user_id: uuid.UUID, status: str, event: AuditEvent) -> User | None:
    """Suspending a user also revokes every session of theirs; the tables'
    triggers (migration 0004) tell every replica when the transaction commits.
    The change and its audit row are one transaction: neither without the
    other. None (and no audit row) when there is no such user."""
    async with db.transaction() as connection:
        row = await connection.fetchrow("UPDATE users SET status = $2 WHERE id = $1 RETURNING *", user_id, status)
        if row is None:
            return None
        if status != "active":
            await connection.execute(
                "UPDATE sessions SET revoked_at = now() WHERE user_id = $1 AND revoked_at IS NULL", user_id)
        await record_audit(connection, event)
    return _user(row)


# -- sessions -----------------------------------------------------------------

async def create_session(db: asyncpg.Connection | Database, session_id: uuid.UUID, user_id: uuid.UUID,
                         expires_at: datetime.datetime, event: AuditEvent) -> User | None:
    """A new session of the user and its audit row (`event`), all or nothing
    in one statement, if the user is active now; None, and nothing written,
    if not (any more).

    What the caller checked before (a password verified in a thread, a code
    approved minutes ago) may be out of date: the user's row is read again
    here, FOR SHARE. A suspension (set_user_status) that updated the row
    first is waited for, and then there is no session; one that comes after
    waits for this statement, and its revocation then covers the new
    session too. Either way no session outlives a suspension that began
    before it was made."""
    row = await db.fetchrow(
        f"""WITH active AS (SELECT * FROM users WHERE id = $8 AND status = 'active' FOR SHARE),
                 opened AS (INSERT INTO sessions (id, user_id, expires_at) SELECT $7, id, $9 FROM active
                            RETURNING 1),
                 audited AS ({INSERT_AUDIT} FROM opened)
            SELECT * FROM active""",
        *audit_row(event), session_id, user_id, expires_at,
    )
    return _user(row) if row else None


async def ensure_session(db: Database, session_id: uuid.UUID, user_id: uuid.UUID,
                         expires_at: datetime.datetime) -> bool:
    """A session row for a credential the gateway did not issue (a bearer ID
    token), made by whichever replica sees it first; a revoked one stays revoked.
    False, and no row made, when the user is not active (any more): the
    user's row is read FOR SHARE, as in create_session, so a suspension
    under way either ends this session with the others or is seen here."""
    row = await db.fetchrow(
        """WITH active AS (SELECT id FROM users WHERE id = $2 AND status = 'active' FOR SHARE),
                made AS (INSERT INTO sessions (id, user_id, expires_at) SELECT $1, id, $3 FROM active
                         ON CONFLICT (id) DO NOTHING)
           SELECT EXISTS (SELECT 1 FROM active) AS active""",
        session_id, user_id, expires_at,
    )
    return bool(row is not None and row["active"])


async def session_ended(db: Database, session_id: uuid.UUID) -> bool:
    """Whether the session row exists and is revoked or expired (False when
    there is none yet: a bearer ID token's first use anywhere)."""
    row = await db.fetchrow(
        "SELECT revoked_at IS NOT NULL OR expires_at <= now() AS ended FROM sessions WHERE id = $1", session_id)
    return bool(row is not None and row["ended"])


async def active_session_user(db: Database, session_id: uuid.UUID) -> User | None:
    """The session's user if the session is live and the user active."""
    row = await db.fetchrow(
        """SELECT u.* FROM sessions s JOIN users u ON u.id = s.user_id
           WHERE s.id = $1 AND s.revoked_at IS NULL AND s.expires_at > now() AND u.status = 'active'""",
        session_id,
    )
    return _user(row) if row else None


async def revoke_session(db: asyncpg.Connection | Database, session_id: uuid.UUID) -> None:
    """The table's trigger (migration 0004) tells every replica (when the
    caller's transaction, if any, commits)."""
    await db.fetchrow("UPDATE sessions SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL", session_id)


# -- sign-in in progress (browser and device) ----------------------------------

async def start_oidc_login(db: Database, *, state_hash: bytes, provider: str, nonce: str, code_verifier: str,
                           redirect_uri: str, next_path: str, browser_hash: bytes, ttl_seconds: int) -> None:
    """Record a browser sign-in; sweeps expired ones in the same statement."""
    await db.fetchrow(
        """WITH swept AS (DELETE FROM oidc_logins WHERE expires_at < now())
           INSERT INTO oidc_logins (state_hash, provider, nonce, code_verifier, redirect_uri, next_path,
                                    browser_hash, expires_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, now() + make_interval(secs => $8))""",
        state_hash, provider, nonce, code_verifier, redirect_uri, next_path, browser_hash, ttl_seconds,
    )


async def consume_oidc_login(db: Database, state_hash: bytes, provider: str) -> dict[str, Any] | None:
    """The sign-in `state` names, removed as it is read: a state works once.
    None when unknown, used, expired or another provider's."""
    row = await db.fetchrow(
        "DELETE FROM oidc_logins WHERE state_hash = $1 RETURNING *, expires_at > now() AS live", state_hash)
    if row is None or not row["live"] or row["provider"] != provider:
        return None
    return dict(row)


async def create_device_code(db: Database, device_hash: bytes, user_code_hash: bytes, ttl_seconds: int, *,
                             client_name: str | None = None, client_address: str | None = None) -> bool:
    """False when the user code collides with a live one (the caller draws again)."""
    row = await db.fetchrow(
        """WITH swept AS (DELETE FROM device_codes WHERE expires_at < now() - interval '1 hour')
           INSERT INTO device_codes (device_hash, user_code_hash, expires_at, client_name, client_address)
           VALUES ($1, $2, now() + make_interval(secs => $3), $4, $5::inet) ON CONFLICT DO NOTHING RETURNING 1""",
        device_hash, user_code_hash, ttl_seconds, client_name, client_address,
    )
    return row is not None


async def pending_device_request(db: Database, user_code_hash: bytes) -> DeviceRequest | None:
    """What asked for the user code, while the code is live and not yet
    approved; None when it is unknown, approved, used or expired."""
    row = await db.fetchrow(
        """SELECT client_name, host(client_address) AS client_address, started_at, expires_at FROM device_codes
           WHERE user_code_hash = $1 AND approved_by IS NULL AND consumed_at IS NULL AND expires_at > now()""",
        user_code_hash)
    if row is None:
        return None
    return DeviceRequest(client_name=row["client_name"], client_address=row["client_address"],
                         started_at=row["started_at"], expires_at=row["expires_at"])


async def approve_device_code(db: Database, user_code_hash: bytes, user_id: uuid.UUID, event: AuditEvent) -> bool:
    """Approve a live, not yet approved code, and write its audit row, all or
    nothing in one statement; False (and no row) otherwise (unknown, expired, used)."""
    row = await db.fetchrow(
        f"""WITH approved AS (
               UPDATE device_codes SET approved_by = $8
               WHERE user_code_hash = $7 AND approved_by IS NULL AND consumed_at IS NULL AND expires_at > now()
               RETURNING 1),
           audited AS ({INSERT_AUDIT} FROM approved)
           SELECT 1 FROM approved""", *audit_row(event), user_code_hash, user_id)
    return row is not None


async def consume_device_code(db: asyncpg.Connection | Database,
                              device_hash: bytes) -> tuple[str, uuid.UUID | None]:
    """("unknown"|"expired"|"pending"|"approved", user id). Approved codes are
    consumed in the same statement: exactly one poller gets the session."""
    row = await db.fetchrow(
        """WITH taken AS (
               UPDATE device_codes SET consumed_at = now()
               WHERE device_hash = $1 AND approved_by IS NOT NULL AND consumed_at IS NULL AND expires_at > now()
               RETURNING approved_by)
           SELECT d.expires_at > now() AS live, d.consumed_at IS NOT NULL AS used, t.approved_by AS taken_by
           FROM device_codes d LEFT JOIN taken t ON true WHERE d.device_hash = $1""", device_hash)
    if row is None or row["used"]:
        return "unknown", None
    if row["taken_by"] is not None:
        return "approved", row["taken_by"]
    if not row["live"]:
        return "expired", None
    return "pending", None


async def redeem_device_code(db: Database, device_hash: bytes, session_id: uuid.UUID, expires_at: datetime.datetime,
                             event: AuditEvent) -> tuple[str, User | None]:
    """consume_device_code, and for an approved code the approving user's
    session (create_session) with its audit row (`event`, for that user), in
    one transaction: a failure part-way leaves the code approved and unused,
    so the next poll gets the session. ("approved", None) when the approving
    user is no longer active: the code is used up all the same."""
    async with db.transaction() as connection:
        outcome, user_id = await consume_device_code(connection, device_hash)
        if outcome != "approved" or user_id is None:
            return outcome, None
        user = await create_session(connection, session_id, user_id, expires_at,
                                    dataclasses.replace(event, user_id=user_id))
    return outcome, user


# -- workspaces ---------------------------------------------------------------

# Every audit row is written by this statement: alone, with a FROM (one row
# per row of a CTE) or with a WHERE (a row only if a condition holds).
# Parameters $1-$6 are `audit_row(event)`.
INSERT_AUDIT = """INSERT INTO audit_logs (id, user_id, workspace_id, action, ip_address, details)
                   SELECT $1, $2, $3, $4, $5::inet, $6::jsonb"""

async def claim_workspace(db: Database, user_id: uuid.UUID, namespace: str, service_account: str,
                          tier: str, *, cluster: str = DEFAULT_CLUSTER, dedicated: bool = False) -> tuple[Workspace, bool]:
    """Insert the user's workspace row on `cluster`, or return the one already there.

    The unique index on user_id makes concurrent first calls agree on one row.
    The conflict target is left open on purpose: a racing insert of the same
    user may trip the namespace's unique index before user_id's, and that is
    the same "already there", not an error. A `dedicated` row conflicts too
    with another workspace holding the cluster (migration 0015): then no row
    of the user's is there, and the answer is 409 `no_free_cluster`.
    """
    row = await db.fetchrow(
        """INSERT INTO workspaces (id, user_id, k8s_namespace, k8s_sa_name, tier, status, cluster, dedicated)
           VALUES ($1, $2, $3, $4, $5, 'provisioning', $6, $7)
           ON CONFLICT DO NOTHING RETURNING *""",
        uuid.uuid4(), user_id, namespace, service_account, tier, cluster, dedicated,
    )
    if row is not None:
        return workspace_from_row(row), True
    existing = await db.fetchrow("SELECT * FROM workspaces WHERE user_id = $1", user_id)
    if existing is None and dedicated:
        raise Conflict(f"dedicated cluster {cluster!r} was just taken by another workspace; try again",
                       code="no_free_cluster")
    if existing is None:  # the namespace is taken by a row of another user: impossible by naming
        raise Conflict("the workspace namespace is already in use", code="namespace_taken")
    return workspace_from_row(existing), False


async def cluster_occupancy(db: Database) -> dict[str, tuple[int, uuid.UUID | None]]:
    """Per cluster that holds any: how many workspaces, and the workspace
    holding it if it is dedicated (placement and the admins' cluster view)."""
    rows = await db.fetch(
        """SELECT cluster, count(*) AS workspaces, (array_agg(id) FILTER (WHERE dedicated))[1] AS dedicated_to
           FROM workspaces GROUP BY cluster""")
    return {row["cluster"]: (row["workspaces"], row["dedicated_to"]) for row in rows}


@contextlib.asynccontextmanager
async def workspace_status_lock(db: Database, workspace_id: uuid.UUID, *, wait_seconds: float = 0.0,
                                kill_switch: bool = False) -> AsyncIterator[None]:
    """Suspend and resume of one workspace, one at a time across replicas.

    A transaction-level advisory lock: released at commit, or when a crashed
    replica's connection closes. Without `wait_seconds` a caller that finds
    another operation under way is told (409), not queued: a resume is long
    (it waits out the API server's token cache). With it, the caller waits
    that long for the lock first: a suspension is never refused because a
    resume happened to be running.

    Before the lock, the caller waits for room among the pool's long holds
    (Database.long_hold): at most the database timeout, then 503
    `database_busy`. A `kill_switch` caller (a suspension) may use the room
    kept from onboardings and resumes, so however many of those are under
    way, it waits only for other suspensions.
    """
    key = int.from_bytes(workspace_id.bytes[:8], "big", signed=True)
    # The holder commits its steps on other connections as it goes (each
    # must be seen at once): it holds one and needs another (Database.long_holds).
    async with db.long_hold(reserved=kill_switch), db.transaction() as connection:
        if not await _advisory_xact_lock(connection, wait_seconds, key):
            raise Conflict("a suspension or resume of this workspace is already under way; retry when it ends",
                           code="operation_in_progress")
        yield


async def _advisory_xact_lock(connection: asyncpg.Connection, wait_seconds: float, *key: int) -> bool:
    """Take a transaction-level advisory lock (one bigint key, or two int
    keys: the two spaces never conflict), waiting at most `wait_seconds` for
    its holder (0: not at all). False if it stayed taken."""
    if not wait_seconds:
        try_lock = "SELECT pg_try_advisory_xact_lock($1)" if len(key) == 1 else \
            "SELECT pg_try_advisory_xact_lock($1, $2)"
        return bool(await connection.fetchval(try_lock, *key))
    await connection.execute(f"SET LOCAL lock_timeout = {max(1, int(wait_seconds * 1000))}")
    lock = "SELECT pg_advisory_xact_lock($1)" if len(key) == 1 else "SELECT pg_advisory_xact_lock($1, $2)"
    try:
        await connection.execute(lock, *key, timeout=wait_seconds + 5)
    except asyncpg.exceptions.LockNotAvailableError:
        return False
    return True


async def get_workspace(db: Database, workspace_id: uuid.UUID) -> Workspace | None:
    row = await db.fetchrow("SELECT * FROM workspaces WHERE id = $1", workspace_id)
    return workspace_from_row(row) if row else None


async def workspaces_of(db: Database, user_id: uuid.UUID) -> list[Workspace]:
    rows = await db.fetch("SELECT * FROM workspaces WHERE user_id = $1 ORDER BY created_at", user_id)
    return [workspace_from_row(r) for r in rows]


async def all_workspaces(db: Database) -> list[Workspace]:
    return [workspace_from_row(r) for r in await db.fetch("SELECT * FROM workspaces ORDER BY created_at, id")]


WorkspacePosition = tuple[datetime.datetime, uuid.UUID]
"""Where a page of every workspace ends: the last row's (created_at, id)."""


async def workspaces_page(db: Database, after: WorkspacePosition | None, limit: int) -> list[Workspace]:
    """Up to `limit` workspaces in creation order, those after `after` (the
    previous page's last): a keyset read on the workspaces_created index, so
    a page costs the same however many workspaces there are."""
    if after is None:
        rows = await db.fetch("SELECT * FROM workspaces ORDER BY created_at, id LIMIT $1", limit)
    else:
        rows = await db.fetch("SELECT * FROM workspaces WHERE (created_at, id) > ($1, $2) "
                              "ORDER BY created_at, id LIMIT $3", after[0], after[1], limit)
    return [workspace_from_row(r) for r in rows]


async def every_workspace(db: Database, page: int = 500) -> AsyncIterator[Workspace]:
    """Every workspace in creation order, read a page at a time: a run over
    all of them (reconcile) holds one page, not the whole table. A
    workspace made during the run comes at the end, or not at all."""
    after: WorkspacePosition | None = None
    while True:
        rows = await workspaces_page(db, after, page)
        for workspace in rows:
            yield workspace
        if len(rows) < page:
            return
        after = (rows[-1].created_at, rows[-1].id)


async def set_workspace_state(connection: asyncpg.Connection, workspace_id: uuid.UUID, status: str,
                              service_account_uid: str | None = None) -> Workspace | None:
    """Change status (and the ServiceAccount UID when given). The table's
    trigger (migration 0003) tells every replica when the transaction commits."""
    row = await connection.fetchrow(
        """UPDATE workspaces SET status = $2, k8s_sa_uid = COALESCE($3, k8s_sa_uid), updated_at = now()
           WHERE id = $1 RETURNING *""",
        workspace_id, status, service_account_uid,
    )
    return workspace_from_row(row) if row else None


async def finish_provisioning(db: Database, workspace_id: uuid.UUID, service_account_uid: str,
                              event: AuditEvent) -> Workspace | None:
    """`provisioning` -> `provisioned` and its audit row, all or nothing in one
    statement (one round trip, one commit; the trigger tells the replicas).
    None when the row was not `provisioning`: of two racing callers, exactly
    one sees the transition, and only its audit row is written."""
    row = await db.fetchrow(
        f"""WITH done AS (
               UPDATE workspaces SET status = 'provisioned', k8s_sa_uid = $8, updated_at = now()
               WHERE id = $7 AND status = 'provisioning' RETURNING *),
           audited AS ({INSERT_AUDIT} FROM done)
           SELECT * FROM done""",
        *audit_row(event), workspace_id, service_account_uid,
    )
    return workspace_from_row(row) if row else None


# -- audit --------------------------------------------------------------------



def audit_row(event: AuditEvent) -> tuple[Any, ...]:
    """A new row's values, in the column order every audit INSERT uses."""
    return (uuid.uuid4(), event.user_id, event.workspace_id, event.action, event.ip_address,
            json.dumps(event.details, default=str))


async def record_audit(connection: asyncpg.Connection | Database, event: AuditEvent) -> uuid.UUID:
    row = audit_row(event)
    audit_id: uuid.UUID = row[0]
    if isinstance(connection, Database):
        await connection.fetchrow(INSERT_AUDIT, *row)
    else:
        await connection.execute(INSERT_AUDIT, *row)
    return audit_id


_AUDIT_COLUMNS = ("id", "user_id", "workspace_id", "action", "ip_address", "details")
"""`_audit_row`'s columns, for COPY."""


async def record_audit_batch(db: Database, events: list[AuditEvent]) -> None:
    """Many rows in one binary COPY: one statement for the batch, where an
    INSERT per row (executemany) drained about 3,800 rows a second here.
    All or none: a row PostgreSQL refuses fails the batch. The audit
    writer's own work, not a request's: not counted as a checkout."""
    async with db.connection(counted=False) as connection:
        await connection.copy_records_to_table("audit_logs", records=[audit_row(e) for e in events],
                                               columns=_AUDIT_COLUMNS)


async def query_audit(db: Database, *, workspace_id: uuid.UUID | None = None, user_id: uuid.UUID | None = None,
                      action: str | None = None, email: str | None = None,
                      before: tuple[datetime.datetime, uuid.UUID] | None = None,
                      limit: int = 200) -> list[dict[str, Any]]:
    """Audit rows, newest first, each with the email of its person where the
    gateway knows them (`email`, else null). `email` filters by person
    (case-insensitively, an email no one has matches nothing); `before`, the
    last row's (created_at, id) of the page before, starts strictly after it
    in this order, so older rows are reachable page by page."""
    rows = await db.fetch(
        """SELECT a.*, u.email FROM audit_logs a LEFT JOIN users u ON u.id = a.user_id
           WHERE ($1::uuid IS NULL OR a.workspace_id = $1) AND ($2::uuid IS NULL OR a.user_id = $2)
             AND ($3::text IS NULL OR a.action = $3)
             AND ($5::text IS NULL OR a.user_id IN (SELECT id FROM users WHERE lower(email) = lower($5)))
             AND ($6::timestamptz IS NULL OR (a.created_at, a.id) < ($6, $7::uuid))
           ORDER BY a.created_at DESC, a.id DESC LIMIT $4""",
        workspace_id, user_id, action, limit, email, before[0] if before else None, before[1] if before else None,
    )
    return [
        {
            "id": str(r["id"]),
            "user_id": str(r["user_id"]) if r["user_id"] else None,
            "email": r["email"],
            "workspace_id": str(r["workspace_id"]) if r["workspace_id"] else None,
            "action": r["action"],
            "ip_address": str(r["ip_address"]) if r["ip_address"] else None,
            "created_at": r["created_at"].isoformat(),
            "details": json.loads(r["details"]),
        }
        for r in rows
    ]


# -- rate limits --------------------------------------------------------------

_COUNT_HIT = """
    INSERT INTO rate_limits AS r (key, window_start, hits, window_end)
    SELECT key, now(), 1, now() + make_interval(secs => $2) FROM unnest({keys}::text[]) AS key {where} ORDER BY key
    ON CONFLICT (key) DO UPDATE SET
      hits = CASE WHEN r.window_start <= now() - make_interval(secs => $2) THEN 1 ELSE r.hits + 1 END,
      window_start = CASE WHEN r.window_start <= now() - make_interval(secs => $2) THEN now() ELSE r.window_start END,
      window_end = CASE WHEN r.window_start <= now() - make_interval(secs => $2)
                        THEN now() + make_interval(secs => $2) ELSE r.window_end END
    RETURNING key, hits, EXTRACT(EPOCH FROM (window_start + make_interval(secs => $2) - now()))::float8 AS remaining"""


async def count_hits(db: Database, keys: Sequence[str], window_seconds: int, *, gated_keys: Sequence[str] = (),
                     limit: int = 0) -> dict[str, tuple[int, float]]:
    """Count one event in each key's current fixed window.

    Returns, per key, the hits in the window so far and the seconds until it
    ends. One statement for all keys: concurrent replicas never lose a count,
    and a request limited on two keys (user and address) pays one round trip.
    Keys are locked in sorted order so two such requests cannot deadlock.

    `gated_keys` are counted (and returned) only if no key of `keys` is over
    `limit` with this hit: a client already refused by its address is not
    also counted under keys it chooses itself (an email per attempt), which
    would fill the table and use up someone else's allowance. They are
    locked after `keys`, and callers keep the two sets of names apart, so
    the order still cannot deadlock.
    """
    primary = sorted(set(keys))
    gated = sorted(set(gated_keys) - set(primary))
    rows = await db.fetch(
        f"""WITH counted AS ({_COUNT_HIT.format(keys="$1", where="")}),
                 gated AS ({_COUNT_HIT.format(
                     keys="$3", where="WHERE NOT EXISTS (SELECT 1 FROM counted WHERE hits > $4)")})
            SELECT * FROM counted UNION ALL SELECT * FROM gated""",
        primary, window_seconds, gated, limit,
    )
    return {r["key"]: (int(r["hits"]), float(r["remaining"])) for r in rows}


async def sweep_rate_limits(db: Database, batch: int) -> int:
    """Remove up to `batch` counters whose window has ended; how many went.
    Rows a request is counting right now are skipped (SKIP LOCKED), so a
    sweep never waits on a request or on another replica's sweep, and a
    counter whose window restarted meanwhile is not taken (its new end is
    re-read under the lock). Not counted as a request's checkout."""
    async with db.connection(counted=False) as connection:
        removed = await connection.fetchval(
            """WITH gone AS (
                 DELETE FROM rate_limits WHERE key IN (
                   SELECT key FROM rate_limits WHERE window_end <= now()
                   ORDER BY window_end LIMIT $1 FOR UPDATE SKIP LOCKED)
                 RETURNING 1)
               SELECT count(*) FROM gone""", batch)
    return int(removed)


# -- open streams -------------------------------------------------------------

# The two-key advisory lock space (never in conflict with workspace_status_lock's one-key space).
_STREAM_SLOTS_LOCK = 0x5354


async def take_stream_slot(db: Database, slot_id: uuid.UUID, workspace_id: uuid.UUID, replica_id: uuid.UUID,
                           maximum: int, wait_seconds: float) -> bool:
    """Record one more open stream of the workspace, unless `maximum` are
    recorded already (False), or others are being recorded for longer than
    `wait_seconds` (False too: a flood of opens must not hold the pool). The
    workspace's rows are counted and added under a transaction-level
    advisory lock, and the count is a statement of its own (its snapshot is
    taken once the lock is held), so two replicas cannot both take the last
    slot."""
    key = int.from_bytes(workspace_id.bytes[:4], "big", signed=True)
    async with db.transaction() as connection:
        if not await _advisory_xact_lock(connection, wait_seconds, _STREAM_SLOTS_LOCK, key):
            return False
        taken = await connection.fetchval(
            """INSERT INTO stream_slots (slot_id, workspace_id, replica_id)
               SELECT $1, $2, $3 WHERE (SELECT count(*) FROM stream_slots WHERE workspace_id = $2) < $4
               RETURNING true""",
            slot_id, workspace_id, replica_id, maximum)
    return bool(taken)


async def count_stream_slots(db: Database, workspace_id: uuid.UUID) -> int:
    row = await db.fetchrow("SELECT count(*) AS open FROM stream_slots WHERE workspace_id = $1", workspace_id)
    return int(row["open"]) if row else 0


_RELEASE_SLOTS = "DELETE FROM stream_slots WHERE slot_id = ANY($1::uuid[])"


async def release_stream_slots(db: Database, slot_ids: list[uuid.UUID]) -> None:
    await db.fetch(_RELEASE_SLOTS, slot_ids)


async def replica_beat(db: Database, replica_id: uuid.UUID, held: Mapping[uuid.UUID, uuid.UUID],
                       released: list[uuid.UUID], lapse_seconds: float) -> None:
    """A replica is alive, holds `held` (slot -> workspace) and no longer
    holds `released`.

    - If its own row was gone (a replica that had not beaten for
      `lapse_seconds` was taken for crashed, and its rows removed), its held
      rows are put back.
    - If it had beaten within `lapse_seconds` itself, it removes the
      replicas that have not (crashed) and their rows, and rows of no
      replica. A replica that was cut off itself does not: after an outage
      of the database every replica is late, and none is gone.
    Lapsed replicas are taken with SKIP LOCKED: one that is beating right
    now is never removed, and two replicas never wait on each other. Not
    counted as a request's checkout (Database.connect)."""
    async with db.transaction(counted=False) as connection:
        was_fresh = await connection.fetchval(
            "SELECT seen_at > now() - make_interval(secs => $2) FROM gateway_replicas WHERE replica_id = $1",
            replica_id, lapse_seconds)
        await connection.execute(
            """INSERT INTO gateway_replicas (replica_id, seen_at) VALUES ($1, now())
               ON CONFLICT (replica_id) DO UPDATE SET seen_at = now()""", replica_id)
        if was_fresh is None and held:
            await connection.execute(
                """INSERT INTO stream_slots (slot_id, workspace_id, replica_id)
                   SELECT slot, workspace, $1 FROM unnest($2::uuid[], $3::uuid[]) AS held (slot, workspace)
                   ON CONFLICT (slot_id) DO NOTHING""", replica_id, list(held), list(held.values()))
        if released:
            await connection.execute(_RELEASE_SLOTS, released)
        if was_fresh:
            await connection.execute(
                """WITH gone AS (
                     DELETE FROM gateway_replicas WHERE replica_id IN (
                       SELECT replica_id FROM gateway_replicas
                       WHERE seen_at <= now() - make_interval(secs => $1) FOR UPDATE SKIP LOCKED)
                     RETURNING replica_id)
                   DELETE FROM stream_slots s
                   WHERE s.replica_id IN (SELECT replica_id FROM gone)
                      OR NOT EXISTS (SELECT 1 FROM gateway_replicas r WHERE r.replica_id = s.replica_id)""",
                lapse_seconds)


async def replica_gone(db: Database, replica_id: uuid.UUID) -> None:
    """A replica's clean stop: its streams no longer count anywhere."""
    async with db.transaction() as connection:
        await connection.execute("DELETE FROM stream_slots WHERE replica_id = $1", replica_id)
        await connection.execute("DELETE FROM gateway_replicas WHERE replica_id = $1", replica_id)
