"""nanobot-ai's own agent (AgentLoop, through its Nanobot facade) on our store, end to end
against a loopback scripted model: two turns, the second calling our `search_memory` plugin,
every message on our files and readable by nanobot-ai's own store."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from nanobot.agent.loop import AgentLoop
from nanobot.agent.tools.registry import ToolRegistry
from nanobot.config.loader import load_config, resolve_config_env_vars
from nanobot.nanobot import Nanobot
from nanobot.session.manager import SessionManager

from nanobot_rs import FileSessionStore
from nanobot_rs.tool import SearchMemoryTool


def agent(places: tuple[Path, Path], model_url: str, tmp_path: Path) -> tuple[Nanobot, FileSessionStore]:
    workspace, root = places
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps({
        "agents": {"defaults": {"workspace": str(workspace), "model": "test-model", "provider": "custom"}},
        "providers": {"custom": {"apiKey": "sk-test", "apiBase": model_url}},
    }))
    config = resolve_config_env_vars(load_config(config_path), config_path=config_path)
    store = FileSessionStore(config.workspace_path, sessions_root=root)
    manager = SessionManager(config.workspace_path, store=store, sessions_root=root)
    loop = AgentLoop.from_config(config, tool_registry=ToolRegistry(), session_manager=manager)
    return Nanobot(loop, config=config), store


def test_two_agent_turns_on_our_store(places, tmp_path, scripted_model):
    search_call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "search_memory", "arguments": json.dumps({"query": "code word"})}}]}
    model = scripted_model([
        {"role": "assistant", "content": "Noted: PELICAN-42."},
        search_call,
        {"role": "assistant", "content": "Your code word is PELICAN-42."},
    ])
    bot, store = agent(places, model.url, tmp_path)

    async def two_turns() -> tuple[str, str, list[str]]:
        try:
            first = await bot.run("My code word is PELICAN-42.", session_key="cli:direct")
            second = await bot.run("What is my code word?", session_key="cli:direct")
            return first.content, second.content, sorted(bot._loop.tools.tool_names)
        finally:
            await bot.aclose()

    first, second, tools = asyncio.run(two_turns())
    assert first == "Noted: PELICAN-42."
    assert second == "Your code word is PELICAN-42."
    assert "search_memory" in tools, "the plugin registered through nanobot.tools"

    # The second request carried the first turn, loaded back through our store.
    texts = json.dumps(model.requests[1]["messages"])
    assert "My code word is PELICAN-42." in texts and "Noted: PELICAN-42." in texts
    # The tool result the model got came from our search, over the session our store wrote.
    tool_results = [m for m in model.requests[2]["messages"] if m.get("role") == "tool"]
    assert tool_results and "<memory_search_results" in str(tool_results[-1]["content"])
    assert "PELICAN-42" in str(tool_results[-1]["content"])

    # Our file holds both turns and the tool exchange; nanobot-ai's own store reads it.
    workspace, root = places
    ours = store.load("cli:direct")
    theirs = SessionManager(workspace, sessions_root=root).get_or_create("cli:direct")
    assert ours is not None and ours.messages == theirs.messages
    roles = [m["role"] for m in theirs.messages]
    assert roles.count("user") == 2 and "tool" in roles
    assert theirs.messages[-1]["content"] == "Your code word is PELICAN-42."


def test_the_plugin_searches_a_workspace_directly(places, tmp_path):
    workspace, root = places
    manager = SessionManager(workspace, store=FileSessionStore(workspace, sessions_root=root), sessions_root=root)
    session = manager.get_or_create("telegram:9")
    session.add_message("user", "Lina is allergic to peanuts, remember that.")
    session.add_message("assistant", "I will remember.")
    manager.save(session)
    (workspace / "memory").mkdir(parents=True, exist_ok=True)
    (workspace / "memory" / "MEMORY.md").write_text("# Memory\n\n- Ada lives in Berlin.\n")

    tool = SearchMemoryTool(workspace, root)
    said = asyncio.run(tool.execute(query="peanuts allergy"))
    assert "<memory_search_results" in said and "peanuts" in said
    said = asyncio.run(tool.execute(query="Berlin", sources=["memory"]))
    assert "Berlin" in said
    refused = asyncio.run(tool.execute(query="x", sources=["nowhere"]))
    assert str(refused).startswith("Error") or "failed" in str(refused)


def test_memory_search_returns_hits_as_dicts(places):
    from nanobot_rs import MemorySearch

    workspace, root = places
    manager = SessionManager(workspace, store=FileSessionStore(workspace, sessions_root=root), sessions_root=root)
    session = manager.get_or_create("cli:facts")
    session.add_message("user", "The boat is called Saltmarsh.")
    manager.save(session)
    hits = MemorySearch(workspace, sessions_root=root).search("boat called", sources=["sessions"], limit=3)
    assert hits and set(hits[0]) >= {"source", "kind", "score", "snippet"}
    assert "Saltmarsh" in hits[0]["snippet"] and hits[0]["kind"] == "sessions"
    try:
        MemorySearch(workspace, sessions_root=root).search("", limit=3)
    except ValueError as error:
        assert "non-empty" in str(error)
    else:
        raise AssertionError("an empty query is refused")
