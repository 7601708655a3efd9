"""nanobot-ai as the MCP host of `nanobot mcp`: its own configuration names the server, its
agent runs one turn against the model at the given URL, and this prints what it did.

Usage (the nanobot-ai peer's Python): host.py CONFIG_JSON WORKSPACE MESSAGE. Prints JSON:
the tools nanobot-ai registered and the turn's answer.
"""

import asyncio
import json
import sys

from nanobot.nanobot import Nanobot


async def main(config: str, workspace: str, message: str) -> dict:
    bot = Nanobot.from_config(config, workspace=workspace)
    try:
        result = await bot.run(message, session_key="cli:mcp-host")
        names = sorted(bot._loop.tools.tool_names)
        return {"tools": names, "answer": result.content}
    finally:
        await bot.aclose()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:4]))))
