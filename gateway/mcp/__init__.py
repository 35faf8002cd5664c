"""The MCP servers declared in `mcp_servers:` (docs/mcp.md): their connections (`server`), the
set that follows the config (`pool`), and which of them a request may use (`access`)."""
