"""The controller lease: at most one controller records epochs at a time, and a deposed one cannot commit.

Acquiring is one conditional UPDATE on the seeded ``elastico_controller`` row (free, ours, or expired ->
ours), atomic on both backends. Each acquisition by a new holder bumps ``fence`` (a fencing token).
Every epoch's recording transaction first locks that row and checks holder and fence
(``verify``): a controller that stalled past its TTL while another took over finds a different holder
or fence and rolls back, so two controllers never both commit decisions from the same state.
Times are the controllers' wall clocks (UTC seconds); keep them NTP-synced and the TTL well above skew.
A holder that was a process on this host and is gone (killed) is taken over without waiting for the TTL.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from elastico_core.state.db import StateStore
from elastico_core.state.errors import LeaseLost
from elastico_core.state.models import DEFAULT_CONTROLLER, Controller, utcnow


def new_holder_id() -> str:
    """Unique per controller process: host, pid and a random suffix (pids are reused across restarts)."""
    return f"{socket.gethostname()[:100]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True, slots=True)
class Lease:
    name: str
    holder: str
    fence: int
    expires_unix: float


@dataclass(frozen=True, slots=True)
class LeaseState:
    """The lease row as read inside a recording transaction."""

    epoch: int
    prices: dict[str, float]
    cluster_hash: str | None


def dead_local_holder(holder: str | None) -> bool:
    """True when ``holder`` was a process on this host that no longer exists (a controller killed with SIGKILL).

    Lets a restarted controller take over at once instead of waiting out the TTL. A reused pid looks
    alive, which only means waiting for the TTL: the safe direction.
    """
    if not holder:
        return False
    host, _, rest = holder.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname()[:100] or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def acquire(store: StateStore, holder: str, ttl_s: float, name: str = DEFAULT_CONTROLLER) -> Lease | None:
    """Take or renew the lease; None if another live holder has it."""

    def tx(conn: Connection) -> Lease | None:
        now = time.time()
        c = Controller.__table__.c
        current = conn.execute(sa.select(c.holder).where(c.name == name)).scalar_one_or_none()
        dead = current if current != holder and dead_local_holder(current) else None
        result = conn.execute(
            sa.update(Controller)
            .where(
                c.name == name,
                sa.or_(c.holder.is_(None), c.holder == holder, c.expires_unix < now, c.holder == dead),
            )
            .values(
                fence=sa.case((c.holder == holder, c.fence), else_=c.fence + 1),
                holder=holder,
                expires_unix=now + ttl_s,
                heartbeat_at=utcnow(),
            )
        )
        if result.rowcount != 1:
            return None
        fence = conn.execute(sa.select(c.fence).where(c.name == name)).scalar_one()
        return Lease(name, holder, int(fence), now + ttl_s)

    return store.write(tx)


def holder_of(store: StateStore, name: str = DEFAULT_CONTROLLER) -> tuple[str | None, float]:
    def tx(conn: Connection) -> tuple[str | None, float]:
        row = conn.execute(sa.select(Controller.holder, Controller.expires_unix).where(Controller.name == name)).one()
        return row[0], float(row[1])

    return store.read(tx)


def verify(conn: Connection, store: StateStore, lease: Lease) -> LeaseState:
    """Inside a write transaction: lock the lease row and make sure ``lease`` is still the current one."""
    row = conn.execute(
        store.for_update(
            sa.select(Controller.holder, Controller.fence, Controller.epoch, Controller.prices, Controller.cluster_hash).where(
                Controller.name == lease.name
            )
        )
    ).one()
    holder, fence, epoch, prices, cluster_hash = row
    if holder != lease.holder or int(fence) != lease.fence:
        raise LeaseLost(f"the controller lease is now held by {holder!r} (fence {fence}); this controller's fence was {lease.fence}")
    return LeaseState(int(epoch), {str(k): float(v) for k, v in (prices or {}).items()}, cluster_hash)


def renew_in(conn: Connection, lease: Lease, ttl_s: float, **values: object) -> Lease:
    """Extend the lease (and set ``values`` on the row) inside a transaction that already ran ``verify``."""
    expires = time.time() + ttl_s
    conn.execute(
        sa.update(Controller)
        .where(Controller.name == lease.name)
        .values(expires_unix=expires, heartbeat_at=utcnow(), **values)
    )
    return Lease(lease.name, lease.holder, lease.fence, expires)


def release(store: StateStore, lease: Lease) -> None:
    """Give the lease up (clean shutdown) so a standby controller need not wait for the TTL."""

    def tx(conn: Connection) -> None:
        conn.execute(
            sa.update(Controller)
            .where(Controller.name == lease.name, Controller.holder == lease.holder, Controller.fence == lease.fence)
            .values(holder=None, expires_unix=0.0)
        )

    store.write(tx)
