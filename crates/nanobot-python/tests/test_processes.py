"""Two Python processes on one session: nanobot-ai's own store silently loses a turn; ours
refuses the stale save (or merges it) and loses nothing. And the turn lock across processes,
with the GIL released while a call waits."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from nanobot.session.manager import SessionManager

import nanobot_rs
from nanobot_rs import FileSessionStore

# One writer: loads the session, says it is ready, waits for the go, adds its turn, saves.
WRITER = r"""
import json, sys, time
from pathlib import Path
from nanobot.session.manager import SessionManager
import nanobot_rs
workspace, root, kind, name, go = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4], Path(sys.argv[5])
store = None if kind == "nanobot" else nanobot_rs.FileSessionStore(workspace, sessions_root=root, on_conflict=kind)
manager = SessionManager(workspace, store=store, sessions_root=root)
session = manager.get_or_create("telegram:7")
print("ready", flush=True)
while not go.exists():
    time.sleep(0.001)
session.add_message("user", f"question from {name}")
session.add_message("assistant", f"answer to {name}")
outcome = "saved"
try:
    manager.save(session)
except nanobot_rs.SessionConflictError:
    outcome = "conflict"
    manager._store.rebase(session)
    manager.save(session)
print(json.dumps({"name": name, "outcome": outcome}), flush=True)
"""


def race(places: tuple[Path, Path], kind: str, tmp_path: Path) -> tuple[list[str], list[dict]]:
    """Two writers saving one session at once; the stored contents and what each said."""
    workspace, root = places
    manager = SessionManager(workspace, sessions_root=root)
    session = manager.get_or_create("telegram:7")
    session.add_message("user", "hello")
    session.add_message("assistant", "hi")
    manager.save(session)
    go = tmp_path / f"go-{kind}"
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(workspace), str(root), kind, name, str(go)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for name in ("A", "B")
    ]
    for writer in writers:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "ready", writer.stderr.read() if writer.stderr else ""
    go.touch()
    said = []
    for writer in writers:
        out, err = writer.communicate(timeout=60)
        assert writer.returncode == 0, err
        said.append(json.loads(out.strip().splitlines()[-1]))
    stored = SessionManager(workspace, sessions_root=root).get_or_create("telegram:7")
    return [m["content"] for m in stored.messages], said


def test_nanobots_own_store_loses_a_turn(places, tmp_path):
    texts, said = race(places, "nanobot", tmp_path)
    assert all(s["outcome"] == "saved" for s in said), "nanobot-ai reports no problem"
    turns = [t for t in texts if t.startswith("question from")]
    assert len(turns) == 1, f"one writer's turn is silently gone: {texts}"


def test_ours_refuses_the_stale_save_and_loses_nothing(places, tmp_path):
    texts, said = race(places, "raise", tmp_path)
    assert sorted(s["outcome"] for s in said) == ["conflict", "saved"], said
    assert texts[:2] == ["hello", "hi"]
    assert sorted(texts[2:]) == sorted(["question from A", "answer to A", "question from B", "answer to B"])
    # Each turn stays whole: a question is followed by its own answer.
    for name in ("A", "B"):
        at = texts.index(f"question from {name}")
        assert texts[at + 1] == f"answer to {name}"


def test_merge_mode_keeps_both_turns_without_an_error(places, tmp_path):
    texts, said = race(places, "merge", tmp_path)
    assert all(s["outcome"] == "saved" for s in said), said
    assert len(texts) == 6 and {"question from A", "question from B"} <= set(texts)


HOLDER = r"""
import sys, time
import nanobot_rs
store = nanobot_rs.FileSessionStore(sys.argv[1], sessions_root=sys.argv[2])
with store.lock_turn("telegram:7"):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_the_turn_lock_is_busy_across_processes_and_waits_without_the_gil(places):
    workspace, root = places
    store = FileSessionStore(workspace, sessions_root=root)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(workspace), str(root)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(nanobot_rs.SessionBusyError):
            store.lock_turn("telegram:7")

        # A thread waits on the lock for a second; this thread keeps running meanwhile.
        failed: list[BaseException] = []

        def wait() -> None:
            try:
                store.lock_turn("telegram:7", timeout=1.0)
            except BaseException as error:  # noqa: BLE001 - reported below
                failed.append(error)

        waiter = threading.Thread(target=wait)
        started = time.monotonic()
        waiter.start()
        ticks = 0
        while waiter.is_alive():
            ticks += 1
            time.sleep(0.001)
        assert time.monotonic() - started >= 0.9
        assert ticks > 100, "the GIL was held while waiting"
        assert isinstance(failed[0], nanobot_rs.SessionBusyError)
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(timeout=30)
    with store.lock_turn("telegram:7", timeout=5.0) as lease:
        assert lease.held
    assert not lease.held
