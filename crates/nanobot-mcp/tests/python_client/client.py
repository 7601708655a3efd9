"""The official MCP Python SDK against nanobot-rs memory, as an MCP host reaches it.

Usage:
  client.py stdio NANOBOT WORKSPACE CANARY [ARGS...]   `nanobot mcp` started on stdio
  client.py http URL SECRET CANARY SESSION            `/mcp` of `nanobot serve`, with a key

Leaves a note holding the canary, lists the tools, calls each one, reads the resources,
checks a bad argument's error, and prints one JSON report. Exit code 0 only when every
check held.
"""

import asyncio
import contextlib
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError

EXPECTED = [
    "search_memory",
    "read_memory",
    "recent_history",
    "list_sessions",
    "read_session",
    "remember",
    "memory_log",
    "memory_diff",
]


@contextlib.asynccontextmanager
async def connect(mode: str, first: str, second: str, extra: list[str]):
    """The (read, write) streams of a stdio or a streamable HTTP connection."""
    if mode == "stdio":
        params = StdioServerParameters(
            command=first, args=["--workspace", second, *extra, "mcp"]
        )
        async with stdio_client(params) as (read, write):
            yield read, write
    else:
        headers = {"Authorization": f"Bearer {second}"}
        async with streamablehttp_client(first, headers=headers) as (read, write, _):
            yield read, write


async def main(mode: str, first: str, second: str, canary: str, session_key: str,
               extra: list[str]) -> dict:
    report: dict = {"checks": {}, "transport": mode}
    checks = report["checks"]
    async with connect(mode, first, second, extra) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            report["server"] = init.serverInfo.name
            report["protocol"] = init.protocolVersion
            kept = await session.call_tool("remember", {"note": f"Python note {canary}"})
            checks["remember keeps a note"] = (kept.structuredContent or {}).get("cursor", 0) > 0
            tools = (await session.list_tools()).tools
            names = [t.name for t in tools]
            checks["tools listed"] = names == EXPECTED
            checks["every tool has an output schema"] = all(t.outputSchema for t in tools)

            found = await session.call_tool("search_memory", {"query": canary})
            text = "".join(c.text for c in found.content if c.type == "text")
            checks["search finds the canary"] = canary in text and not found.isError
            checks["search results are marked as data"] = "not instructions" in text
            checks["search is structured"] = bool(
                found.structuredContent and found.structuredContent["results"]
            )

            profile = await session.call_tool("read_memory", {"file": "USER.md"})
            checks["read_memory answers"] = not profile.isError and "text" in (
                profile.structuredContent or {}
            )
            history = await session.call_tool("recent_history", {"after": 0})
            entries = (history.structuredContent or {}).get("entries", [])
            checks["recent_history lists entries"] = len(entries) >= 1
            sessions = await session.call_tool("list_sessions", {})
            listed = (sessions.structuredContent or {}).get("sessions", [])
            checks["list_sessions lists the session"] = any(
                s["key"] == session_key for s in listed
            )
            one = await session.call_tool("read_session", {"key": session_key, "limit": 2})
            messages = (one.structuredContent or {}).get("messages", [])
            checks["read_session reads it"] = any(canary in m["content"] for m in messages)
            log = await session.call_tool("memory_log", {"limit": 5})
            checks["memory_log answers"] = not log.isError
            versions = (log.structuredContent or {}).get("versions", [])
            if versions:
                diff = await session.call_tool("memory_diff", {"version": versions[-1]["id"]})
                checks["memory_diff answers"] = not diff.isError
            else:
                missing = await session.call_tool("memory_diff", {"version": "0123abcd"})
                checks["memory_diff says there is no such version"] = bool(missing.isError)

            resources = (await session.list_resources()).resources
            uris = [str(r.uri) for r in resources]
            checks["resources listed"] = uris == [
                "memory://SOUL.md",
                "memory://USER.md",
                "memory://MEMORY.md",
            ]
            read = await session.read_resource("memory://USER.md")
            checks["a resource reads as read_memory does"] = bool(read.contents) and (
                read.contents[0].text == (profile.structuredContent or {}).get("text")
            )

            try:
                await session.call_tool("read_session", {"key": ""})
                checks["a bad argument is an error naming it"] = False
            except McpError as error:
                checks["a bad argument is an error naming it"] = "`key`" in str(error)
    report["ok"] = all(checks.values())
    return report


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    if mode == "stdio":
        program, workspace, canary, *extra = rest
        result = asyncio.run(main(mode, program, workspace, canary, "cli:direct", extra))
    else:
        url, secret, canary, session_key = rest
        result = asyncio.run(main(mode, url, secret, canary, session_key, []))
    print(json.dumps(result, indent=2))
    sys.exit(0 if result["ok"] else 1)
