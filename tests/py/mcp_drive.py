"""Drives calvin-gateway with the official MCP Python SDK (mcp 2.x).

    python3 mcp_drive.py < scenario.json

scenario: {"transport": "stdio", "command": "...", "args": [...], "env": {...}}
       or {"transport": "http", "url": "http://127.0.0.1:PORT/sessions/ID/mcp"}
plus "steps": a list of
    {"op": "info"}                                   -> {"name", "instructions"} (initialize's answer)
    {"op": "list"}                                   -> {"tools": [...]}
    {"op": "call", "tool": "...", "args": {...}}     -> {"is_error", "text", "structured"}
      (with "timeout": seconds, a call not answered by then is abandoned and
       cancelled -> {"timed_out": true, "error"})
    {"op": "parallel", "calls": [{"tool", "args"}, ...]} -> {"results": [...]}
    {"op": "shell", "cmd": [...], "env": {...}, "cwd": "..."} -> {"code", "stdout", "stderr"}
      (a script run while the session is open, e.g. calvin-send-file)

Prints one JSON object per step, one per line, to stdout; what the SDK
logs (warnings and worse) goes to stderr.
"""

import asyncio
import json
import logging
import sys

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


def tool_json(tool):
    annotations = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else {}
    return {
        "name": tool.name,
        "description": tool.description,
        "annotations": annotations,
        "input_schema": tool.input_schema,
    }


def result_json(result):
    text = "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")
    return {
        "is_error": bool(result.is_error),
        "text": text,
        "structured": result.structured_content,
    }


async def run_steps(session, steps):
    init = await session.initialize()
    for step in steps:
        if step["op"] == "info":
            out = {"name": init.server_info.name, "instructions": init.instructions}
        elif step["op"] == "list":
            listed = await session.list_tools()
            out = {"tools": [tool_json(t) for t in listed.tools]}
        elif step["op"] == "call" and "timeout" in step:
            # Gives up after `timeout` seconds, as a CLI does; the SDK then
            # sends notifications/cancelled for the request.
            try:
                out = result_json(
                    await session.call_tool(
                        step["tool"], step.get("args", {}), read_timeout_seconds=step["timeout"]
                    )
                )
            except Exception as err:  # the SDK's timeout error
                out = {"timed_out": True, "error": str(err)}
        elif step["op"] == "call":
            out = result_json(await session.call_tool(step["tool"], step.get("args", {})))
        elif step["op"] == "parallel":
            results = await asyncio.gather(
                *(session.call_tool(c["tool"], c.get("args", {})) for c in step["calls"])
            )
            out = {"results": [result_json(r) for r in results]}
        elif step["op"] == "shell":
            proc = await asyncio.create_subprocess_exec(
                *step["cmd"],
                env=step.get("env"),
                cwd=step.get("cwd"),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            stdout, stderr = await proc.communicate()
            out = {"code": proc.returncode, "stdout": stdout.decode(), "stderr": stderr.decode()}
        else:
            raise ValueError(f"unknown op {step['op']}")
        print(json.dumps(out), flush=True)


async def main():
    scenario = json.load(sys.stdin)
    if scenario["transport"] == "stdio":
        params = StdioServerParameters(
            command=scenario["command"],
            args=scenario.get("args", []),
            env=scenario.get("env"),
            cwd=scenario.get("cwd"),
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await run_steps(session, scenario["steps"])
    else:
        async with streamable_http_client(scenario["url"]) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                await run_steps(session, scenario["steps"])


logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s %(levelname)s %(message)s")
asyncio.run(main())
