"""The MCP server through the Python SDK's client at the current protocol revision (2026-07-28,
stateless: no session, each request on its own), as a test asks: MCP_URL and MCP_KEY name the
server and the owner's key; each result is printed as one JSON line."""
import asyncio
import json
import os
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


def say(what, value):
    print(json.dumps({"what": what, "value": value}), flush=True)


def text(result):
    return {"text": "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text"),
            "error": bool(result.is_error)}


async def main():
    headers = {"authorization": f"Bearer {os.environ['MCP_KEY']}"}
    async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
        transport = streamable_http_client(os.environ["MCP_URL"], http_client=http)
        async with Client(transport, mode="2026-07-28") as client:
            say("protocol", client.protocol_version)
            tools = await client.list_tools()
            say("tools", [t.name for t in tools.tools])
            look = {"evidence": "SUBGOAL 1 | evidence: none | intent: observe the page"}
            first = text(await client.call_tool("snapshot", look))
            say("snapshot", first)
            args = json.loads(sys.argv[1]) if len(sys.argv) > 1 else None
            if args is None:
                # The test reads the snapshot and sends the click's arguments on stdin.
                args = json.loads(sys.stdin.readline())
            say("click", text(await client.call_tool("click", args)))


asyncio.run(main())
