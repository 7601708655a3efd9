"""nanobot-ai 0.3.5's SessionManager on FileSessionStore: the behaviours our interop checks
use, on files we wrote and on files nanobot-ai wrote; the files stay nanobot-ai's."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
from conftest import every_field_messages
from nanobot.session.manager import JsonlSessionStore, Session, SessionManager

import nanobot_rs
from nanobot_rs import FileSessionStore, SessionConflictError


def ours(places: tuple[Path, Path], **options) -> SessionManager:
    workspace, root = places
    store = FileSessionStore(workspace, sessions_root=root, **options)
    return SessionManager(workspace, store=store, sessions_root=root)


def theirs(places: tuple[Path, Path]) -> SessionManager:
    workspace, root = places
    return SessionManager(workspace, sessions_root=root)


def fill(manager: SessionManager, key: str) -> Session:
    """create, messages with every field, metadata, pointer: saved in three steps."""
    session = manager.get_or_create(key)
    messages = every_field_messages()
    session.messages.extend(copy.deepcopy(messages[:2]))
    manager.save(session)
    session.messages.extend(copy.deepcopy(messages[2:]))
    session.metadata["title"] = "Every field"
    session.metadata["_last_summary"] = {"text": "s", "last_active": "2026-08-20T05:21:00"}
    manager.save(session)
    session.last_consolidated = 2
    session.add_message("user", "and one more")
    manager.save(session)
    return session


def assert_same(a: Session, b: Session) -> None:
    assert a.messages == b.messages
    assert a.metadata == b.metadata
    assert a.last_consolidated == b.last_consolidated
    assert a.created_at == b.created_at
    assert a.updated_at == b.updated_at


def test_our_files_round_trip_and_stay_nanobots(places):
    written = fill(ours(places), "telegram:42")

    reloaded = ours(places).get_or_create("telegram:42")
    assert_same(reloaded, written)
    assert reloaded.messages[3]["big"] == 2**63 + 5
    assert reloaded.messages[3]["unknown_future_field"] == {"kept": True}

    by_nanobot = theirs(places).get_or_create("telegram:42")
    assert_same(by_nanobot, written)
    assert JsonlSessionStore(places[0], sessions_root=places[1]).read_metadata("telegram:42")["metadata"] == written.metadata


def test_nanobot_files_load_here_and_our_appends_read_there(places):
    written = fill(theirs(places), "slack:C1")

    manager = ours(places)
    session = manager.get_or_create("slack:C1")
    assert_same(session, written)
    session.add_message("assistant", "appended by nanobot_rs", reasoning_content="r2")
    manager.save(session)

    back = theirs(places).get_or_create("slack:C1")
    assert back.messages == session.messages
    assert back.messages[-1]["content"] == "appended by nanobot_rs"
    assert back.last_consolidated == 2


def test_metadata_list_read_delete(places):
    manager = ours(places)
    fill(manager, "cli:one")
    other = manager.get_or_create("cli:two")
    other.add_message("user", "second session")
    manager.save(other)

    rows = manager.list_sessions()
    assert [r["key"] for r in rows] == ["cli:two", "cli:one"]
    assert set(rows[0]) == {"key", "created_at", "updated_at", "title", "preview", "path"}
    assert rows[1]["title"] == "Every field" and rows[1]["preview"] == "héllo 日本 🌍"
    assert rows == theirs(places).list_sessions()

    assert manager.update_session_metadata("cli:one", {"pinned": True, "title": "Renamed"})
    assert manager.read_session_metadata("cli:one")["metadata"]["title"] == "Renamed"
    assert not manager.update_session_metadata("cli:missing", {"x": 1})
    assert theirs(places).read_session_metadata("cli:one")["metadata"]["pinned"] is True

    payload = manager.read_session_file("cli:one")
    assert payload == theirs(places).read_session_file("cli:one")
    assert manager.read_session_file("cli:missing") is None

    assert manager.delete_session("cli:one")
    assert not manager.delete_session("cli:one")
    assert [r["key"] for r in theirs(places).list_sessions()] == ["cli:two"]


def test_a_save_appends_and_a_clear_rewrites(places):
    manager = ours(places)
    session = fill(manager, "cli:grow")
    path = manager._store.get_session_path("cli:grow")
    before = path.read_bytes()
    inode = os.stat(path).st_ino

    session.add_message("user", "one more line")
    manager.save(session)
    after = path.read_bytes()
    assert os.stat(path).st_ino == inode, "an append keeps the file"
    line1 = before.index(b"\n") + 1  # line 1 (the metadata nanobot-ai lists) is updated in place
    assert after[line1:len(before)] == before[line1:], "earlier messages are not written again"
    assert after.count(b"\n") == before.count(b"\n") + 1

    session.clear()
    manager.save(session)
    assert theirs(places).get_or_create("cli:grow").messages == []
    assert os.stat(path).st_ino != inode, "a clear is an atomic rewrite"


def test_a_stale_copy_is_refused_not_lost(places):
    first, second = ours(places), ours(places)
    fill(first, "cli:race")
    a = first.get_or_create("cli:race")
    b = second.get_or_create("cli:race")
    a.add_message("user", "from a")
    first.save(a)
    b.add_message("user", "from b")
    with pytest.raises(SessionConflictError):
        second.save(b)
    assert [m["content"] for m in theirs(places).get_or_create("cli:race").messages][-1] == "from a"

    second._store.rebase(b)
    second.save(b)
    texts = [m["content"] for m in theirs(places).get_or_create("cli:race").messages]
    assert texts[-2:] == ["from a", "from b"]


def test_merge_mode_keeps_both_writers(places):
    first, second = ours(places, on_conflict="merge"), ours(places, on_conflict="merge")
    fill(first, "cli:merge")
    a, b = first.get_or_create("cli:merge"), second.get_or_create("cli:merge")
    a.add_message("user", "from a")
    a.metadata["a"] = 1
    b.add_message("user", "from b")
    b.metadata["b"] = 2
    first.save(a)
    second.save(b)
    stored = theirs(places).get_or_create("cli:merge")
    assert [m["content"] for m in stored.messages][-2:] == ["from a", "from b"]
    assert stored.metadata["a"] == 1 and stored.metadata["b"] == 2
    assert b.messages == stored.messages


def test_a_new_session_over_an_existing_file_is_a_conflict(places):
    manager = ours(places)
    fill(manager, "cli:taken")
    with pytest.raises(SessionConflictError):
        manager._store.save(Session(key="cli:taken"))
    assert len(theirs(places).get_or_create("cli:taken").messages) == 5


def test_bad_input_is_refused_and_writes_nothing(places):
    manager = ours(places)
    session = fill(manager, "cli:bad")
    path = manager._store.get_session_path("cli:bad")
    before = path.read_bytes()
    session.add_message("user", "not json", when=object())
    with pytest.raises(TypeError, match="not JSON serializable"):
        manager.save(session)
    session.messages[-1] = {"role": "user", "content": float("nan")}
    with pytest.raises(ValueError, match="NaN"):
        manager.save(session)
    assert path.read_bytes() == before
    with pytest.raises(ValueError):
        manager._store.load("")


def test_a_panic_is_an_exception_and_python_lives_on(places):
    with pytest.raises(nanobot_rs.InternalError, match="panic"):
        nanobot_rs._native._panic_for_tests()
    assert issubclass(nanobot_rs.InternalError, Exception)
    fill(ours(places), "cli:after-panic")


def test_io_errors_keep_their_cause(places, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(nanobot_rs.StoreIOError) as raised:
        FileSessionStore(places[0], dir=blocker / "sessions")
    assert isinstance(raised.value.__cause__, OSError)
    assert isinstance(raised.value, nanobot_rs.NanobotStoreError)


def test_a_torn_line_is_kept_aside_and_reported(places):
    manager = ours(places)
    fill(manager, "cli:torn")
    path = manager._store.get_session_path("cli:torn")
    with open(path, "ab") as f:
        f.write(b'{"role": "assistant", "content": "cut mid-wri')
    with pytest.warns(nanobot_rs.SessionRepairWarning, match="torn"):
        session = ours(places).get_or_create("cli:torn")
    assert len(session.messages) == 5
    sidecar = path.with_name(path.name + ".damaged")
    assert b"cut mid-wri" in sidecar.read_bytes()


def test_provider_state_round_trips(places):
    from nanobot.providers.base import ProviderConversationState

    manager = theirs(places)
    session = manager.get_or_create("cli:state")
    session.add_message("user", "hi")
    record = {"kind": "k", "provider": "p", "model": "m", "version": 1,
              "payload": {"encrypted_content": "SECRET"}, "pending_messages": []}
    session.provider_state = ProviderConversationState.from_private_record(record)
    assert session.provider_state is not None
    manager.save(session)

    mine = ours(places)
    loaded = mine.get_or_create("cli:state")
    assert loaded.provider_state is not None
    assert loaded.provider_state.to_private_record() == session.provider_state.to_private_record()
    loaded.add_message("assistant", "hello")
    mine.save(loaded)
    lines = [json.loads(l) for l in manager._store.get_session_path("cli:state").read_text().splitlines() if l.strip()]
    assert any(l.get("_type") == "provider_state" for l in lines)
    assert theirs(places).get_or_create("cli:state").provider_state is not None


def test_threads_share_one_store(places):
    import threading

    manager = ours(places)
    store = manager._store
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            session = Session(key=f"thread:{n}")
            for i in range(30):
                session.add_message("user", f"{n}-{i}")
                store.save(session, fsync=(i == 29))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    rows = theirs(places).list_sessions()
    assert len(rows) == 8
    for n in range(8):
        stored = theirs(places).get_or_create(f"thread:{n}")
        assert [m["content"] for m in stored.messages] == [f"{n}-{i}" for i in range(30)]
