"""nanobot-ai's sessions on nanobot-rs's append-only store, and memory search.

``FileSessionStore`` satisfies nanobot-ai 0.3.5's ``SessionStore`` protocol::

    from nanobot_rs import FileSessionStore
    manager = SessionManager(workspace, store=FileSessionStore(workspace))

The files stay nanobot-ai's own format, in its own place: take the package out and
nanobot-ai reads them as before.
"""

from __future__ import annotations

import copy
import warnings
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ._native import (
    InternalError,
    NanobotStoreError,
    SessionBusyError,
    SessionConflictError,
    SessionDamagedError,
    SessionFiles,
    StoreIOError,
    TurnLease,
    __version__,
)

from . import _native

if TYPE_CHECKING:
    from nanobot.session.manager import Session

__all__ = [
    "FileSessionStore",
    "MemorySearch",
    "NanobotStoreError",
    "SessionConflictError",
    "SessionBusyError",
    "SessionDamagedError",
    "StoreIOError",
    "InternalError",
    "SessionRepairWarning",
    "TurnLease",
    "default_sessions_root",
    "__version__",
]

# What a session saved or loaded here carries: (epoch, offset, the message objects the file
# holds). nanobot-ai's Session is a plain dataclass, so the token rides along as an
# attribute, outside its fields (not in repr, eq or asdict), and dies with the session.
_TOKEN = "_nanobot_rs_token"
# The metadata as last saved, so a merge after a conflict knows which keys this copy changed.
_SAVED_METADATA = "_nanobot_rs_saved_metadata"
# Stands in the token for "the file holds something else": the next save rewrites it.
_REWRITE = object()
# How many times a merging save takes over a newer stored version before it gives up.
_MERGE_ATTEMPTS = 8


class SessionRepairWarning(UserWarning):
    """A session file was damaged (a torn last line, a corrupt line) and was repaired on
    load; the damaged bytes are kept in ``<file>.damaged`` beside it."""


def default_sessions_root() -> Path:
    """Where nanobot-ai keeps sessions (``~/.nanobot/sessions`` unless configured)."""
    try:
        from nanobot.config.paths import get_data_dir
    except ImportError:
        return Path.home() / ".nanobot" / "sessions"
    return get_data_dir() / "sessions"


class FileSessionStore:
    """nanobot-ai's ``SessionStore`` on nanobot-rs's append-only file store.

    A save appends what is new (a whole-file rewrite only when messages were removed or
    replaced); a save is refused with ``SessionConflictError`` when another process or copy
    changed the session since this one loaded it, unless ``on_conflict="merge"``, which
    takes over the stored version and keeps both (see ``rebase``). Blocking calls release
    the GIL.

    ``workspace`` and ``sessions_root`` locate the files exactly as nanobot-ai's
    ``SessionManager`` does; ``dir`` names a sessions directory directly instead.
    """

    def __init__(
        self,
        workspace: str | Path,
        *,
        sessions_root: str | Path | None = None,
        dir: str | Path | None = None,
        on_conflict: Literal["raise", "merge"] = "raise",
    ) -> None:
        if on_conflict not in ("raise", "merge"):
            raise ValueError(f'on_conflict must be "raise" or "merge", not {on_conflict!r}')
        workspace = Path(workspace).expanduser().resolve(strict=False)
        root = Path(sessions_root) if sessions_root is not None else default_sessions_root()
        root = root.expanduser().resolve(strict=False)
        if dir is None and (root == workspace or root.is_relative_to(workspace)):
            raise ValueError(
                "session storage must be outside the agent workspace (nanobot-ai refuses it too)"
            )
        self._files = SessionFiles(workspace, root, None if dir is None else Path(dir))
        self.on_conflict = on_conflict

    @property
    def sessions_dir(self) -> Path:
        """The directory holding the session files."""
        return Path(self._files.dir)

    def get_session_path(self, key: str) -> Path:
        """The file of ``key``."""
        return Path(self._files.path_of(key))

    # --- nanobot-ai's SessionStore protocol ---

    def load(self, key: str) -> Session | None:
        """The session, or ``None`` when there is none."""
        payload = self._files.load(key)
        if payload is None:
            return None
        _warn_repairs(key, payload["repairs"])
        return _session_from(key, payload)

    def save(self, session: Session, *, fsync: bool = False) -> None:
        """Writes what changed since ``session`` was loaded or saved; with ``fsync``, waits
        for the disk."""
        for _ in range(_MERGE_ATTEMPTS):
            try:
                self._save_once(session, fsync)
                return
            except SessionConflictError:
                if self.on_conflict != "merge":
                    raise
                self.rebase(session)
        raise SessionBusyError(
            f"session {session.key!r} kept changing under {_MERGE_ATTEMPTS} merges; try again"
        )

    def delete(self, key: str) -> bool:
        """Removes the session; ``False`` when there was none."""
        deleted = self._files.delete(key)
        for path in _nanobot_sidecars(self.sessions_dir, key):
            try:
                path.unlink()
                deleted = True
            except FileNotFoundError:
                pass
        return deleted

    def read(self, key: str) -> dict[str, Any] | None:
        """The session as a plain payload (nanobot-ai's ``SessionPayload``)."""
        payload = self._files.load(key)
        if payload is None:
            return None
        _warn_repairs(key, payload["repairs"])
        _migrate_legacy(payload["messages"], payload["metadata"])
        return {
            "key": payload["key"],
            "created_at": payload["created_at"],
            "updated_at": payload["updated_at"],
            "metadata": payload["metadata"],
            "messages": payload["messages"],
        }

    def read_metadata(self, key: str) -> dict[str, Any] | None:
        """The session's metadata without its messages (``SessionMetadataPayload``)."""
        payload = self.read(key)
        if payload is None:
            return None
        del payload["messages"]
        return payload

    def update_metadata(
        self, key: str, updates: dict[str, Any], *, fsync: bool = False
    ) -> bool:
        """Merges ``updates`` into the stored metadata (one appended record, whatever the
        session's length); ``False`` when there is no such session."""
        return self._files.update_metadata(key, updates, fsync)

    def list_sessions(self) -> list[dict[str, Any]]:
        """Every session (``SessionInfo``), the most recently updated first."""
        rows = self._files.list()
        for row in rows:
            del row["message_count"]
        return sorted(rows, key=lambda row: row["updated_at"], reverse=True)

    # --- beyond the protocol ---

    def lock_turn(self, key: str, timeout: float = 0.0) -> TurnLease:
        """Takes ``key``'s turn lock (``with store.lock_turn(key): ...``), waiting up to
        ``timeout`` seconds; ``SessionBusyError`` when another turn, in this process or
        another, holds it. nanobot-rs's own turns take the same lock."""
        return self._files.lock_turn(key, timeout)

    def rebase(self, session: Session) -> None:
        """After a ``SessionConflictError``: makes ``session`` the stored version plus what
        this copy added since its last save (after the stored messages, in order), its
        metadata changes (keys it changed win) and its archiving progress (the pointer only
        moves forward). Save it again afterwards."""
        payload = self._files.load(session.key)
        token = session.__dict__.get(_TOKEN)
        saved = list(token[2]) if token is not None else []
        unsaved = _unsaved(session.messages, saved)
        if payload is None:
            session.messages[:] = [*saved, *unsaved]
            session.__dict__.pop(_TOKEN, None)
            return
        before = session.__dict__.get(_SAVED_METADATA, {})
        stored = _session_from(session.key, payload)
        metadata = stored.metadata
        for name, value in session.metadata.items():
            if before.get(name, _REWRITE) != value:
                metadata[name] = value
        for name in before:
            if name not in session.metadata:
                metadata.pop(name, None)
        ours = min(session.last_consolidated, len(saved))
        session.messages = [*stored.messages, *unsaved]
        session.metadata = metadata
        session.last_consolidated = max(stored.last_consolidated, ours)
        session.updated_at = max(stored.updated_at, session.updated_at)
        session.created_at = stored.created_at
        session.__dict__[_TOKEN] = stored.__dict__[_TOKEN]
        session.__dict__[_SAVED_METADATA] = stored.__dict__[_SAVED_METADATA]

    def _save_once(self, session: Session, fsync: bool) -> None:
        provider_state = getattr(session, "provider_state", None)
        meta = {
            "created_at": session.created_at.isoformat(),
            "updated_at": session.updated_at.isoformat(),
            "metadata": session.metadata,
            "last_consolidated": session.last_consolidated,
            "provider_state": (
                provider_state.to_private_record() if provider_state is not None else None
            ),
        }
        token = session.__dict__.get(_TOKEN)
        session.__dict__[_TOKEN] = self._files.save(
            session.key, session.messages, meta, token, fsync
        )
        session.__dict__[_SAVED_METADATA] = copy.deepcopy(session.metadata)


class MemorySearch:
    """A workspace's memory searched as ``nanobot memory search`` searches it: the history
    journal, the memory files and the sessions, by words (a SQLite index beside the files,
    brought up to date before each search). Blocking; releases the GIL."""

    def __init__(self, workspace: str | Path, *, sessions_root: str | Path | None = None) -> None:
        native = getattr(_native, "MemorySearch", None)
        if native is None:  # pragma: no cover - a wheel built without the `search` feature
            raise NanobotStoreError("this build of nanobot_rs has no memory search")
        root = Path(sessions_root) if sessions_root is not None else default_sessions_root()
        self._native = native(
            Path(workspace).expanduser().resolve(strict=False),
            root.expanduser().resolve(strict=False),
        )

    def search(
        self,
        query: str,
        sources: list[str] | None = None,
        limit: int = 8,
        *,
        since: str | None = None,
    ) -> list[dict[str, Any]]:
        """The hits, best first: dicts with ``source``, ``kind``, ``at``, ``score`` and
        ``snippet``. ``sources`` picks among ``history``, ``memory`` and ``sessions``;
        ``since`` is a ``YYYY-MM-DD`` date."""
        return self._native.search(query, sources, limit, since)

    def search_for_model(
        self,
        query: str,
        sources: list[str] | None = None,
        limit: int = 8,
        *,
        since: str | None = None,
    ) -> str:
        """The same hits as the text the ``search_memory`` tool gives a model."""
        return self._native.search_for_model(query, sources, limit, since)


def _session_from(key: str, payload: dict[str, Any]) -> Session:
    from nanobot.session.manager import Session

    session = Session(
        key=key,
        messages=payload["messages"],
        created_at=datetime.fromisoformat(payload["created_at"]),
        updated_at=datetime.fromisoformat(payload["updated_at"]),
        metadata=payload["metadata"],
        last_consolidated=payload["last_consolidated"],
        provider_state=_provider_state(payload["provider_state"]),
    )
    token = payload["token"]
    if _migrate_legacy(session.messages, session.metadata):
        # nanobot-ai rewrote legacy records in memory: the next save writes them back.
        session.provider_state = None
        token = (token[0], token[1], [_REWRITE])
    session.__dict__[_TOKEN] = token
    session.__dict__[_SAVED_METADATA] = copy.deepcopy(session.metadata)
    return session


def _provider_state(record: Any) -> Any:
    if record is None:
        return None
    try:
        from nanobot.providers.base import ProviderConversationState
    except ImportError:  # pragma: no cover
        return None
    return ProviderConversationState.from_private_record(record)


def _migrate_legacy(messages: list[dict[str, Any]], metadata: dict[str, Any]) -> bool:
    """nanobot-ai's own upgrade of old `exec` tool records, applied as its store does."""
    try:
        from nanobot.session.manager import _migrate_legacy_exec_session_records
    except ImportError:  # pragma: no cover
        return False
    return bool(_migrate_legacy_exec_session_records(messages, metadata))


def _unsaved(messages: list[Any], saved: list[Any]) -> list[Any]:
    """The messages of ``messages`` the file does not hold (by identity)."""
    if len(saved) <= len(messages) and all(a is b for a, b in zip(saved, messages)):
        return messages[len(saved) :]
    held = {id(m) for m in saved}
    return [m for m in messages if id(m) not in held]


def _nanobot_sidecars(sessions_dir: Path, key: str) -> list[Path]:
    """nanobot-ai's own files beside a session (its runtime checkpoint), for a delete."""
    try:
        from nanobot.session import manager
    except ImportError:  # pragma: no cover
        return []
    suffix = getattr(manager, "_RUNTIME_CHECKPOINT_SUFFIX", None)
    if suffix is None:
        return []
    return [sessions_dir / f"{manager.JsonlSessionStore.storage_key(key)}{suffix}"]


def _warn_repairs(key: str, repairs: list[str]) -> None:
    for repair in repairs:
        warnings.warn(f"session {key!r}: {repair}", SessionRepairWarning, stacklevel=3)
