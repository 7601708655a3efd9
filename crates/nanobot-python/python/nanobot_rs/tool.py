"""``search_memory`` for nanobot-ai's agent: a tool plugin (entry-point group
``nanobot.tools``) over the agent's workspace, searched by nanobot-rs.

nanobot-ai loads it by itself once the wheel is installed; nothing to configure. The model
gets the hits in a ``<memory_search_results>`` envelope, as nanobot-rs's own agent does.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from nanobot.agent.tools.base import Tool

from . import MemorySearch, NanobotStoreError, default_sessions_root

_SOURCES = ["history", "memory", "sessions"]
_MAX_LIMIT = 20


class SearchMemoryTool(Tool):
    """Searches the agent's long-term memory: the history journal, MEMORY.md / USER.md /
    SOUL.md, and past sessions."""

    config_key = "search_memory"

    def __init__(self, workspace: str | Path, sessions_root: str | Path | None = None):
        self._workspace = Path(workspace)
        self._sessions_root = Path(sessions_root) if sessions_root else default_sessions_root()
        self._search: Any = None

    @classmethod
    def create(cls, ctx: Any) -> SearchMemoryTool:
        sessions = getattr(ctx, "sessions", None)
        sessions_dir = getattr(sessions, "sessions_dir", None)
        # nanobot-ai keeps a workspace's sessions in <sessions root>/<workspace id>/.
        root = Path(sessions_dir).parent if sessions_dir is not None else None
        return cls(ctx.workspace, root)

    @property
    def name(self) -> str:
        return "search_memory"

    @property
    def description(self) -> str:
        return (
            "Search long-term memory (past conversations archived to the history journal, "
            "the memory files, and earlier sessions) for facts the user told you before. "
            "Use it when the answer may be in something said earlier."
        )

    @property
    def parameters(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for, in words."},
                "sources": {
                    "type": "array",
                    "items": {"type": "string", "enum": _SOURCES},
                    "description": "Where to look (all when omitted).",
                },
                "limit": {"type": "integer", "minimum": 1, "maximum": _MAX_LIMIT,
                          "description": "How many hits at most (default 8)."},
            },
            "required": ["query"],
        }

    @property
    def read_only(self) -> bool:
        return True

    async def execute(self, **kwargs: Any) -> Any:
        query = kwargs.get("query")
        if not isinstance(query, str) or not query.strip():
            return self.error("search_memory needs a non-empty query")
        sources = kwargs.get("sources") or None
        limit = kwargs.get("limit") or 8
        try:
            return await asyncio.to_thread(self._run, query, sources, int(limit))
        except (NanobotStoreError, ValueError) as error:
            return self.error(f"search_memory failed: {error}")

    def _run(self, query: str, sources: list[str] | None, limit: int) -> str:
        if self._search is None:
            self._search = MemorySearch(self._workspace, sessions_root=self._sessions_root)
        return self._search.search_for_model(query, sources=sources, limit=limit)
