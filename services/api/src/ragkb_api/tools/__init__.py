"""Agent tools (/v1/tools/...), context assembly (/v1/context) and MCP over the same tools."""
