"""Type stubs of the compiled core (`nanobot_rs._native`); use the classes of `nanobot_rs`."""

from os import PathLike
from pathlib import Path
from typing import Any, TypedDict

__version__: str

class NanobotStoreError(Exception): ...
class SessionConflictError(NanobotStoreError): ...
class SessionBusyError(NanobotStoreError): ...
class SessionDamagedError(NanobotStoreError): ...
class StoreIOError(NanobotStoreError): ...
class InternalError(NanobotStoreError): ...

Token = tuple[int, int, list[Any]]

class LoadedPayload(TypedDict):
    key: str
    created_at: str
    updated_at: str
    metadata: dict[str, Any]
    last_consolidated: int
    provider_state: Any | None
    messages: list[dict[str, Any]]
    token: Token
    repairs: list[str]

class SessionRow(TypedDict):
    key: str
    created_at: str
    updated_at: str
    title: str
    preview: str
    path: str
    message_count: int

class TurnLease:
    @property
    def held(self) -> bool: ...
    def release(self) -> None: ...
    def __enter__(self) -> TurnLease: ...
    def __exit__(self, kind: object, value: object, traceback: object) -> bool: ...

class SessionFiles:
    def __init__(
        self,
        workspace: str | PathLike[str],
        sessions_root: str | PathLike[str],
        dir: str | PathLike[str] | None = None,
    ) -> None: ...
    @property
    def dir(self) -> Path: ...
    def path_of(self, key: str) -> Path: ...
    def load(self, key: str) -> LoadedPayload | None: ...
    def save(
        self,
        key: str,
        messages: list[dict[str, Any]],
        meta: dict[str, Any],
        token: Token | None,
        fsync: bool = False,
    ) -> Token: ...
    def update_metadata(self, key: str, updates: dict[str, Any], fsync: bool = False) -> bool: ...
    def delete(self, key: str) -> bool: ...
    def list(self) -> list[SessionRow]: ...
    def lock_turn(self, key: str, timeout: float = 0.0) -> TurnLease: ...

class MemorySearch:
    def __init__(self, workspace: str | PathLike[str], sessions_root: str | PathLike[str]) -> None: ...
    def search(
        self, query: str, sources: list[str] | None = None, limit: int = 8, since: str | None = None
    ) -> list[dict[str, Any]]: ...
    def search_for_model(
        self, query: str, sources: list[str] | None = None, limit: int = 8, since: str | None = None
    ) -> str: ...

def _panic_for_tests() -> None: ...
